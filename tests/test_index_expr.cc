// The index-expression parser: grammar of docs/design.md §3, C++ integer semantics, canonical
// printing, and precise errors.
#include <metajit/error.h>
#include <pthread.h>

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "meta_ops/index_expr.h"
#include "support/exceptions.h"

using namespace metajit;
using Catch::Matchers::Contains;
using metajit_test::message_of;

namespace {

int64_t eval_text(const std::string& s, std::vector<int64_t> vars, bool cond = false) {
  return ix_eval(*parse_index_expr(s, int(vars.size()), cond, "test"), vars.data());
}

}  // namespace

TEST_CASE("arithmetic follows C++ precedence and truncating division", "[index_expr]") {
  CHECK(eval_text("i2*2-1+i4", {0, 0, 3, 0, 5}) == 10);
  CHECK(eval_text("1+2*3", {}) == 7);
  CHECK(eval_text("(1+2)*3", {}) == 9);
  CHECK(eval_text("-7/2", {}) == -3);
  CHECK(eval_text("-7%3", {}) == -1);
  CHECK(eval_text("7%-3", {}) == 1);
  CHECK(eval_text("--i0", {4}) == 4);
  CHECK(eval_text("-(i0-10)", {4}) == 6);
  CHECK(eval_text("  i0 *  3 ", {4}) == 12);
  CHECK(eval_text("i0/i1", {5, 0}) == 0);  // division by a runtime zero never traps
  CHECK(eval_text("i0%i1", {5, 0}) == 0);
}

TEST_CASE("conditions: comparisons, logic, bare integers", "[index_expr]") {
  CHECK(eval_text("i0 < 2 && i1 >= 3", {1, 3}, true) == 1);
  CHECK(eval_text("i0 < 2 && i1 >= 3", {2, 3}, true) == 0);
  CHECK(eval_text("i0 == 1 || !(i1 != 3)", {0, 3}, true) == 1);
  CHECK(eval_text("(i1-i3)%2", {0, 5, 0, 2}, true) == 1);
  CHECK(eval_text("i0 <= i1 == 1", {1, 2}, true) == 1);
}

TEST_CASE("canonical text is stable and distinguishes structure", "[index_expr]") {
  auto p = [](const std::string& s) { return ix_to_string(*parse_index_expr(s, 3, true, "t")); };
  CHECK(p("i0 + i1*2") == p("i0+(i1*2)"));
  CHECK(p("i0 + i1*2") != p("(i0+i1)*2"));
  CHECK(p("i0<1") != p("i0<=1"));
}

TEST_CASE("substitution and folding", "[index_expr]") {
  IndexExprPtr e = parse_index_expr("i0*2+i1", 2, false, "t");
  IndexExprPtr s = ix_substitute(e, {ix_const(3), ix_var(7)});
  int64_t vars[8] = {0, 0, 0, 0, 0, 0, 0, 10};
  CHECK(ix_eval(*s, vars) == 16);
  CHECK(ix_is_const(ix_binary(IxKind::Mul, ix_var(0), ix_const(0)), 0));
  CHECK(ix_binary(IxKind::Add, ix_var(1), ix_const(0))->kind == IxKind::Var);
}

TEST_CASE("parser errors name the context, the position and what is valid", "[index_expr]") {
  auto msg = [](const std::string& s, int nv, bool cond) {
    try {
      parse_index_expr(s, nv, cond, "reindex: indexes[0]");
    } catch (const IndexExprError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK_THAT(msg("k0", 2, false), Contains("unknown name 'k0'") &&
                                      Contains("reindex: indexes[0]") && Contains("i0..i1"));
  CHECK_THAT(msg("i3", 2, false), Contains("out of range"));
  CHECK_THAT(msg("i0 i1", 2, false), Contains("position 3"));
  CHECK_THAT(msg("i0 +", 2, false), Contains("unexpected end"));
  CHECK_THAT(msg("(i0", 2, false), Contains("missing ')'"));
  CHECK_THAT(msg("i0 < 1", 2, false), Contains("only allowed in overflow_conditions"));
  CHECK_THAT(msg("i0 / 0", 2, false), Contains("division by the constant 0"));
  CHECK_THAT(msg("", 2, false), Contains("empty expression"));
  CHECK_THAT(msg("i0; system(\"x\")", 2, false), Contains("unexpected"));
  CHECK_THAT(msg("i0 $ 1", 2, false), Contains("unexpected"));
  CHECK_THAT(msg("2i0", 2, false), Contains("malformed number"));
  CHECK_THAT(msg("i00000000", 2, false), Contains("unknown name"));
  CHECK_THAT(msg(std::string(5000, '1'), 2, false), Contains("too long"));
}

// Found by ASan and a fuzzer on the parser: inputs under the 4096-character limit used to
// recurse once per character and overflow an 8 MB stack (and a plain build's 1 MB thread
// stack). Each is now an IndexExprError, also when parsed on a thread with a small stack.
TEST_CASE("nesting deeper than the limit is an error, not a stack overflow", "[index_expr]") {
  auto repeat = [](const std::string& s, int n) {
    std::string out;
    for (int k = 0; k < n; ++k) out += s;
    return out;
  };
  const std::vector<std::string> deep = {
      repeat("(", 2047) + "1" + repeat(")", 2047),
      repeat("-", 4095) + "1",
      repeat("!", 4095) + "1",
      repeat("-(", 1000) + "i0" + repeat(")", 1000),
      "i0" + repeat("+i1", 1000),
      "i0" + repeat("*i1", 1000),
      "i0" + repeat("<i1", 1000),
      "i0" + repeat("||i1", 1000),
  };
  std::vector<std::string> messages(deep.size());
  // A 1 MB stack, as small as a worker thread's may be: unbounded recursion would crash.
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 1024 * 1024);
  pthread_t thread;
  struct Job {
    const std::vector<std::string>* inputs;
    std::vector<std::string>* messages;
  } job{&deep, &messages};
  auto body = [](void* arg) -> void* {
    Job& j = *static_cast<Job*>(arg);
    for (size_t k = 0; k < j.inputs->size(); ++k) {
      try {
        parse_index_expr((*j.inputs)[k], 2, true, "reindex: overflow_conditions[0]");
        (*j.messages)[k] = "no error";
      } catch (const IndexExprError& e) {
        (*j.messages)[k] = e.what();
      } catch (const std::exception& e) {  // recorded and checked after the join, like the rest
        (*j.messages)[k] = std::string("not an IndexExprError: ") + e.what();
      }
    }
    return nullptr;
  };
  REQUIRE(pthread_create(&thread, &attr, body, &job) == 0);
  pthread_join(thread, nullptr);
  pthread_attr_destroy(&attr);
  for (size_t k = 0; k < deep.size(); ++k) {
    INFO(deep[k].substr(0, 40));
    CHECK_THAT(messages[k], Contains("nested deeper than 256 levels") &&
                                Contains("reindex: overflow_conditions[0]"));
  }

  // Up to the limit is fine, and the tree records its depth.
  IndexExprPtr e = parse_index_expr(repeat("(", 200) + "i0" + repeat(")", 200), 2, false, "x");
  CHECK(e->kind == IxKind::Var);
  IndexExprPtr chain = parse_index_expr("i0" + repeat("+i1", 200), 2, false, "x");
  CHECK(chain->depth == 201);
  CHECK(ix_eval(*chain, std::vector<int64_t>{5, 1}.data()) == 205);

  // Found by fuzzing: a unary chain as long as the limit built a tree one level deeper than it
  // (the kernel-spec reader then refused that kernel's spec). Every tree the parser returns is
  // within the limit; the longest unary chain has 255 operators above its operand.
  for (const char* op : {"-", "!"}) {
    INFO(op << " x 255 and x 256");
    IndexExprPtr longest = parse_index_expr(repeat(op, 255) + "1", 2, true, "x");
    CHECK(longest->depth == kMaxIndexExprDepth);
    CHECK_THAT(
        message_of<IndexExprError>([&] { parse_index_expr(repeat(op, 256) + "1", 2, true, "x"); }),
        Contains("nested deeper than 256 levels"));
  }
}
