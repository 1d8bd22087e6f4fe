// The index-expression parser: grammar of docs/design.md §3, C++ integer semantics, canonical
// printing, and precise errors.
#include <metajit/error.h>
#include <metajit/metajit.h>
#include <pthread.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <limits>
#include <string>
#include <utility>
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

TEST_CASE("a negated comparison is its complement, so it stays affine for the emitters",
          "[index_expr]") {
  // A reindex condition's in-range test is ix_unary(Not, condition) (codegen/lowering.cc): a
  // causal mask's "!(i4 > i2)" must reach the emitter as "i4 <= i2", which it packs along the
  // reduction. The parser keeps the text's own tree.
  const std::vector<std::pair<std::string, IxKind>> cases = {
      {"i0 < i1", IxKind::Ge},    {"i0 <= i1", IxKind::Gt},
      {"i0 > i1", IxKind::Le},    {"i0 >= i1", IxKind::Lt},
      {"i0 == i1", IxKind::Ne},   {"i0 != i1", IxKind::Eq},
      {"!i0", IxKind::Ne},        {"!(i0 - i1)", IxKind::Ne},
      {"!(i0 < i1)", IxKind::Lt}, {"!(i0 < i1 && i1 > 0)", IxKind::And}};
  for (const auto& [inner, kind] : cases) {
    INFO("!(" << inner << ")");
    const IndexExprPtr e = ix_unary(IxKind::Not, parse_index_expr(inner, 2, true, "t"));
    CHECK(e->kind == kind);
    for (int64_t a = -2; a <= 2; ++a)
      for (int64_t b = -2; b <= 2; ++b) {
        std::vector<int64_t> vars = {a, b};
        CHECK(ix_eval(*e, vars.data()) ==
              !ix_eval(*parse_index_expr(inner, 2, true, "t"), vars.data()));
      }
  }
}

TEST_CASE("min, max and c ? a : b: clamping and choosing without division tricks", "[index_expr]") {
  CHECK(eval_text("min(i0, 3)", {5}) == 3);
  CHECK(eval_text("max(i0 - 1, 0)", {0}) == 0);
  CHECK(eval_text("min(max(i0*2-1, 0), 7)", {9}) == 7);
  CHECK(eval_text("i0 < 2 ? i1 : i0", {1, 8}) == 8);
  CHECK(eval_text("i0 < 2 ? i1 : i0", {4, 8}) == 4);
  CHECK(eval_text("(i0 < 2 && i1 > 1) ? 1 : 0", {1, 8}) == 1);
  CHECK(eval_text("i0 ? 10 : i1 == 0 ? 20 : 30", {0, 5}) == 30);  // right-associative
  CHECK(eval_text("1 + (i0 >= 3 ? 2 : 4) * 2", {3}) == 5);
  CHECK(eval_text("min(i0, 1) < 1 ? 7 : 9", {0}, true) == 7);  // in a condition too
  // A clamped window read, as bilinear upsampling reads its neighbours.
  Var x = array(std::vector<float>{10, 20, 30, 40}, {4});
  Var y = reindex(x, {6}, {"min(max(i0 - 1, 0), 3)"});
  CHECK(y.to_vector<float>() == std::vector<float>{10, 10, 20, 30, 40, 40});
  Var z = reindex(x, {4}, {"i0 % 2 == 0 ? i0 + 1 : i0 - 1"});
  CHECK(z.to_vector<float>() == std::vector<float>{20, 10, 40, 30});
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

TEST_CASE("the builders fold (x / c) * c + x % c to x, for negative x too", "[index_expr]") {
  // The parser keeps what was written; composing (substitution) rebuilds through the builders.
  // Pooling's gradient reads its input at such an index: the window reindex i*2+k composed with
  // its inverse i/2, i%2 (autograd of a reindex).
  auto rebuilt = [](const std::string& text, int vars) {
    std::vector<IndexExprPtr> ids;
    for (int k = 0; k < vars; ++k) ids.push_back(ix_var(k));
    return ix_substitute(parse_index_expr(text, vars, false, "t"), ids);
  };
  IndexExprPtr e = rebuilt("(i0 / 2) * 2 + i0 % 2", 1);
  CHECK(ix_to_string(*e) == "i0");
  CHECK(ix_to_string(*rebuilt("i0 % 3 + (i0 / 3) * 3", 1)) == "i0");
  CHECK(ix_to_string(*rebuilt("(i0 * 5 - 7) % 3 + (i0 * 5 - 7) / 3 * 3", 1)) == "((i0*5)-7)");
  IndexExprPtr composed = ix_substitute(parse_index_expr("(i0 / 2) * 2 + i0 % 2", 1, false, "t"),
                                        {parse_index_expr("i0 * 2 + i1", 2, false, "t")});
  CHECK(ix_to_string(*composed) == "((i0*2)+i1)");
  for (int64_t x : {-9, -7, -1, 0, 1, 2, 7, 9}) {
    const int64_t unfolded = (x / 2) * 2 + x % 2;  // C's truncating division
    CHECK(ix_eval(*e, &x) == unfolded);
  }
  // Different dividends or divisors, or a divisor that is not a constant: no fold.
  CHECK(rebuilt("i1 % 3 + (i1 + 4) / 3 * 3", 2)->kind == IxKind::Add);
  CHECK(rebuilt("(i0 / 2) * 3 + i0 % 3", 1)->kind == IxKind::Add);
  CHECK(rebuilt("(i0 / i1) * i1 + i0 % i1", 2)->kind == IxKind::Add);
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
  CHECK_THAT(msg("i0 > 0 ? i1 < 2 : 3", 2, false),  // a comparison outside the condition
             Contains("only allowed in overflow_conditions"));
  CHECK_THAT(msg("min(i0 < 1, 2)", 2, false), Contains("only allowed in overflow_conditions"));
  CHECK_THAT(msg("i0 ? 1", 2, false), Contains("missing ':'"));
  CHECK_THAT(msg("min(i0)", 2, false), Contains("missing ','"));
  CHECK_THAT(msg("max(i0, 1", 2, false), Contains("missing ')'"));
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

// ---- @eK(...): reads of extras (docs/design.md, "Data-dependent indexing") ----

namespace {

// Small arrays for ix_eval. A read at an index outside its array, or of an array that does not
// exist, is a bug of the evaluator (it must test the bounds first): recorded, and 0 returned,
// so that the test reports it instead of crashing.
class TestExtras : public IxExtras {
 public:
  TestExtras(std::vector<Shape> shapes, std::vector<std::vector<int64_t>> values)
      : shapes_(std::move(shapes)), values_(std::move(values)) {}
  const Shape& extra_shape(int64_t k) const override {
    if (k < 0 || size_t(k) >= shapes_.size()) {
      bad_ = "extra_shape(" + std::to_string(k) + ")";
      static const Shape none;
      return none;
    }
    return shapes_[size_t(k)];
  }
  int64_t extra_value(int64_t k, const int64_t* idx) const override {
    ++reads_;
    const Shape& s = extra_shape(k);
    int64_t off = 0;
    for (size_t a = 0; a < s.size(); ++a) {
      if (idx[a] < 0 || idx[a] >= s[a]) {
        bad_ = "extra_value(" + std::to_string(k) + ") at index " + std::to_string(idx[a]) +
               " of axis " + std::to_string(a);
        return 0;
      }
      off = off * s[a] + idx[a];
    }
    return values_[size_t(k)][size_t(off)];
  }
  mutable std::string bad_;  // the first out-of-bounds request, "" when none
  mutable int reads_ = 0;

 private:
  std::vector<Shape> shapes_;
  std::vector<std::vector<int64_t>> values_;
};

// extras[0]: [4] = {2, -1, INT64_MAX, 0}; extras[1]: [2, 3] = {0 1 2 / 3 4 INT64_MIN};
// extras[2]: [] = {7}.
TestExtras sample_extras() {
  return TestExtras(
      {{4}, {2, 3}, {}},
      {{2, -1, INT64_MAX, 0}, {0, 1, 2, 3, 4, std::numeric_limits<int64_t>::min()}, {7}});
}
const std::vector<int> kSampleRanks = {1, 2, 0};

IndexExprPtr parse_e(const std::string& s, int nv = 2, bool cond = true,
                     const std::vector<int>& ranks = kSampleRanks) {
  return parse_index_expr(s, nv, cond, "test", ranks);
}

int64_t eval_e(const std::string& s, std::vector<int64_t> vars, const TestExtras& ex) {
  vars.resize(std::max<size_t>(vars.size(), 2), 0);
  return ix_eval(*parse_e(s, int(vars.size())), vars.data(), nullptr, &ex);
}

std::string parse_error(const std::string& s, const std::vector<int>& ranks = kSampleRanks,
                        int nv = 2) {
  try {
    parse_index_expr(s, nv, true, "reindex: indexes[0]", ranks);
  } catch (const IndexExprError& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("@eK reads parse into Extra nodes and print canonically", "[index_expr][extras]") {
  auto p = [](const std::string& s) { return ix_to_string(*parse_e(s)); };
  CHECK(p("@e0(i0)") == "@e0(i0)");
  CHECK(p("@e1(i0, i1+1)") == "@e1(i0,(i1+1))");
  CHECK(p("@e2()") == "@e2()");
  CHECK(p("@e2( )") == "@e2()");
  // Whitespace between the tokens, not inside "@eK".
  CHECK(p("  @e1 ( i0 ,\ti1 )  ") == "@e1(i0,i1)");
  CHECK(p("@e0(i0)*2-@e1(1,2)") == "((@e0(i0)*2)-@e1(1,2))");
  CHECK(p("-@e0(i0)") == "(-@e0(i0))");
  // Nesting: reads in the arguments of reads.
  CHECK(p("@e1(@e0(i0), @e0(@e0(i1)))") == "@e1(@e0(i0),@e0(@e0(i1)))");
  CHECK(p("@e0((@e1(i0,i1)))") == "@e0(@e1(i0,i1))");
  // In conditions, with the comparison and logical operators.
  CHECK(p("@e0(i0) >= 2 && !(@e1(i0,i1) == i1)") == "((@e0(i0)>=2)&&(!(@e1(i0,i1)==i1)))");

  IndexExprPtr e = parse_e("@e1(i0, @e0(i1))");
  REQUIRE(e->kind == IxKind::Extra);
  CHECK(e->value == 1);
  REQUIRE(e->args.size() == 2);
  CHECK(e->args[0]->kind == IxKind::Var);
  CHECK(e->args[1]->kind == IxKind::Extra);
  CHECK(e->args[1]->value == 0);
  CHECK(e->depth == 3);
  CHECK(ix_reads_extras(*e));
  CHECK_FALSE(ix_reads_extras(*parse_e("i0+1")));

  // A printed form parses back to the same text.
  for (const char* s : {"@e1(i0, @e0(i1))", "@e2()+@e0(-i0%3)", "@e0(i0) < 1 || @e2() != i1",
                        "@e1(@e1(@e0(0),1),@e2())/(i0-1)"}) {
    INFO(s);
    const std::string printed = ix_to_string(*parse_e(s));
    CHECK(ix_to_string(*parse_e(printed)) == printed);
  }
  // More extras than are read, numbers with several digits.
  std::vector<int> many(12, 1);
  CHECK(ix_to_string(*parse_index_expr("@e11(@e10(i0))", 1, false, "t", many)) == "@e11(@e10(i0))");
}

TEST_CASE("@eK parse errors say what is wrong and where", "[index_expr][extras]") {
  // K names no extra.
  CHECK_THAT(parse_error("@e3(i0)"), Contains("@e3 names no extra (3 given)") &&
                                         Contains("@e0..@e2") && Contains("position 0") &&
                                         Contains("reindex: indexes[0]"));
  CHECK_THAT(parse_error("i0 + @e3(i0)"), Contains("names no extra") && Contains("position 5"));
  CHECK_THAT(parse_error("@e0(i0)", {}),
             Contains("@e0 names no extra (0 given)") && Contains("pass the arrays as extras"));
  CHECK_THAT(parse_error("@e999999(i0)"), Contains("@e999999 names no extra"));
  // The wrong number of arguments.
  CHECK_THAT(parse_error("@e0(i0, i1)"),
             Contains("@e0 given 2 argument(s)") && Contains("extras[0] has rank 1"));
  CHECK_THAT(parse_error("@e1(i0)"),
             Contains("@e1 given 1 argument(s)") && Contains("extras[1] has rank 2"));
  CHECK_THAT(parse_error("@e0()"), Contains("@e0 given 0 argument(s)"));
  CHECK_THAT(parse_error("@e2(0)"), Contains("@e2 given 1 argument(s)"));
  // Malformed reads.
  CHECK_THAT(parse_error("@"), Contains("'@' not followed by 'e'") && Contains("position 0"));
  CHECK_THAT(parse_error("i0+@"), Contains("'@' not followed by 'e'") && Contains("position 3"));
  CHECK_THAT(parse_error("@E0(i0)"), Contains("'@' not followed by 'e'"));
  CHECK_THAT(parse_error("@x"), Contains("'@' not followed by 'e'"));
  CHECK_THAT(parse_error("@e"), Contains("'@e' not followed by a number"));
  CHECK_THAT(parse_error("@e(i0)"), Contains("'@e' not followed by a number"));
  CHECK_THAT(parse_error("@e -1(i0)"), Contains("'@e' not followed by a number"));
  CHECK_THAT(parse_error("@ e0(i0)"), Contains("'@' not followed by 'e'"));
  CHECK_THAT(parse_error("@e0"), Contains("missing '(' after @e0"));
  CHECK_THAT(parse_error("@e0 i0"), Contains("missing '(' after @e0"));
  CHECK_THAT(parse_error("@e0[i0]"), Contains("missing '(' after @e0"));
  CHECK_THAT(parse_error("@e0(i0"), Contains("missing ')'"));
  CHECK_THAT(parse_error("@e1(i0, i1"), Contains("missing ')'"));
  CHECK_THAT(parse_error("@e1(i0,)"), Contains("unexpected character ')'"));
  CHECK_THAT(parse_error("@e1(,i0)"), Contains("unexpected character ','"));
  CHECK_THAT(parse_error("@e0(i0))"), Contains("unexpected ')'"));
  CHECK_THAT(parse_error("@e0(i5)"), Contains("index name 'i5' out of range"));
  CHECK_THAT(parse_error("@e0(1/0)"), Contains("division by the constant 0"));
  CHECK_THAT(parse_error("@e0(i0)@e0(i0)"), Contains("unexpected '@e0(i0)'"));
  // Comparisons inside a read's arguments are still only for conditions.
  CHECK_THAT(message_of<IndexExprError>(
                 [] { parse_index_expr("@e0(i0<1)", 2, false, "t", kSampleRanks); }),
             Contains("only allowed in overflow_conditions"));
  // The message lists @eK among the valid forms only where there are extras.
  CHECK_THAT(parse_error("k"), Contains("@eK(...) reads extras[K]"));
  CHECK_THAT(parse_error("k", {}), !Contains("@eK"));
}

TEST_CASE("nested @eK reads count toward the depth limit", "[index_expr][extras]") {
  auto nest = [](int n, const std::string& leaf) {
    std::string s;
    for (int k = 0; k < n; ++k) s += "@e0(";
    s += leaf;
    for (int k = 0; k < n; ++k) s += ")";
    return s;
  };
  const std::vector<int> one = {1};
  // 255 reads around a leaf: a tree 256 deep, the most the parser accepts.
  IndexExprPtr deepest = parse_index_expr(nest(255, "i0"), 1, false, "t", one);
  CHECK(deepest->depth == kMaxIndexExprDepth);
  for (int n : {256, 300, 800}) {
    INFO(n << " nested reads");
    CHECK_THAT(message_of<IndexExprError>(
                   [&] { parse_index_expr(nest(n, "i0"), 1, false, "reindex: indexes[0]", one); }),
               Contains("nested deeper than 256 levels") && Contains("reindex: indexes[0]"));
  }
  // Parentheses and reads together.
  std::string mixed;
  for (int k = 0; k < 200; ++k) mixed += "@e0((";
  mixed += "1";
  for (int k = 0; k < 200; ++k) mixed += "))";
  CHECK_THAT(message_of<IndexExprError>([&] { parse_index_expr(mixed, 1, false, "t", one); }),
             Contains("nested deeper than 256 levels"));
  // Arguments that are deep trees: the read is one level above its deepest argument.
  std::string chain = "i0";
  for (int k = 0; k < 254; ++k) chain += "+1";
  CHECK(parse_index_expr("@e0(" + chain + ")", 1, false, "t", one)->depth == 256);
  CHECK_THAT(message_of<IndexExprError>(
                 [&] { parse_index_expr("@e0(" + chain + "+1)", 1, false, "t", one); }),
             Contains("nested deeper than 256 levels"));
}

TEST_CASE("ix_eval reads extras inside their bounds only", "[index_expr][extras]") {
  const TestExtras ex = sample_extras();
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  CHECK(eval_e("@e0(i0)", {0}, ex) == 2);
  CHECK(eval_e("@e0(i0)", {1}, ex) == -1);
  CHECK(eval_e("@e0(i0)", {2}, ex) == kMax);
  CHECK(eval_e("@e1(i0, i1)", {1, 2}, ex) == kMin);
  CHECK(eval_e("@e1(i0, i1)", {1, 0}, ex) == 3);
  CHECK(eval_e("@e2()", {}, ex) == 7);
  // Outside the array: 0, and nothing is read.
  const int reads = ex.reads_;
  for (int64_t v : {int64_t(-1), int64_t(4), int64_t(5), kMin, kMax, int64_t(1) << 40})
    CHECK(eval_e("@e0(i0)", {v}, ex) == 0);
  CHECK(eval_e("@e1(i0, i1)", {2, 0}, ex) == 0);
  CHECK(eval_e("@e1(i0, i1)", {0, 3}, ex) == 0);
  CHECK(eval_e("@e1(i0, i1)", {-1, 1}, ex) == 0);
  CHECK(eval_e("@e1(i0, i1)", {1, kMin}, ex) == 0);
  CHECK(ex.reads_ == reads);
  // Nested: the inner value indexes the outer read. extras[0][3] = 0 -> extras[0][0] = 2;
  // extras[0][2] = INT64_MAX is outside extras[0] -> 0.
  CHECK(eval_e("@e0(@e0(i0))", {3}, ex) == 2);
  CHECK(eval_e("@e0(@e0(i0))", {2}, ex) == 0);
  CHECK(eval_e("@e0(@e0(i0)+1)", {2}, ex) == 0);  // INT64_MAX + 1 wraps to INT64_MIN: outside
  CHECK(eval_e("@e1(@e0(i0), @e0(i1)+3)", {1, 1}, ex) == 0);  // -1: outside
  CHECK(eval_e("@e1(@e0(3)+1, @e0(0))", {}, ex) == kMin);     // [1, 2]
  // Arithmetic on read values wraps, never traps.
  CHECK(eval_e("@e0(2)+1", {}, ex) == kMin);
  CHECK(eval_e("@e1(1,2)/-1", {}, ex) == kMin);
  CHECK(eval_e("@e1(1,2)%-1", {}, ex) == 0);
  CHECK(eval_e("i0/@e0(3)", {9}, ex) == 0);  // division by a read 0
  CHECK(eval_e("-@e1(1,2)", {}, ex) == kMin);
  CHECK(eval_e("@e0(i0) > 1 && @e2() == 7", {0}, ex) == 1);
  // Without extras a read is 0.
  CHECK(ix_eval(*parse_e("@e0(0)+5"), std::vector<int64_t>{0, 0}.data()) == 5);
  // A tree whose read does not match its array's rank (built in C++) reads nothing.
  IndexExprPtr wrong_rank = ix_extra(1, {ix_const(0)});
  CHECK(ix_eval(*wrong_rank, nullptr, nullptr, &ex) == 0);
  CHECK_FALSE(ix_extra_reads_in_range(*wrong_rank, nullptr, nullptr, ex));
  CHECK(ex.bad_ == "");
}

TEST_CASE("ix_extra_reads_in_range sees every read, also those whose value is unused",
          "[index_expr][extras]") {
  const TestExtras ex = sample_extras();
  auto in_range = [&](const std::string& s, std::vector<int64_t> vars) {
    vars.resize(2, 0);
    return ix_extra_reads_in_range(*parse_e(s), vars.data(), nullptr, ex);
  };
  CHECK(in_range("i0+1", {99}));  // no reads
  CHECK(in_range("@e0(i0)", {3}));
  CHECK_FALSE(in_range("@e0(i0)", {4}));
  CHECK_FALSE(in_range("@e0(i0)", {-1}));
  CHECK(in_range("@e1(i0, i1)", {1, 2}));
  CHECK_FALSE(in_range("@e1(i0, i1)", {1, 3}));
  CHECK(in_range("@e2()", {}));
  // Hidden by && / || / multiplication by 0: still a read outside.
  CHECK_FALSE(in_range("0 && @e0(i0) > 0", {7}));
  CHECK_FALSE(in_range("1 || @e0(i0)", {7}));
  CHECK_FALSE(in_range("@e0(i0)*0", {7}));
  CHECK_FALSE(in_range("i1 + 0*@e0(i0+i1)", {7, 0}));
  // Nested: the inner read outside, though the outer lands inside (a read outside gives 0).
  CHECK_FALSE(in_range("@e0(@e0(i0))", {9}));
  // The inner read inside, its value outside the outer array.
  CHECK_FALSE(in_range("@e0(@e0(i0))", {2}));  // extras[0][2] = INT64_MAX
  CHECK_FALSE(in_range("@e0(@e0(i0))", {1}));  // -1
  CHECK(in_range("@e0(@e0(i0))", {0}));        // extras[0][0] = 2
  CHECK(in_range("@e1(@e0(3), @e0(0))", {}));  // [0, 2]
  CHECK(ex.bad_ == "");
}

TEST_CASE("ix_extra_reads_valid is the same test, as an expression", "[index_expr][extras]") {
  const TestExtras ex = sample_extras();
  auto extent = [&](int64_t k, int axis) { return ix_const(ex.extra_shape(k)[size_t(axis)]); };
  // No reads: the constant 1.
  CHECK(ix_is_const(ix_extra_reads_valid(parse_e("i0*2+i1"), extent), 1));
  CHECK(ix_is_const(ix_extra_reads_valid(parse_e("@e2()+i0"), extent), 1));  // 0-d reads
  // One read: 0 <= arg < extent.
  CHECK(ix_to_string(*ix_extra_reads_valid(parse_e("@e0(i0)"), extent)) == "((i0>=0)&&(i0<4))");
  // The extents may be expressions (params in kernels).
  CHECK(ix_to_string(*ix_extra_reads_valid(
            parse_e("@e0(i1)"), [](int64_t, int) { return ix_param(3); })) == "((i1>=0)&&(i1<p3))");

  // Equal to ix_extra_reads_in_range everywhere, extremes included.
  const std::vector<std::string> exprs = {
      "@e0(i0)",
      "@e1(i0, i1)",
      "@e0(@e0(i0))",
      "@e1(@e0(i0), @e0(i1)+1)",
      "@e0(i0)*0 + @e1(i1, i0)",
      "i0 < 2 && @e0(i0-i1) > 0 || @e1(@e0(i1), i0) == 3",
      "@e0(@e1(@e0(i0) % 2, i1) - 1)",
      "@e2() + @e0(@e2() - 4 + i0)",
  };
  const std::vector<int64_t> values = {0,
                                       1,
                                       2,
                                       3,
                                       4,
                                       -1,
                                       5,
                                       std::numeric_limits<int64_t>::min(),
                                       std::numeric_limits<int64_t>::max()};
  for (const std::string& s : exprs) {
    INFO(s);
    IndexExprPtr e = parse_e(s);
    IndexExprPtr valid = ix_extra_reads_valid(e, extent);
    for (int64_t a : values)
      for (int64_t b : values) {
        INFO("i0 = " << a << ", i1 = " << b);
        const int64_t vars[2] = {a, b};
        CHECK(ix_eval(*valid, vars, nullptr, &ex) ==
              int64_t(ix_extra_reads_in_range(*e, vars, nullptr, ex)));
      }
  }
  CHECK(ex.bad_ == "");
}

TEST_CASE("substitution, renumbering and division checks see into reads", "[index_expr][extras]") {
  IndexExprPtr e = parse_e("@e1(i0*2, @e0(i1))");
  // Loop variables inside the arguments are substituted.
  IndexExprPtr s = ix_substitute(e, {ix_var(5), ix_param(2)});
  CHECK(ix_to_string(*s) == "@e1((i5*2),@e0(p2))");
  // Extras replaced (lowering: extras number -> buffer slot, or a parameter), the arguments
  // first.
  auto renumber = [](int64_t add) {
    return [add](int64_t k, std::vector<IndexExprPtr> args) {
      return ix_extra(int(k + add), std::move(args));
    };
  };
  IndexExprPtr r = ix_replace_extras(e, renumber(10));
  CHECK(ix_to_string(*r) == "@e11((i0*2),@e10(i1))");
  CHECK(ix_replace_extras(parse_e("i0+1"), renumber(0))->kind == IxKind::Add);
  CHECK(ix_to_string(*ix_replace_extras(parse_e("i0 + @e0(1)"), renumber(4))) == "(i0+@e4(1))");
  CHECK(ix_to_string(*ix_replace_extras(parse_e("i0 + @e0(1)"),
                                        [](int64_t, auto) { return ix_param(3); })) == "(i0+p3)");
  // Division by something that is not a non-zero constant, inside an argument.
  CHECK(ix_has_unsafe_division(*parse_e("@e0(i0/i1)")));
  CHECK(ix_has_unsafe_division(*parse_e("@e1(1, @e0(i0%i1))")));
  CHECK(ix_has_unsafe_division(*parse_e("i0/@e0(0)")));
  CHECK_FALSE(ix_has_unsafe_division(*parse_e("@e0(i0/2)")));
}
