// Integer index expressions (docs/design.md §3): the parser for Jittor-style strings such as
// "i2*2-1+i4", the expression tree, evaluation and canonical printing.
//
// Strings are parsed and checked, never pasted into generated source: the emitter re-prints
// the tree. Beyond the parsed grammar the tree has Param leaves (an int64 kernel argument,
// used by the code generator for shapes) and Select (cond ? a : b).
#pragma once
#include <metajit/dtype.h>  // Shape

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace metajit {

enum class IxKind : uint8_t {
  Const,
  Var,
  Param,  // leaves
  Neg,
  Not,  // unary
  Add,
  Sub,
  Mul,
  Div,
  Mod,  // arithmetic (C++ integer semantics; x/0 == x%0 == 0)
  Lt,
  Le,
  Gt,
  Ge,
  Eq,
  Ne,
  And,
  Or,  // conditions (0 or 1)
  Min,
  Max,
  Select,  // internal: used by the code generator
  // @eK(a, b, ...): element (a, b, ...) of an integer array, each argument an expression
  // (docs/design.md, "Data-dependent indexing"). In a node's expressions `value` is K, the
  // extra's number; in kernel IR it is the input buffer slot. Arguments are in `args`. A read
  // outside the array yields 0 and never touches memory; whoever evaluates the expression
  // also tests ix_extra_reads_valid() and applies the overflow rule.
  Extra,
  // The extent of axis `value` of the array the expression indexes: a Reindex's input, a
  // ReindexReduce's output (gather, index_select, embedding and one_hot count a negative index
  // from the end with it). A leaf of node expressions only: lowering turns it into a shape
  // parameter (codegen/lowering.cc), so a key never holds the extent; the parser never makes
  // one and ix_eval refuses it (ix_replace_extents first).
  Extent
};

struct IndexExpr;
using IndexExprPtr = std::shared_ptr<const IndexExpr>;

struct IndexExpr {
  IxKind kind = IxKind::Const;
  int64_t value = 0;  // Const: the value; Var: k of i<k>; Param: slot number
  int32_t depth = 1;  // nodes on the longest path to a leaf, this one included
  IndexExprPtr a, b, c;
  std::vector<IndexExprPtr> args;  // Extra only: one per axis of the array read
};

// The deepest tree the parser accepts. Every pass over a tree (evaluation, printing,
// substitution, the emitters) recurses once per level, and a worker thread's stack may be
// 1 MB: 256 levels bound that recursion far below it, and no real index expression nests
// more than a few levels.
inline constexpr int kMaxIndexExprDepth = 256;
// The longest text the parser accepts.
inline constexpr size_t kMaxIndexExprLength = 4096;

// Parses `text`. `num_vars` is how many i<k> names exist (i0 .. i<num_vars-1>). With
// `condition` true the comparison and logical operators are allowed too. `context` names
// the op and argument for messages, e.g. "reindex: indexes[1]". Throws IndexExprError, also
// for a tree deeper than kMaxIndexExprDepth (parentheses, unary operators and chains alike).
// `extra_ranks[K]` is the rank of extras[K]: "@eK(...)" must name an existing K and give that
// many arguments. Without extras any "@e" is an error.
IndexExprPtr parse_index_expr(std::string_view text, int num_vars, bool condition,
                              const std::string& context, const std::vector<int>& extra_ranks = {});

// Builders; they fold constants and trivial identities (x+0, x*1, x*0); ix_unary(Not, c) of a
// comparison is its complement ("!(a > b)" is "a <= b") and !!c of a condition is c.
IndexExprPtr ix_const(int64_t v);
IndexExprPtr ix_var(int k);
IndexExprPtr ix_param(int slot);
IndexExprPtr ix_unary(IxKind k, IndexExprPtr a);
IndexExprPtr ix_binary(IxKind k, IndexExprPtr a, IndexExprPtr b);
IndexExprPtr ix_select(IndexExprPtr cond, IndexExprPtr a, IndexExprPtr b);
IndexExprPtr ix_extra(int k, std::vector<IndexExprPtr> args);
IndexExprPtr ix_extent(int axis);
// `e` with every Extent leaf replaced by extent(axis); `e` itself when it has none.
IndexExprPtr ix_replace_extents(const IndexExprPtr& e,
                                const std::function<IndexExprPtr(int axis)>& extent);
bool ix_reads_extents(const IndexExpr& e);

// Replaces every Var(k) by vars[k].
IndexExprPtr ix_substitute(const IndexExprPtr& e, const std::vector<IndexExprPtr>& vars);

// What evaluating an Extra reads: the arrays' shapes and elements.
class IxExtras {
 public:
  virtual ~IxExtras() = default;
  virtual const Shape& extra_shape(int64_t k) const = 0;
  // Element `idx` (one per axis, in range) of array k.
  virtual int64_t extra_value(int64_t k, const int64_t* idx) const = 0;
};

// Evaluates with i<k> = vars[k] and Param(s) = params[s]. An Extra reads `extras` (0 when
// its arguments fall outside the array, or when `extras` is null).
int64_t ix_eval(const IndexExpr& e, const int64_t* vars, const int64_t* params = nullptr,
                const IxExtras* extras = nullptr);

// True when every Extra in `e` reads inside its array, whether or not its value is used (an
// && or ?: does not hide a read): the overflow rule treats an element whose expressions read
// an extra out of bounds as out of range.
bool ix_extra_reads_in_range(const IndexExpr& e, const int64_t* vars, const int64_t* params,
                             const IxExtras& extras);
// The same test as an expression: the conjunction of 0 <= arg < extent(K, axis) over every
// Extra in `e` (constant 1 when there is none). The code generator guards with it.
IndexExprPtr ix_extra_reads_valid(const IndexExprPtr& e,
                                  const std::function<IndexExprPtr(int64_t k, int axis)>& extent);
// Replaces every Extra by replace(K, its arguments, themselves replaced first). Lowering turns
// a node's @eK into a read of an input buffer slot (or an int64 parameter) with it.
IndexExprPtr ix_replace_extras(
    const IndexExprPtr& e,
    const std::function<IndexExprPtr(int64_t k, std::vector<IndexExprPtr> args)>& replace);
// True when `e` contains an Extra.
bool ix_reads_extras(const IndexExpr& e);
// True when `e` reads loop variable i<var> (an Extra's arguments included).
bool ix_reads_var(const IndexExpr& e, int var);
// True when `e` is affine in i<var> with a constant coefficient: built from the variable,
// expressions that do not read it, + - and negation, and products with a constant side.
bool ix_affine_in(const IndexExpr& e, int var);
// The coefficient of i<var> in `e`, where ix_affine_in(e, var) holds (0 when `e` does not
// read it).
int64_t ix_coefficient(const IndexExpr& e, int var);
// True when `e`'s C++ text means the same in int as in i64: constants, loop variables, + - *,
// negation, and / % by a constant other than 0 and -1 (the emitters print other divisions as
// mj_div / mj_mod; codegen/c_family_emitter.cc ix and narrow_ix).
bool ix_plain_arithmetic(const IndexExpr& e);

// The C++ text of a binary operator (+ - * / % < <= > >= == != && ||); "?" for other kinds.
const char* ix_operator_text(IxKind k);

// Canonical, fully parenthesised text; equal trees print equally (used in kernel keys).
std::string ix_to_string(const IndexExpr& e);

bool ix_is_const(const IndexExprPtr& e, int64_t v);
// True when any Div/Mod in the tree has a divisor that is not a non-zero constant.
bool ix_has_unsafe_division(const IndexExpr& e);

}  // namespace metajit
