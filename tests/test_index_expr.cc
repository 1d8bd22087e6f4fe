// The index-expression parser: grammar of design.md §3, C++ integer semantics, canonical
// printing, and precise errors.
#include <catch2/catch.hpp>

#include "meta_ops/error.h"
#include "meta_ops/index_expr.h"

using namespace metajit;
using Catch::Matchers::Contains;

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
