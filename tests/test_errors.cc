// Bad input raises a typed metajit::Error whose message names the op, the shapes and what is
// valid, and leaves nothing behind (no compile, no cache entry).
#include <metajit/metajit.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "cache/cache_store.h"
#include "support/exceptions.h"
#include "support/files.h"
#include "support/scoped_env.h"

using namespace metajit;
using Catch::Matchers::Contains;
using metajit_test::message_of;

TEST_CASE("mismatched shapes in a binary op", "[errors]") {
  Var a = zeros({2, 3}), b = zeros({4});
  std::string m = message_of<ShapeError>([&] { a + b; });
  CHECK_THAT(m, Contains("add") && Contains("[2, 3]") && Contains("[4]") && Contains("equal or 1"));
  CHECK_THROWS_AS(where(zeros({2}) > 0.0, a, b), ShapeError);
  CHECK_THROWS_AS(matmul(zeros({2, 3}), zeros({4, 5})), ShapeError);
  CHECK_THAT(message_of<ShapeError>([&] {
               matmul(zeros({2, 3}), zeros({4, 5}));
             }),
             Contains("matmul") && Contains("inner dimensions 3 and 4"));
  CHECK_THROWS_AS(broadcast_to(zeros({3}), {4, 2}), ShapeError);
  CHECK_THROWS_AS(reshape(zeros({2, 3}), {4, 2}), ShapeError);
  CHECK_THROWS_AS(conv2d(zeros({1, 3, 8, 8}), zeros({4, 2, 3, 3})), ShapeError);
  CHECK_THROWS_AS(full({2, -1}, 1.0), ShapeError);
}

TEST_CASE("axis out of range", "[errors]") {
  Var x = zeros({2, 3});
  std::string m = message_of<ShapeError>([&] { sum(x, {2}); });
  CHECK_THAT(m,
             Contains("reduce") && Contains("axis 2") && Contains("[2, 3]") && Contains("-2..1"));
  CHECK_THROWS_AS(sum(x, {-3}), ShapeError);
  CHECK_THROWS_AS(sum(x, {1, -1}), ShapeError);  // the same axis twice
  CHECK_THROWS_AS(softmax(x, 5), ShapeError);
  CHECK_THROWS_AS(transpose(x, {0, 0}), ShapeError);
  CHECK_THROWS_AS(broadcast_to(x, {2, 3, 4}, {7}), ShapeError);
}

TEST_CASE("reindex with the wrong number of indexes", "[errors]") {
  Var x = zeros({2, 3});
  std::string m = message_of<IndexExprError>([&] { reindex(x, {3, 2}, {"i1"}); });
  CHECK_THAT(m, Contains("reindex") && Contains("[2, 3]") && Contains("expected 2"));
  CHECK_THROWS_AS(reindex_reduce(x, ReduceOp::Add, {3}, {"i0", "i1"}), IndexExprError);
}

TEST_CASE("index expressions: unknown names, bad syntax, trailing garbage", "[errors]") {
  Var x = zeros({2, 3});
  std::string m = message_of<IndexExprError>([&] { reindex(x, {3, 2}, {"j1", "i0"}); });
  CHECK_THAT(m, Contains("unknown name 'j1'") && Contains("indexes[0]") && Contains("i0..i1"));
  CHECK_THAT(message_of<IndexExprError>([&] {
               reindex(x, {3, 2}, {"i1", "i0 i1"});
             }),
             Contains("unexpected 'i1'") && Contains("indexes[1]"));
  CHECK_THROWS_AS(reindex(x, {3, 2}, {"i1", "i0+"}), IndexExprError);
  CHECK_THROWS_AS(reindex(x, {3, 2}, {"i1", "(i0"}), IndexExprError);
  CHECK_THROWS_AS(reindex(x, {3, 2}, {"i1", ""}), IndexExprError);
  CHECK_THROWS_AS(reindex(x, {3, 2}, {"i2", "i0"}), IndexExprError);  // only i0, i1 exist
  CHECK_THROWS_AS(reindex(x, {3, 2}, {"i1/0", "i0"}), IndexExprError);
  CHECK_THROWS_AS(reindex(x, {3, 2}, {"i1<2", "i0"}), IndexExprError);  // conditions only
  CHECK_THROWS_AS(reindex(x, {3, 2}, {"i1", "i0"}, 0, {"i0 <"}), IndexExprError);
  CHECK_THROWS_AS(reindex(x, {3, 2}, {"i1", "99999999999999999999"}), IndexExprError);
}

TEST_CASE("code cannot be injected through an index string", "[errors]") {
  Var x = zeros({2, 3});
  reset_stats();
  const std::string attack = "i0); system(\"touch /tmp/metajit-pwned\"); (0";
  std::string m = message_of<IndexExprError>([&] { reindex(x, {2, 3}, {attack, "i1"}); });
  CHECK_THAT(m, Contains("reindex") && Contains("indexes[0]"));
  CHECK_THROWS_AS(reindex(x, {2, 3}, {"i0", "i1"}, 0, {"i0;exit(1)"}), IndexExprError);
  CHECK_THROWS_AS(reindex(x, {2, 3}, {"i0", "i1 /* */"}), IndexExprError);
  CHECK(stats().kernels_compiled == 0);
  CHECK_FALSE(std::filesystem::exists("/tmp/metajit-pwned"));
}

TEST_CASE("to_vector and item with the wrong type or size", "[errors]") {
  Var x = zeros({2, 3});
  std::string m = message_of<DTypeError>([&] { x.to_vector<int32_t>(); });
  CHECK_THAT(m, Contains("to_vector") && Contains("float32") && Contains("int32"));
  CHECK_THROWS_AS(arange(3).to_vector<float>(), DTypeError);
  CHECK_THROWS_AS((x > 0.0).to_vector<int32_t>(), DTypeError);
  CHECK_THROWS_AS(x.item<float>(), ShapeError);
  CHECK_THROWS_AS(sum(x).item<double>(), DTypeError);
}

TEST_CASE("array() with the wrong data size", "[errors]") {
  std::string m = message_of<ShapeError>([] { array<float>({1, 2, 3}, {2, 2}); });
  CHECK_THAT(m, Contains("array") && Contains("3 values") && Contains("[2, 2]") && Contains("4"));
}

TEST_CASE("undefined Vars are errors, not crashes", "[errors]") {
  Var undefined;
  CHECK_THROWS_AS(undefined + 1.0, Error);
  CHECK_THROWS_AS(eval({undefined}), Error);
  CHECK_THROWS_AS(sum(undefined), Error);
}

TEST_CASE("bad operator arguments", "[errors]") {
  CHECK_THROWS_AS(conv2d(zeros({1, 1, 4, 4}), zeros({1, 1, 3, 3}), 0), ShapeError);
  CHECK_THROWS_AS(max_pool2d(zeros({1, 1, 4, 4}), 2, 2, 3), ShapeError);
  CHECK_THROWS_AS(arange(-1), ShapeError);
  CHECK_THROWS_AS(rand({2}, 0, DType::Int32), DTypeError);
  CHECK_THROWS_AS(reindex_reduce(zeros({2}), ReduceOp::Mean, {2}, {"i0"}), Error);
}

TEST_CASE("a missing compiler is a CompileError naming the command", "[errors][compiler]") {
  metajit_test::TempDir cache;
  metajit_test::ScopedEnv dir("METAJIT_CACHE_DIR", cache.path().string());
  metajit_test::ScopedEnv cxx("METAJIT_CXX", "/nonexistent/metajit-no-such-cc");
  Var y = exp(arange(5, DType::Float32)) * 3.0;
  CHECK_THAT(message_of<CompileError>([&] { eval({y}); }), Contains("metajit-no-such-cc"));
  CacheStore store(cache.path());
  CHECK(store.list().empty());
}

TEST_CASE("a compiler that fails is a CompileError with command, output and kept source",
          "[errors][compiler]") {
  metajit_test::TempDir cache;
  // A fake compiler: answers the identity queries like g++ but fails every compilation.
  std::filesystem::path fake = cache.path() / "fake-cc";
  {
    std::ofstream f(fake);
    f << "#!/bin/sh\n"
         "for a in \"$@\"; do case \"$a\" in --version) exec g++ --version;; -E) exec g++ \"$@\";; "
         "esac; done\n"
         "echo 'fake-cc: error: refusing to compile' >&2\nexit 3\n";
  }
  std::filesystem::permissions(fake, std::filesystem::perms::owner_all);
  metajit_test::ScopedEnv dir("METAJIT_CACHE_DIR", (cache.path() / "c").string());
  metajit_test::ScopedEnv cxx("METAJIT_CXX", fake.string());
  Var y = tanh(arange(7, DType::Float32)) - 0.5;
  try {
    eval({y});
    FAIL("expected CompileError");
  } catch (const CompileError& e) {
    CHECK_THAT(std::string(e.what()), Contains("fake-cc") && Contains("exit status 3"));
    CHECK_THAT(e.command(), Contains("fake-cc") && Contains("kernel.cc"));
    CHECK_THAT(e.output(), Contains("refusing to compile"));
    CHECK(std::filesystem::exists(e.source_path()));
  }
  CacheStore store(cache.path() / "c");
  CHECK(store.list().empty());  // nothing installed
}
