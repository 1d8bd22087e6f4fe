#include "meta_ops/index_expr.h"

#include <metajit/error.h>

#include <algorithm>
#include <cctype>
#include <limits>
#include <optional>
#include <utility>

#include "base/check.h"

namespace metajit {
namespace {

int64_t safe_div(int64_t a, int64_t b) {
  if (b == 0) return 0;
  if (b == -1) return int64_t(0ULL - uint64_t(a));  // avoids INT64_MIN / -1 trapping
  return a / b;
}
int64_t safe_mod(int64_t a, int64_t b) {
  if (b == 0 || b == -1) return 0;
  return a % b;
}

// Out of line: the parser's recursive functions call it, and its temporaries would otherwise
// sit in each of their frames.
[[gnu::noinline]] IndexExprPtr make(IxKind k, int64_t v, IndexExprPtr a = {}, IndexExprPtr b = {},
                                    IndexExprPtr c = {}) {
  auto e = std::make_shared<IndexExpr>();
  e->kind = k;
  e->value = v;
  e->a = std::move(a);
  e->b = std::move(b);
  e->c = std::move(c);
  for (const IndexExprPtr* child : {&e->a, &e->b, &e->c})
    if (*child) e->depth = std::max(e->depth, (*child)->depth + 1);
  return e;
}

// Recursive-descent parser. Precedence, lowest first: || && (== !=) (< <= > >=) (+ -)
// (* / %) unary(- + !) primary.
class Parser {
 public:
  Parser(std::string_view text, int num_vars, bool condition, const std::string& context,
         const std::vector<int>& extra_ranks)
      : s_(text),
        num_vars_(num_vars),
        condition_(condition),
        context_(context),
        extra_ranks_(extra_ranks) {}

  IndexExprPtr parse() {
    skip_ws();
    if (pos_ >= s_.size())
      fail("empty expression", "an integer expression over i0..i" + std::to_string(num_vars_ - 1));
    IndexExprPtr e = parse_ternary();
    skip_ws();
    if (pos_ < s_.size())
      fail("unexpected '" + std::string(s_.substr(pos_, 12)) + "'",
           "an operator or the end of the expression");
    return e;
  }

 private:
  // Error paths are kept out of line: the recursive functions then need no room for the
  // message strings in each frame (ASan builds give every local its own redzone).
  [[noreturn, gnu::noinline, gnu::cold]] void fail(const std::string& what,
                                                   const std::string& expected) {
    throw IndexExprError(context_ + ": " + what + " at position " + std::to_string(pos_) +
                         " in \"" + std::string(s_) + "\"; expected " + expected +
                         " (names are i0..i" + std::to_string(num_vars_ - 1) +
                         "; operators + - * / % ( ) min(a, b) max(a, b) c ? a : b" +
                         (condition_ ? " < <= > >= == != && || !" : "") +
                         (extra_ranks_.empty() ? "" : "; @eK(...) reads extras[K]") + ")");
  }
  void skip_ws() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  [[gnu::noinline]] bool eat(std::string_view tok) {
    skip_ws();
    if (s_.substr(pos_, tok.size()) == tok) {
      pos_ += tok.size();
      return true;
    }
    return false;
  }
  [[gnu::noinline]] bool peek(std::string_view tok) {
    skip_ws();
    return s_.substr(pos_, tok.size()) == tok;
  }
  // Comparisons and logic in an index expression are allowed only as the condition of a ?:
  // (parse_ternary checks, once it knows whether a '?' follows, that they were one).
  void need_condition(std::string_view op) {
    if (condition_) return;
    if (!in_ternary_condition_) not_a_condition(op);
    if (first_condition_op_.empty()) first_condition_op_ = op;  // a static token's text
  }
  [[noreturn, gnu::noinline, gnu::cold]] void not_a_condition(std::string_view op) {
    fail("operator '" + std::string(op) + "' is only allowed in overflow_conditions",
         "an integer expression");
  }

  // Binary operators by precedence climbing: one function for every level, so that each
  // parenthesis costs four stack frames (ternary, binary, unary, primary), not one per level.
  // Sanitizer builds have large frames, and a worker thread's stack may be 1 MB.
  struct BinaryOperator {
    std::string_view token;
    IxKind kind;
    int level;  // lowest binds loosest: || && (== !=) (< <= > >=) (+ -) (* / %)
    bool condition_only;
  };
  static constexpr BinaryOperator kBinaryOperators[] = {
      // Two-character tokens before their one-character prefixes.
      {"||", IxKind::Or, 0, true},  {"&&", IxKind::And, 1, true}, {"==", IxKind::Eq, 2, true},
      {"!=", IxKind::Ne, 2, true},  {"<=", IxKind::Le, 3, true},  {">=", IxKind::Ge, 3, true},
      {"<", IxKind::Lt, 3, true},   {">", IxKind::Gt, 3, true},   {"+", IxKind::Add, 4, false},
      {"-", IxKind::Sub, 4, false}, {"*", IxKind::Mul, 5, false}, {"/", IxKind::Div, 5, false},
      {"%", IxKind::Mod, 5, false}};

  const BinaryOperator* peek_binary() {
    for (const BinaryOperator& op : kBinaryOperators)
      if (peek(op.token)) return &op;
    return nullptr;
  }

  // cond ? a : b, the loosest operator, right-associative. In an index expression (not an
  // overflow condition) the comparisons and logic before a '?' are its condition, and nowhere
  // else. Its frame is one of the four each parenthesis level adds (up to kMaxIndexExprDepth,
  // and sanitizer builds pad every local), so it keeps few, small locals: the branches are
  // parsed out of line.
  IndexExprPtr parse_ternary() {
    const bool saved = in_ternary_condition_;
    const std::string_view saved_op = first_condition_op_;
    first_condition_op_ = {};
    in_ternary_condition_ = true;
    IndexExprPtr cond = parse_binary(0);
    in_ternary_condition_ = saved;
    const std::string_view seen = first_condition_op_;
    first_condition_op_ = saved_op;
    if (eat("?")) return parse_branches(std::move(cond));
    // Inside an enclosing ?:'s condition (a parenthesis there) it is that condition's part.
    if (!seen.empty() && !condition_ && !saved) not_a_condition(seen);
    if (first_condition_op_.empty()) first_condition_op_ = seen;
    return cond;
  }
  // After "cond ?": the two values.
  [[gnu::noinline]] IndexExprPtr parse_branches(IndexExprPtr cond) {
    Level level(*this);
    IndexExprPtr a = parse_ternary();
    if (!eat(":")) fail("missing ':' of a ?:", "':' and the value when the condition is false");
    IndexExprPtr b = parse_ternary();
    return checked(ix_select(std::move(cond), std::move(a), std::move(b)));
  }

  // Operands joined by operators of `min_level` or tighter, left-associative.
  IndexExprPtr parse_binary(int min_level) {
    IndexExprPtr e = parse_unary();
    for (const BinaryOperator* op; (op = peek_binary()) && op->level >= min_level;) {
      if (op->condition_only) need_condition(op->token);
      eat(op->token);
      const size_t at = pos_;
      IndexExprPtr rhs = parse_binary(op->level + 1);
      if ((op->kind == IxKind::Div || op->kind == IxKind::Mod) && rhs->kind == IxKind::Const &&
          rhs->value == 0) {
        division_by_zero(at);
      }
      e = checked(make(op->kind, 0, e, rhs));
    }
    return e;
  }
  // Each recursive step (a unary operator, an opening parenthesis) enters one level; the
  // limit is checked before recursing, so "((((..." or "----...1" cannot exhaust the stack.
  struct Level {
    Parser& p;
    explicit Level(Parser& parser) : p(parser) {
      if (++p.nesting_ > kMaxIndexExprDepth) p.too_deep();
    }
    ~Level() { --p.nesting_; }
  };
  [[noreturn, gnu::noinline, gnu::cold]] void division_by_zero(size_t at) {
    pos_ = at;
    fail("division by the constant 0", "a non-zero divisor");
  }
  [[noreturn, gnu::noinline, gnu::cold]] void too_deep() {
    fail("expression nested deeper than " + std::to_string(kMaxIndexExprDepth) + " levels",
         "a flatter expression");
  }
  // Chains such as "i0+i0+...+i0" are parsed by loops but still build deep trees.
  IndexExprPtr checked(IndexExprPtr e) {
    if (e->depth > kMaxIndexExprDepth) too_deep();
    return e;
  }

  IndexExprPtr parse_unary() {
    std::optional<IxKind> op;  // nullopt: unary plus
    if (eat("-")) {
      op = IxKind::Neg;
    } else if (eat("+")) {
    } else if (peek("!") && !peek("!=")) {
      need_condition("!");
      eat("!");
      op = IxKind::Not;
    } else {
      return parse_primary();
    }
    Level level(*this);
    IndexExprPtr operand = parse_unary();
    // The Level bounds the recursion; the tree also grows by this node, one deeper than its
    // operand (found by fuzzing: 256 minus signs before a literal made a tree of depth 257).
    return op ? checked(make(*op, 0, std::move(operand))) : operand;
  }
  [[gnu::noinline]] IndexExprPtr parse_primary() {
    skip_ws();
    if (pos_ >= s_.size()) unexpected();
    const char c = s_[pos_];
    if (c == '(') {
      Level level(*this);
      ++pos_;
      IndexExprPtr e = parse_ternary();
      if (!eat(")")) missing_parenthesis();
      return e;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) return parse_number();
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') return parse_name();
    if (c == '@') return parse_extra();
    unexpected();
  }
  // @eK(a, b, ...): K names an extra, one argument per axis of it.
  IndexExprPtr parse_extra() {
    const size_t start = pos_;
    ++pos_;
    if (pos_ >= s_.size() || s_[pos_] != 'e') bad_extra(start, "'@' not followed by 'e'");
    ++pos_;
    int64_t k = 0;
    size_t digits = 0;
    while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_])) && digits < 6) {
      k = k * 10 + (s_[pos_++] - '0');
      ++digits;
    }
    if (digits == 0) bad_extra(start, "'@e' not followed by a number");
    if (k >= int64_t(extra_ranks_.size())) {
      pos_ = start;
      fail("@e" + std::to_string(k) + " names no extra (" + std::to_string(extra_ranks_.size()) +
               " given)",
           extra_ranks_.empty() ? std::string("no @e: pass the arrays as extras")
                                : "@e0..@e" + std::to_string(extra_ranks_.size() - 1));
    }
    if (!eat("(")) bad_extra(start, "missing '(' after @e" + std::to_string(k));
    Level level(*this);
    std::vector<IndexExprPtr> args;
    if (!eat(")")) {
      do {
        args.push_back(parse_ternary());
      } while (eat(","));
      if (!eat(")")) missing_parenthesis();
    }
    const int rank = extra_ranks_[size_t(k)];
    if (int(args.size()) != rank) {
      pos_ = start;
      fail("@e" + std::to_string(k) + " given " + std::to_string(args.size()) + " argument(s)",
           std::to_string(rank) + " (extras[" + std::to_string(k) + "] has rank " +
               std::to_string(rank) + ")");
    }
    return checked(ix_extra(int(k), std::move(args)));
  }
  [[noreturn, gnu::noinline, gnu::cold]] void bad_extra(size_t at, const std::string& what) {
    pos_ = at;
    fail(what, "@eK(a, b, ...) reading extras[K]");
  }
  [[noreturn, gnu::noinline, gnu::cold]] void missing_parenthesis() { fail("missing ')'", "')'"); }
  [[noreturn, gnu::noinline, gnu::cold]] void unexpected() {
    if (pos_ >= s_.size()) fail("unexpected end", "a number, a name or '('");
    fail(std::string("unexpected character '") + s_[pos_] + "'", "a number, a name or '('");
  }
  // Leaves: not recursive, and out of line so that their locals are not in every level's frame.
  [[gnu::noinline]] IndexExprPtr parse_number() {
    {
      size_t start = pos_;
      int64_t v = 0;
      while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) {
        int d = s_[pos_] - '0';
        if (v > (std::numeric_limits<int64_t>::max() - d) / 10) {
          pos_ = start;
          fail("integer literal too large", "a literal that fits in int64");
        }
        v = v * 10 + d;
        ++pos_;
      }
      if (pos_ < s_.size() &&
          (std::isalpha(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_')) {
        fail("malformed number", "a decimal integer literal");
      }
      return make(IxKind::Const, v);
    }
  }
  [[gnu::noinline]] IndexExprPtr parse_name() {
    {
      size_t start = pos_;
      while (pos_ < s_.size() &&
             (std::isalnum(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_'))
        ++pos_;
      std::string name(s_.substr(start, pos_ - start));
      if ((name == "min" || name == "max") && peek("(")) return parse_min_max(name == "min");
      bool is_index = name.size() >= 2 && name[0] == 'i' && name.size() <= 6;
      for (size_t k = 1; is_index && k < name.size(); ++k)
        is_index = std::isdigit(static_cast<unsigned char>(name[k]));
      if (!is_index) {
        pos_ = start;
        fail("unknown name '" + name + "'", "i0..i" + std::to_string(num_vars_ - 1));
      }
      int k = std::stoi(name.substr(1));
      if (k >= num_vars_) {
        pos_ = start;
        fail("index name '" + name + "' out of range", "i0..i" + std::to_string(num_vars_ - 1));
      }
      return make(IxKind::Var, k);
    }
  }

  // min(a, b) / max(a, b), after the name.
  IndexExprPtr parse_min_max(bool is_min) {
    Level level(*this);
    eat("(");
    IndexExprPtr a = parse_ternary();
    if (!eat(",")) fail("missing ',' in min/max", "min(a, b) or max(a, b)");
    IndexExprPtr b = parse_ternary();
    if (!eat(")")) missing_parenthesis();
    return checked(make(is_min ? IxKind::Min : IxKind::Max, 0, std::move(a), std::move(b)));
  }

  std::string_view s_;
  size_t pos_ = 0;
  int nesting_ = 0;
  bool in_ternary_condition_ = false;    // parsing what may be the condition of a ?:
  std::string_view first_condition_op_;  // a comparison/logic operator seen there (a token)
  int num_vars_;
  bool condition_;
  const std::string& context_;
  const std::vector<int>& extra_ranks_;
};

}  // namespace

const char* ix_operator_text(IxKind k) {
  switch (k) {
    case IxKind::Add:
      return "+";
    case IxKind::Sub:
      return "-";
    case IxKind::Mul:
      return "*";
    case IxKind::Div:
      return "/";
    case IxKind::Mod:
      return "%";
    case IxKind::Lt:
      return "<";
    case IxKind::Le:
      return "<=";
    case IxKind::Gt:
      return ">";
    case IxKind::Ge:
      return ">=";
    case IxKind::Eq:
      return "==";
    case IxKind::Ne:
      return "!=";
    case IxKind::And:
      return "&&";
    case IxKind::Or:
      return "||";
    default:
      return "?";
  }
}

IndexExprPtr parse_index_expr(std::string_view text, int num_vars, bool condition,
                              const std::string& context, const std::vector<int>& extra_ranks) {
  if (text.size() > kMaxIndexExprLength)
    throw IndexExprError(context + ": expression of " + std::to_string(text.size()) +
                         " characters is too long (at most " + std::to_string(kMaxIndexExprLength) +
                         ")");
  return Parser(text, num_vars, condition, context, extra_ranks).parse();
}

IndexExprPtr ix_const(int64_t v) {
  return make(IxKind::Const, v);
}
IndexExprPtr ix_var(int k) {
  return make(IxKind::Var, k);
}
IndexExprPtr ix_param(int slot) {
  return make(IxKind::Param, slot);
}

bool ix_is_const(const IndexExprPtr& e, int64_t v) {
  return e->kind == IxKind::Const && e->value == v;
}

IndexExprPtr ix_unary(IxKind k, IndexExprPtr a) {
  if (a->kind == IxKind::Const) {
    int64_t v[1] = {0};
    auto tmp = make(k, 0, a);
    return ix_const(ix_eval(*tmp, v));
  }
  // The complement of a comparison is a comparison (integers: no NaN), so "!(j > i)" (a
  // reindex condition's in-range test, codegen/lowering.cc) stays an affine comparison the
  // emitters can turn into loop bounds and span tests (a causal mask packed along the
  // reduction: codegen/cpp_packing.cc is_affine_comparison).
  if (k == IxKind::Not) {
    static constexpr std::pair<IxKind, IxKind> kComplement[] = {
        {IxKind::Lt, IxKind::Ge}, {IxKind::Le, IxKind::Gt}, {IxKind::Gt, IxKind::Le},
        {IxKind::Ge, IxKind::Lt}, {IxKind::Eq, IxKind::Ne}, {IxKind::Ne, IxKind::Eq}};
    auto complement = [](IxKind c) -> std::optional<IxKind> {
      for (const auto& [cmp, opposite] : kComplement)
        if (c == cmp) return opposite;
      return std::nullopt;
    };
    if (const std::optional<IxKind> c = complement(a->kind)) return make(*c, 0, a->a, a->b);
    if (a->kind == IxKind::Not) {  // !!x is x != 0, and x itself where x is 0 or 1
      const IxKind k2 = a->a->kind;
      const bool boolean =
          k2 == IxKind::Not || k2 == IxKind::And || k2 == IxKind::Or || complement(k2);
      return boolean ? a->a : make(IxKind::Ne, 0, a->a, ix_const(0));
    }
  }
  return make(k, 0, std::move(a));
}

namespace {

// x when `q` is (x / c) * c and `r` is x % c for one constant c != 0: C's division truncates and
// its remainder takes the dividend's sign, so (x / c) * c + x % c == x for every x, negative ones
// too (and it cannot overflow). Pooling's gradient indexes its input at (i / 2) * 2 + i % 2
// (autograd of a window reindex); read as i, it is the same load as the forward's.
IndexExprPtr quotient_and_remainder(const IndexExpr& q, const IndexExpr& r) {
  if (q.kind != IxKind::Mul || r.kind != IxKind::Mod || q.a->kind != IxKind::Div) return nullptr;
  const IndexExpr& c = *q.b;
  if (c.kind != IxKind::Const || c.value == 0 || q.a->b->kind != IxKind::Const ||
      q.a->b->value != c.value || r.b->kind != IxKind::Const || r.b->value != c.value)
    return nullptr;
  if (ix_to_string(*q.a->a) != ix_to_string(*r.a)) return nullptr;
  return r.a;
}

}  // namespace

IndexExprPtr ix_binary(IxKind k, IndexExprPtr a, IndexExprPtr b) {
  if (a->kind == IxKind::Const && b->kind == IxKind::Const) {
    auto tmp = make(k, 0, a, b);
    return ix_const(ix_eval(*tmp, nullptr));
  }
  switch (k) {
    case IxKind::Add:
      if (ix_is_const(a, 0)) return b;
      if (ix_is_const(b, 0)) return a;
      if (IndexExprPtr x = quotient_and_remainder(*a, *b)) return x;
      if (IndexExprPtr x = quotient_and_remainder(*b, *a)) return x;
      break;
    case IxKind::Sub:
      if (ix_is_const(b, 0)) return a;
      break;
    case IxKind::Mul:
      if (ix_is_const(a, 1)) return b;
      if (ix_is_const(b, 1)) return a;
      if (ix_is_const(a, 0) || ix_is_const(b, 0)) return ix_const(0);
      break;
    case IxKind::Div:
      if (ix_is_const(b, 1)) return a;
      break;
    default:
      break;
  }
  return make(k, 0, std::move(a), std::move(b));
}

IndexExprPtr ix_select(IndexExprPtr cond, IndexExprPtr a, IndexExprPtr b) {
  if (cond->kind == IxKind::Const) return cond->value ? a : b;
  return make(IxKind::Select, 0, std::move(cond), std::move(a), std::move(b));
}

IndexExprPtr ix_extra(int k, std::vector<IndexExprPtr> args) {
  auto e = std::make_shared<IndexExpr>();
  e->kind = IxKind::Extra;
  e->value = k;
  for (const IndexExprPtr& a : args) e->depth = std::max(e->depth, a->depth + 1);
  e->args = std::move(args);
  return e;
}

IndexExprPtr ix_extent(int axis) {
  return make(IxKind::Extent, axis);
}

bool ix_reads_extents(const IndexExpr& e) {
  if (e.kind == IxKind::Extent) return true;
  for (const IndexExpr* c : {e.a.get(), e.b.get(), e.c.get()})
    if (c && ix_reads_extents(*c)) return true;
  for (const IndexExprPtr& c : e.args)
    if (ix_reads_extents(*c)) return true;
  return false;
}

IndexExprPtr ix_replace_extents(const IndexExprPtr& e,
                                const std::function<IndexExprPtr(int axis)>& extent) {
  if (!ix_reads_extents(*e)) return e;
  // Rebuilt through the builders, so that constants fold once extents are known.
  switch (e->kind) {
    case IxKind::Extent:
      return extent(int(e->value));
    case IxKind::Extra: {
      std::vector<IndexExprPtr> args;
      for (const IndexExprPtr& a : e->args) args.push_back(ix_replace_extents(a, extent));
      return ix_extra(int(e->value), std::move(args));
    }
    case IxKind::Neg:
    case IxKind::Not:
      return ix_unary(e->kind, ix_replace_extents(e->a, extent));
    case IxKind::Select:
      return ix_select(ix_replace_extents(e->a, extent), ix_replace_extents(e->b, extent),
                       ix_replace_extents(e->c, extent));
    default:
      return ix_binary(e->kind, ix_replace_extents(e->a, extent), ix_replace_extents(e->b, extent));
  }
}

IndexExprPtr ix_substitute(const IndexExprPtr& e, const std::vector<IndexExprPtr>& vars) {
  switch (e->kind) {
    case IxKind::Extra: {
      std::vector<IndexExprPtr> args;
      for (const IndexExprPtr& a : e->args) args.push_back(ix_substitute(a, vars));
      return ix_extra(int(e->value), std::move(args));
    }
    case IxKind::Const:
    case IxKind::Param:
    case IxKind::Extent:
      return e;
    case IxKind::Var:
      return vars.at(static_cast<size_t>(e->value));
    case IxKind::Neg:
    case IxKind::Not:
      return ix_unary(e->kind, ix_substitute(e->a, vars));
    case IxKind::Select:
      return ix_select(ix_substitute(e->a, vars), ix_substitute(e->b, vars),
                       ix_substitute(e->c, vars));
    default:
      return ix_binary(e->kind, ix_substitute(e->a, vars), ix_substitute(e->b, vars));
  }
}

namespace {

// The arguments of Extra `e`, evaluated; false when they fall outside the array.
bool extra_index(const IndexExpr& e, const int64_t* vars, const int64_t* params,
                 const IxExtras& extras, std::vector<int64_t>& idx) {
  const Shape& shape = extras.extra_shape(e.value);
  if (shape.size() != e.args.size()) return false;
  idx.resize(e.args.size());
  bool inside = true;
  for (size_t k = 0; k < e.args.size(); ++k) {
    idx[k] = ix_eval(*e.args[k], vars, params, &extras);
    inside = inside && idx[k] >= 0 && idx[k] < shape[k];
  }
  return inside;
}

}  // namespace

int64_t ix_eval(const IndexExpr& e, const int64_t* vars, const int64_t* params,
                const IxExtras* extras) {
  auto A = [&] { return ix_eval(*e.a, vars, params, extras); };
  auto B = [&] { return ix_eval(*e.b, vars, params, extras); };
  // Wrapping arithmetic: index expressions never trap, whatever the input.
  auto wrap = [](uint64_t v) { return static_cast<int64_t>(v); };
  switch (e.kind) {
    case IxKind::Const:
      return e.value;
    case IxKind::Var:
      return vars[e.value];
    case IxKind::Param:
      return params[e.value];
    case IxKind::Extent:
      METAJIT_UNREACHABLE("ix_eval: an extent leaf not replaced (ix_replace_extents)");
    case IxKind::Neg:
      return wrap(0ULL - uint64_t(A()));
    case IxKind::Not:
      return A() == 0;
    case IxKind::Add:
      return wrap(uint64_t(A()) + uint64_t(B()));
    case IxKind::Sub:
      return wrap(uint64_t(A()) - uint64_t(B()));
    case IxKind::Mul:
      return wrap(uint64_t(A()) * uint64_t(B()));
    case IxKind::Div: {
      int64_t x = A(), y = B();
      return safe_div(x, y);
    }
    case IxKind::Mod: {
      int64_t x = A(), y = B();
      return safe_mod(x, y);
    }
    case IxKind::Lt:
      return A() < B();
    case IxKind::Le:
      return A() <= B();
    case IxKind::Gt:
      return A() > B();
    case IxKind::Ge:
      return A() >= B();
    case IxKind::Eq:
      return A() == B();
    case IxKind::Ne:
      return A() != B();
    case IxKind::And:
      return A() != 0 && B() != 0;
    case IxKind::Or:
      return A() != 0 || B() != 0;
    case IxKind::Min: {
      int64_t x = A(), y = B();
      return x < y ? x : y;
    }
    case IxKind::Max: {
      int64_t x = A(), y = B();
      return x > y ? x : y;
    }
    case IxKind::Select:
      return A() ? B() : ix_eval(*e.c, vars, params, extras);
    case IxKind::Extra: {
      if (!extras) return 0;
      std::vector<int64_t> idx;
      return extra_index(e, vars, params, *extras, idx) ? extras->extra_value(e.value, idx.data())
                                                        : 0;
    }
  }
  return 0;
}

bool ix_extra_reads_in_range(const IndexExpr& e, const int64_t* vars, const int64_t* params,
                             const IxExtras& extras) {
  if (e.kind == IxKind::Extra) {
    std::vector<int64_t> idx;
    if (!extra_index(e, vars, params, extras, idx)) return false;
    for (const IndexExprPtr& a : e.args)
      if (!ix_extra_reads_in_range(*a, vars, params, extras)) return false;
    return true;
  }
  for (const IndexExpr* c : {e.a.get(), e.b.get(), e.c.get()})
    if (c && !ix_extra_reads_in_range(*c, vars, params, extras)) return false;
  return true;
}

IndexExprPtr ix_extra_reads_valid(const IndexExprPtr& e,
                                  const std::function<IndexExprPtr(int64_t k, int axis)>& extent) {
  auto conj = [](IndexExprPtr a, IndexExprPtr b) {
    if (ix_is_const(a, 1)) return b;
    if (ix_is_const(b, 1)) return a;
    return ix_binary(IxKind::And, std::move(a), std::move(b));
  };
  IndexExprPtr valid = ix_const(1);
  if (e->kind == IxKind::Extra) {
    for (size_t k = 0; k < e->args.size(); ++k) {
      const IndexExprPtr& a = e->args[k];
      valid = conj(valid, ix_extra_reads_valid(a, extent));
      valid = conj(valid, ix_binary(IxKind::And, ix_binary(IxKind::Ge, a, ix_const(0)),
                                    ix_binary(IxKind::Lt, a, extent(e->value, int(k)))));
    }
    return valid;
  }
  for (const IndexExprPtr* c : {&e->a, &e->b, &e->c})
    if (*c) valid = conj(valid, ix_extra_reads_valid(*c, extent));
  return valid;
}

IndexExprPtr ix_replace_extras(
    const IndexExprPtr& e,
    const std::function<IndexExprPtr(int64_t k, std::vector<IndexExprPtr> args)>& replace) {
  if (!ix_reads_extras(*e)) return e;
  if (e->kind == IxKind::Extra) {
    std::vector<IndexExprPtr> args;
    for (const IndexExprPtr& a : e->args) args.push_back(ix_replace_extras(a, replace));
    return replace(e->value, std::move(args));
  }
  auto copy = std::make_shared<IndexExpr>(*e);
  for (IndexExprPtr* c : {&copy->a, &copy->b, &copy->c})
    if (*c) *c = ix_replace_extras(*c, replace);
  return copy;
}

bool ix_reads_extras(const IndexExpr& e) {
  if (e.kind == IxKind::Extra) return true;
  for (const IndexExpr* c : {e.a.get(), e.b.get(), e.c.get()})
    if (c && ix_reads_extras(*c)) return true;
  return false;
}

bool ix_reads_var(const IndexExpr& e, int var) {
  if (e.kind == IxKind::Var) return e.value == var;
  for (const IndexExprPtr& a : e.args)
    if (ix_reads_var(*a, var)) return true;
  for (const IndexExpr* c : {e.a.get(), e.b.get(), e.c.get()})
    if (c && ix_reads_var(*c, var)) return true;
  return false;
}

bool ix_plain_arithmetic(const IndexExpr& e) {
  switch (e.kind) {
    case IxKind::Const:
    case IxKind::Var:
      return true;
    case IxKind::Neg:
      return ix_plain_arithmetic(*e.a);
    case IxKind::Div:
    case IxKind::Mod:
      if (e.b->kind != IxKind::Const || e.b->value == 0 || e.b->value == -1) return false;
      return ix_plain_arithmetic(*e.a);
    case IxKind::Add:
    case IxKind::Sub:
    case IxKind::Mul:
      return ix_plain_arithmetic(*e.a) && ix_plain_arithmetic(*e.b);
    default:
      return false;
  }
}

bool ix_affine_in(const IndexExpr& e, int var) {
  if (!ix_reads_var(e, var)) return true;
  switch (e.kind) {
    case IxKind::Var:
      return true;
    case IxKind::Neg:
      return ix_affine_in(*e.a, var);
    case IxKind::Add:
    case IxKind::Sub:
      return ix_affine_in(*e.a, var) && ix_affine_in(*e.b, var);
    case IxKind::Mul:
      return (e.a->kind == IxKind::Const && ix_affine_in(*e.b, var)) ||
             (e.b->kind == IxKind::Const && ix_affine_in(*e.a, var));
    default:
      return false;
  }
}

int64_t ix_coefficient(const IndexExpr& e, int var) {
  if (!ix_reads_var(e, var)) return 0;
  switch (e.kind) {
    case IxKind::Var:
      return 1;
    case IxKind::Neg:
      return -ix_coefficient(*e.a, var);
    case IxKind::Add:
      return ix_coefficient(*e.a, var) + ix_coefficient(*e.b, var);
    case IxKind::Sub:
      return ix_coefficient(*e.a, var) - ix_coefficient(*e.b, var);
    case IxKind::Mul:
      return e.a->kind == IxKind::Const ? e.a->value * ix_coefficient(*e.b, var)
                                        : e.b->value * ix_coefficient(*e.a, var);
    default:
      return 0;
  }
}

std::string ix_to_string(const IndexExpr& e) {
  switch (e.kind) {
    case IxKind::Const:
      return std::to_string(e.value);
    case IxKind::Var:
      return "i" + std::to_string(e.value);
    case IxKind::Param:
      return "p" + std::to_string(e.value);
    case IxKind::Extent:
      return "n" + std::to_string(e.value);
    case IxKind::Neg:
      return "(-" + ix_to_string(*e.a) + ")";
    case IxKind::Not:
      return "(!" + ix_to_string(*e.a) + ")";
    case IxKind::Min:
      return "min(" + ix_to_string(*e.a) + "," + ix_to_string(*e.b) + ")";
    case IxKind::Max:
      return "max(" + ix_to_string(*e.a) + "," + ix_to_string(*e.b) + ")";
    case IxKind::Select:
      return "(" + ix_to_string(*e.a) + "?" + ix_to_string(*e.b) + ":" + ix_to_string(*e.c) + ")";
    case IxKind::Extra: {
      std::string s = "@e" + std::to_string(e.value) + "(";
      for (size_t k = 0; k < e.args.size(); ++k) s += (k ? "," : "") + ix_to_string(*e.args[k]);
      return s + ")";
    }
    default:
      return "(" + ix_to_string(*e.a) + ix_operator_text(e.kind) + ix_to_string(*e.b) + ")";
  }
}

bool ix_has_unsafe_division(const IndexExpr& e) {
  if ((e.kind == IxKind::Div || e.kind == IxKind::Mod) &&
      !(e.b->kind == IxKind::Const && e.b->value != 0 && e.b->value != -1))
    return true;
  for (const auto* c : {e.a.get(), e.b.get(), e.c.get()})
    if (c && ix_has_unsafe_division(*c)) return true;
  for (const IndexExprPtr& c : e.args)
    if (ix_has_unsafe_division(*c)) return true;
  return false;
}

}  // namespace metajit
