// Random valid graphs, each built from a stream of random bits: a seed (the differential
// test, tests/test_differential.cc, reproduces a failure from its seed) or a fuzzer's bytes
// (fuzz/fuzz_graph_eval.cc). Both sides of a comparison with the reference interpreter
// (support/reference_check.h) must agree exactly on every graph it builds.
//
// The generator keeps every graph inside the contract where both sides must agree exactly:
// it tracks a bound on |value|, whether NaN may appear, and whether a float value is
// "fragile" (transcendental, division or a float reduction: the last bits may legitimately
// differ, e.g. with another summation order). Integer results never overflow, float -> int
// casts only see exact, bounded, non-NaN values, and fragile values never feed a
// discontinuous op (floor, comparisons, casts to int/bool, logical ops, where conditions),
// where one ulp could flip the result.
//
// Some reindex / reindex_reduce nodes take extras (data-dependent indexing, "@eK(...)"): 1-2
// Int32/Int64 arrays of rank 1-3 (new leaves whose values reach outside every extent in both
// directions, down to INT64_MIN and up to INT64_MAX, or integer values of the graph), read in
// the index expressions, sometimes in the overflow conditions and sometimes inside another
// read's arguments. Index arithmetic wraps on both sides, and a read outside its extra means
// the overflow value (reindex) or a skipped element (reindex_reduce) on both sides.
#pragma once
#include <metajit/metajit.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "meta_ops/node.h"
#include "support/typed_arrays.h"

namespace metajit_test {
namespace random_graph_detail {

using namespace metajit;

// A uniform random bit generator: the bytes it was given, 8 at a time, then (so that a short
// input still builds a whole graph) std::mt19937_64 seeded from them.
class RandomBits {
 public:
  using result_type = uint64_t;
  explicit RandomBits(uint64_t seed) : prng_(seed) {}
  RandomBits(const uint8_t* data, size_t size) : bytes_(data, data + size) {
    uint64_t h = 1469598103934665603ULL;  // FNV-1a of the bytes
    for (uint8_t b : bytes_) h = (h ^ b) * 1099511628211ULL;
    prng_.seed(h);
  }
  static constexpr result_type min() { return 0; }
  static constexpr result_type max() { return std::numeric_limits<uint64_t>::max(); }
  result_type operator()() {
    if (next_ >= bytes_.size()) return prng_();
    uint64_t v = 0;
    const size_t n = std::min<size_t>(8, bytes_.size() - next_);
    std::memcpy(&v, bytes_.data() + next_, n);
    next_ += n;
    return v;
  }

 private:
  std::vector<uint8_t> bytes_;
  size_t next_ = 0;
  std::mt19937_64 prng_;
};

// Elements per value: small graphs keep the reference fast; "large" graphs (one in seven)
// have enough work for the kernels' OpenMP parallel path (taken above 32768 iterations).
constexpr int64_t kMaxNumel = 2000;
constexpr int64_t kMaxNumelLarge = 120000;
const double kInf = std::numeric_limits<double>::infinity();

// The largest |value| of a dtype: |lowest()| for the integers.
inline double int_limit(DType dt) {
  switch (dt) {
    case DType::Bool:
      return 1;
    case DType::Int32:
      return 2147483648.0;
    case DType::Int64:
      return 9223372036854775808.0;
    case DType::Int8:
      return 128;
    case DType::UInt8:
      return 255;
    case DType::Int16:
      return 32768;
    default:
      return kInf;
  }
}

inline std::string shape_cpp(const Shape& s) {
  std::string out = "{";
  for (size_t k = 0; k < s.size(); ++k) out += (k ? ", " : "") + std::to_string(s[k]);
  return out + "}";
}

inline std::string strings_cpp(const std::vector<std::string>& v) {
  std::string out = "{";
  for (size_t k = 0; k < v.size(); ++k) out += (k ? ", \"" : "\"") + v[k] + "\"";
  return out + "}";
}

inline std::string ints_cpp(const std::vector<int64_t>& v) {
  return shape_cpp(v);
}

inline const char* dtype_cpp(DType dt) {
  switch (dt) {
    case DType::Bool:
      return "DType::Bool";
    case DType::Int32:
      return "DType::Int32";
    case DType::Int64:
      return "DType::Int64";
    case DType::Float32:
      return "DType::Float32";
    case DType::Float64:
      return "DType::Float64";
    case DType::Int8:
      return "DType::Int8";
    case DType::UInt8:
      return "DType::UInt8";
    case DType::Int16:
      return "DType::Int16";
    case DType::Float16:
      return "DType::Float16";
    case DType::BFloat16:
      return "DType::BFloat16";
  }
  return "?";
}

inline std::string num(double v) {
  std::ostringstream s;
  s << v;
  std::string t = s.str();
  if (t.find_first_of(".e") == std::string::npos) t += ".0";
  return t;
}

// One value of the graph under construction and what the generator knows about it.
// A value of the graph as the generator keeps it: its node, not a Var. A Var the program holds
// is stored when an evaluation computes it (README "Lazy evaluation"), so holding every
// intermediate would leave nothing for the fusion planner to fuse; the generator only builds.
class HeldNode {
 public:
  HeldNode() = default;
  HeldNode(const Var& v) : node_(v.node()) {}  // NOLINT: stands in for a Var
  operator Var() const { return Var(node_); }  // NOLINT
  const NodePtr& node() const { return node_; }
  const Shape& shape() const { return node_->shape; }
  DType dtype() const { return node_->dtype; }
  int64_t ndim() const { return int64_t(node_->shape.size()); }
  int64_t numel() const { return node_->numel(); }

 private:
  NodePtr node_;
};

struct Value {
  HeldNode var;
  std::string name;
  double bound = 0;      // max |value| (kInf when unbounded)
  bool may_nan = false;  // NaN may appear
  bool fragile = false;  // float whose last bits may differ between the two evaluations
  // Fragile at float32 precision: its own dtype is Float32, or it has such an ancestor. Widened
  // to Float64 (a cast, or promotion by a Float64 operand) its float32-sized differences would
  // be compared at Float64's tolerance, so no Float64 value may have such an ancestor (found
  // by fuzz_graph_eval: tanh in float32, cast to float64, differed by one float32 ulp).
  bool fragile_f32 = false;
  // A Float16 / BFloat16 value its kernel may hold unrounded: made by an op that can round
  // (arithmetic, transcendental, sums) or fragile. Inside a fused kernel it stays float32 where
  // the reference rounds it (docs/design.md §3), so it is only ever an output, compared at its
  // dtype's tolerance: no op reads it (pick_value rejects it).
  bool sealed = false;
};

struct Rejected {};  // an op that would leave the contract: the generator tries another

class GraphGenerator {
 public:
  explicit GraphGenerator(uint64_t seed) : rng_(seed) {}
  // The fuzzer's bytes drive the choices (fuzz/fuzz_graph_eval.cc).
  GraphGenerator(const uint8_t* data, size_t size) : rng_(data, size) {}

  // Builds 1-3 inputs and 3-12 ops; returns 1-2 outputs.
  std::vector<Var> build() {
    large_ = chance(1.0 / 7);
    if (large_) listing_ << "// large graph\n";
    const int inputs = uniform(1, 3);
    for (int k = 0; k < inputs; ++k) add_input();
    const int ops = uniform(3, 12);
    for (int k = 0; k < ops; ++k) {
      for (int attempt = 0;; ++attempt) {
        // The generator must always find a valid op.
        if (attempt >= 200) throw std::logic_error("random graph: no valid op in 200 tries");
        try {
          add_random_op();
          break;
        } catch (const Rejected&) {
        }
      }
    }
    // The last value, and the last value of a branch it does not use (else, half the time,
    // one of its intermediates: two outputs sharing work).
    std::vector<Var> outs = {values_.back().var};
    listing_ << "eval/check: " << values_.back().name;
    const std::set<const Node*> used = reachable(values_.back().var.node().get());
    std::optional<size_t> extra;
    for (size_t k = size_t(inputs); k + 1 < values_.size(); ++k)
      if (!used.count(values_[k].var.node().get())) extra = k;
    if (!extra && values_.size() > size_t(inputs) + 1 && chance(0.5))
      extra = size_t(uniform(inputs, int(values_.size()) - 2));
    if (extra) {
      outs.push_back(values_[*extra].var);
      listing_ << ", " << values_[*extra].name;
    }
    listing_ << "\n";
    // One graph in five first evaluates a value the outputs depend on.
    std::vector<size_t> inner;
    for (size_t k = size_t(inputs); k + 1 < values_.size(); ++k)
      if (used.count(values_[k].var.node().get())) inner.push_back(k);
    if (!inner.empty() && chance(0.2)) {
      staged_ = pick(inner);
      listing_ << "(evaluated first: " << values_[*staged_].name << ")\n";
    }
    return outs;
  }

  std::string listing() const { return listing_.str(); }
  std::optional<Var> staged() const {
    return staged_ ? std::optional<Var>(values_[*staged_].var) : std::nullopt;
  }
  std::string staged_name() const { return staged_ ? values_[*staged_].name : ""; }

 private:
  // ------------------------------------------------------------ randomness
  int uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  bool chance(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }
  template <class T>
  const T& pick(const std::vector<T>& v) {
    return v[size_t(uniform(0, int(v.size()) - 1))];
  }
  const Value& pick_value() {
    // Prefer recent values so that graphs grow deep rather than wide.
    const int n = int(values_.size());
    const Value& v = values_[size_t(chance(0.5) ? n - 1 : uniform(0, n - 1))];
    if (v.sealed) throw Rejected{};
    return v;
  }

  // Whether the op that made `n` can give a half value that is not its exact result: a kernel
  // keeps such a value in float32 where the reference rounds it. Copies, selections, sign
  // changes and floor are exact; a cast rounds explicitly in the kernel too (its input is exact:
  // an unsealed value).
  static bool may_round(const Node& n) {
    switch (n.kind) {
      case OpKind::Unary:
        return UnaryOp(n.op) != UnaryOp::Neg && UnaryOp(n.op) != UnaryOp::Abs &&
               UnaryOp(n.op) != UnaryOp::Relu && UnaryOp(n.op) != UnaryOp::Floor;
      case OpKind::Binary:
        return BinaryOp(n.op) != BinaryOp::Maximum && BinaryOp(n.op) != BinaryOp::Minimum;
      case OpKind::Reduce:
      case OpKind::ReindexReduce:
        return ReduceOp(n.op) != ReduceOp::Max && ReduceOp(n.op) != ReduceOp::Min;
      default:
        return false;
    }
  }

  // Every node `root` depends on, itself included.
  static std::set<const Node*> reachable(const Node* root) {
    std::set<const Node*> seen;
    std::vector<const Node*> stack = {root};
    while (!stack.empty()) {
      const Node* n = stack.back();
      stack.pop_back();
      if (!seen.insert(n).second) continue;
      for (const NodePtr& in : n->inputs) stack.push_back(in.get());
    }
    return seen;
  }

  // The half types: their kernels keep a fused chain in float32 where the reference rounds
  // after every op (docs/design.md §3), so a half value an op may have rounded is sealed
  // (Value::sealed): an output, never an operand. Exact ones (inputs, copies, max, casts) feed
  // any op, promotions to float32 included.
  DType random_dtype() {
    const int r = uniform(0, 99);
    if (r < 24) return DType::Float32;
    if (r < 28) return DType::Float16;
    if (r < 32) return DType::BFloat16;
    if (r < 45) return DType::Float64;
    if (r < 62) return DType::Int32;
    if (r < 75) return DType::Int64;
    if (r < 85) return DType::Bool;
    if (r < 90) return DType::Int8;
    if (r < 95) return DType::Int16;
    return DType::UInt8;
  }

  int64_t random_dim() {
    if (chance(0.04)) return 0;
    return large_ ? uniform(1, 40) : uniform(1, 5);
  }

  Shape random_shape(int max_rank) {
    const int r = uniform(0, 99);
    int rank = r < 10 ? 0 : r < 35 ? 1 : r < 65 ? 2 : r < 90 ? 3 : 4;
    rank = std::min(rank, large_ ? 3 : max_rank);  // 40^3 elements at most
    Shape s;
    for (int k = 0; k < rank; ++k) s.push_back(random_dim());
    return s;
  }

  // A scalar operand valid for `dt` (Bool: 0 or 1; an integer Var truncates fractions).
  double random_scalar(DType dt) {
    if (dt == DType::Bool) return double(uniform(0, 1));
    return pick(std::vector<double>{-2, -1, -0.5, 0.5, 1, 2, 3, 2.5});
  }

  // ------------------------------------------------------------ values
  // Whether `node` reads a value marked fragile_f32, directly or through the nodes that ops
  // like binary broadcasting create in between (which are not values of their own).
  bool has_fragile_f32_input(const Node* node) const {
    std::vector<const Node*> stack(1, node);
    std::set<const Node*> seen;
    while (!stack.empty()) {
      const Node* n = stack.back();
      stack.pop_back();
      for (const NodePtr& in : n->inputs) {
        if (!seen.insert(in.get()).second) continue;
        auto it = value_of_node_.find(in.get());
        if (it == value_of_node_.end())
          stack.push_back(in.get());
        else if (values_[it->second].fragile_f32)
          return true;
      }
    }
    return false;
  }

  // Records a new value. `arithmetic`: integer results must stay strictly inside the range
  // (an op like neg or * on lowest() overflows); other ops (max, where, identities of empty
  // reductions, ...) may reach lowest() itself.
  // `prelude`: listing lines that go before the value's own (its new extras), written only
  // when the value is accepted.
  const Value& add_value(Var var, const std::string& expr, double bound, bool may_nan, bool fragile,
                         bool arithmetic = false, const std::string& prelude = "") {
    if (var.numel() > (large_ ? kMaxNumelLarge : kMaxNumel)) throw Rejected{};
    const DType dt = var.dtype();
    if (dt == DType::UInt8) {
      // Every value is in [0, 255] whatever the op: a - b, -x or a negative cast wrap, on both
      // sides alike (the generator tracks |value|, not its sign, so the bound is the type's).
      if (may_nan) throw Rejected{};
      bound = 255;
    } else if (!is_float(dt)) {
      if (bound > int_limit(dt) || (arithmetic && bound >= int_limit(dt)) || may_nan)
        throw Rejected{};
      fragile = false;
      if (dt == DType::Bool) bound = std::min(bound, 1.0);
    }
    if (std::isinf(bound) || std::isnan(bound)) {
      bound = kInf;
      may_nan = true;  // inf - inf, 0 * inf
    }
    bool fragile_f32 = false;
    if (fragile && is_float(dt)) {
      fragile_f32 = dt == DType::Float32 || has_fragile_f32_input(var.node().get());
      if (fragile_f32 && dt == DType::Float64) throw Rejected{};
    }
    const bool sealed = is_half(dt) && (fragile || may_round(*var.node()));
    // A sealed float16 near its largest finite value could be Inf on one side only.
    if (sealed && dt == DType::Float16 && bound >= 60000) throw Rejected{};
    Value v{
        std::move(var), "v" + std::to_string(values_.size()), bound, may_nan, fragile, fragile_f32,
        sealed};
    listing_ << prelude << "Var " << v.name << " = " << expr << ";  // "
             << dtype_name(v.var.dtype()) << " " << shape_str(v.var.shape()) << "\n";
    value_of_node_[v.var.node().get()] = values_.size();
    values_.push_back(std::move(v));
    return values_.back();
  }

  void add_input() {
    const DType dt = random_dtype();
    const Shape shape = random_shape(4);
    const int64_t n = numel_of(shape);
    std::vector<double> vals;
    for (int64_t k = 0; k < n; ++k) {
      if (dt == DType::Bool)
        vals.push_back(uniform(0, 1));
      else if (is_float(dt))
        vals.push_back(uniform(-16, 16) * 0.25);  // exact in float32
      else
        vals.push_back(uniform(-5, 5));
    }
    std::ostringstream text;
    const char* ctype = dt == DType::Bool       ? "bool"
                        : dt == DType::Int32    ? "int32_t"
                        : dt == DType::Int64    ? "int64_t"
                        : dt == DType::Float32  ? "float"
                        : dt == DType::Int8     ? "int8_t"
                        : dt == DType::UInt8    ? "uint8_t"
                        : dt == DType::Int16    ? "int16_t"
                        : dt == DType::Float16  ? "float16"
                        : dt == DType::BFloat16 ? "bfloat16"
                                                : "double";
    text << "array<" << ctype << ">({";
    for (int64_t k = 0; k < n && k < 64; ++k) text << (k ? ", " : "") << vals[size_t(k)];
    if (n > 64) text << ", /* " << n - 64 << " more: rerun the seed */";
    text << "}, " << shape_cpp(shape) << ")";
    Var v;
    switch (dt) {
      case DType::Bool: {
        std::vector<bool> b;
        for (double x : vals) b.push_back(x != 0);
        v = array(b, shape);
        break;
      }
      case DType::Int32:
        v = array(std::vector<int32_t>(vals.begin(), vals.end()), shape);
        break;
      case DType::Int64:
        v = array(std::vector<int64_t>(vals.begin(), vals.end()), shape);
        break;
      case DType::Float32:
        v = array(std::vector<float>(vals.begin(), vals.end()), shape);
        break;
      case DType::Float64:
        v = array(vals, shape);
        break;
      default:
        v = metajit_test::make_array(dt, vals, shape);
        break;
    }
    add_value(v, text.str(), is_float(dt) ? 4 : dt == DType::Bool ? 1 : 5, false, false);
  }

  // A value that broadcasts into `target` (numpy rules): y itself when it already does, else
  // y reduced to 0-d or reindexed into a shape made from `target` by dropping leading axes
  // and setting some axes to 1.
  Value compatible(const Value& y, const Shape& target) {
    bool fits = y.var.ndim() <= int64_t(target.size());
    for (size_t k = 0; fits && k < y.var.shape().size(); ++k) {
      const int64_t d = y.var.shape()[y.var.shape().size() - 1 - k];
      fits = d == 1 || d == target[target.size() - 1 - k];
    }
    if (fits && chance(0.8)) return y;
    if (chance(0.2)) {
      const bool use_max = chance(0.5);
      Var r = use_max ? max(y.var) : sum(y.var);
      const bool float_sum = !use_max && is_float(r.dtype());
      // max over a zero-size value gives the identity (lowest / -inf).
      double bound = use_max ? (y.var.numel() == 0 ? int_limit(r.dtype()) : y.bound)
                             : y.bound * double(std::max<int64_t>(y.var.numel(), 1));
      const Value& v = add_value(r, std::string(use_max ? "max(" : "sum(") + y.name + ")", bound,
                                 y.may_nan, y.fragile || float_sum, !use_max);
      if (v.sealed) throw Rejected{};  // an operand: see Value::sealed
      return v;
    }
    Shape s;
    const size_t drop = size_t(uniform(0, int(target.size())));
    for (size_t k = drop; k < target.size(); ++k) s.push_back(chance(0.3) ? 1 : target[k]);
    return add_reindex(y, s);
  }

  // ------------------------------------------------------------ index expressions
  // An affine expression over i0..i<num_vars-1> that usually lands in [0, extent).
  std::string index_expr(int num_vars, int64_t extent) {
    if (num_vars == 0 || chance(0.08))
      return std::to_string(uniform(-1, int(std::max<int64_t>(extent, 1))));
    std::string e;
    const int terms = num_vars > 1 && chance(0.35) ? 2 : 1;
    bool negative = false;
    for (int t = 0; t < terms; ++t) {
      const int var = uniform(0, num_vars - 1);
      const int coef = pick(std::vector<int>{1, 1, 1, 1, -1, 2, -2, 3});
      if (coef < 0) negative = true;
      if (!e.empty() || coef < 0) e += coef < 0 ? "-" : "+";
      e += "i" + std::to_string(var);
      if (std::abs(coef) != 1) e += "*" + std::to_string(std::abs(coef));
    }
    int offset = uniform(-1, 1);
    if (negative) offset += int(extent) - 1;  // reversed: mostly in range
    if (offset != 0) e += (offset > 0 ? "+" : "") + std::to_string(offset);
    if (chance(0.12))
      e = "(" + e + ")%" + std::to_string(chance(0.5) ? 2 : std::max<int64_t>(extent, 1));
    else if (chance(0.08))
      e = "(" + e + ")/2";
    return e;
  }

  std::vector<std::string> conditions(int num_vars) {
    std::vector<std::string> out;
    if (num_vars == 0 || !chance(0.3)) return out;
    const int count = uniform(1, 2);
    for (int c = 0; c < count; ++c) {
      const std::string a = "i" + std::to_string(uniform(0, num_vars - 1));
      const std::string b = "i" + std::to_string(uniform(0, num_vars - 1));
      const std::string k = std::to_string(uniform(0, 3));
      switch (uniform(0, 4)) {
        case 0:
          out.push_back(a + ">" + k);
          break;
        case 1:
          out.push_back("(" + a + "-" + b + ")%2");
          break;
        case 2:
          out.push_back(a + "+" + b + "<" + k + " && " + a + "!=" + std::to_string(uniform(0, 2)));
          break;
        case 3:
          out.push_back("!(" + a + "==" + k + ")");
          break;
        default:
          out.push_back(a + "*2>=" + b + "||" + a + "==0");
          break;
      }
    }
    return out;
  }

  // ------------------------------------------------------------ extras
  // The extras of one reindex / reindex_reduce node: arrays read by "@eK(...)".
  struct Extras {
    std::vector<Var> vars;
    std::vector<std::string> names;
    std::vector<Shape> shapes;
    std::string listing;  // the new leaves, as C++
    bool empty() const { return vars.empty(); }
    std::string cpp() const {
      std::string out = "{";
      for (size_t k = 0; k < names.size(); ++k) out += (k ? ", " : "") + names[k];
      return out + "}";
    }
  };

  // A value an index may hold: mostly near [0, span) (a little outside it on both sides), now
  // and then one far outside, the extremes of the dtype included.
  int64_t extra_element(DType dt, int64_t span) {
    if (chance(0.9)) return uniform(-2, int(span) + 1);
    const bool i32 = dt == DType::Int32;
    const int64_t lo =
        i32 ? std::numeric_limits<int32_t>::min() : std::numeric_limits<int64_t>::min();
    const int64_t hi =
        i32 ? std::numeric_limits<int32_t>::max() : std::numeric_limits<int64_t>::max();
    return pick(std::vector<int64_t>{lo, hi, lo + 1, hi - 1, -1000, 1000, span, -span - 1,
                                     i32 ? int64_t(1) << 30 : int64_t(1) << 40,
                                     i32 ? -(int64_t(1) << 30) : -(int64_t(1) << 40)});
  }

  // A new Int32/Int64 leaf of rank 1-3 whose values index axes of about `span` elements.
  void add_extra_leaf(Extras& ex, int64_t span) {
    const DType dt = chance(0.5) ? DType::Int32 : DType::Int64;
    Shape shape;
    for (int k = 0, rank = uniform(1, 3); k < rank; ++k) shape.push_back(random_dim());
    const int64_t n = numel_of(shape);
    std::vector<int64_t> vals;
    for (int64_t k = 0; k < n; ++k) vals.push_back(extra_element(dt, span));
    const std::string name = "e" + std::to_string(num_extras_++);
    std::ostringstream text;
    text << "Var " << name << " = array<" << (dt == DType::Int32 ? "int32_t" : "int64_t") << ">({";
    for (int64_t k = 0; k < n && k < 64; ++k) {
      // INT64_MIN has no literal.
      if (vals[size_t(k)] == std::numeric_limits<int64_t>::min())
        text << (k ? ", " : "") << "INT64_MIN";
      else
        text << (k ? ", " : "") << vals[size_t(k)];
    }
    if (n > 64) text << ", /* " << n - 64 << " more: rerun the seed */";
    text << "}, " << shape_cpp(shape) << ");  // extra, " << dtype_name(dt) << " "
         << shape_str(shape) << "\n";
    ex.listing += text.str();
    ex.vars.push_back(dt == DType::Int32
                          ? array(std::vector<int32_t>(vals.begin(), vals.end()), shape)
                          : array(vals, shape));
    ex.names.push_back(name);
    ex.shapes.push_back(shape);
  }

  // 1-2 extras: new leaves, or now and then an integer value of the graph (a computed node:
  // the planner stores it for the reads).
  Extras random_extras(int64_t span) {
    Extras ex;
    const int count = chance(0.7) ? 1 : 2;
    for (int k = 0; k < count; ++k) {
      std::vector<size_t> ints;
      for (size_t v = 0; v < values_.size(); ++v) {
        const Var& var = values_[v].var;
        if ((var.dtype() == DType::Int32 || var.dtype() == DType::Int64) && var.ndim() >= 1 &&
            var.ndim() <= 3)
          ints.push_back(v);
      }
      if (!ints.empty() && chance(0.2)) {
        const Value& v = values_[pick(ints)];
        ex.vars.push_back(v.var);
        ex.names.push_back(v.name);
        ex.shapes.push_back(v.var.shape());
      } else {
        add_extra_leaf(ex, span);
      }
    }
    return ex;
  }

  // "@eK(a, ...)": a read of a random extra, its arguments index expressions over
  // i0..i<num_vars-1> that usually land inside it; `nest` allows one argument to be a read
  // itself.
  std::string extra_read(const Extras& ex, int num_vars, bool nest) {
    const size_t k = size_t(uniform(0, int(ex.vars.size()) - 1));
    const Shape& s = ex.shapes[k];
    const int nested_arg = nest && chance(0.15) ? uniform(0, int(s.size()) - 1) : -1;
    std::string out = "@e" + std::to_string(k) + "(";
    for (size_t a = 0; a < s.size(); ++a) {
      out += a ? (chance(0.3) ? " , " : ",") : "";
      out += int(a) == nested_arg ? extra_read(ex, num_vars, false) : index_expr(num_vars, s[a]);
    }
    return out + ")";
  }

  // An index into an axis of `extent` elements computed from an extra read.
  std::string extra_index_expr(const Extras& ex, int num_vars, int64_t extent) {
    const std::string r = extra_read(ex, num_vars, true);
    const std::string var = num_vars > 0 ? "i" + std::to_string(uniform(0, num_vars - 1)) : "1";
    switch (uniform(0, 9)) {
      case 0:
        return r + "+" + var + "-1";
      case 1:
        return r + "*2";
      case 2:
        return r + "/2";
      case 3:
        return "(" + r + ")%" + std::to_string(std::max<int64_t>(extent, 1));
      case 4:
        return std::to_string(std::max<int64_t>(extent, 1) - 1) + "-" + r;
      case 5:
        return "(" + r + "+" + var + ")%" + std::to_string(std::max<int64_t>(extent, 1) + 1);
      default:
        return r;
    }
  }

  // Index expressions for axes of `extents` over i0..i<num_vars-1>: with extras, some read
  // them (at least one does).
  std::vector<std::string> index_exprs(const Extras& ex, int num_vars, const Shape& extents) {
    std::vector<std::string> idx;
    bool read = false;
    for (size_t j = 0; j < extents.size(); ++j) {
      const bool use = !ex.empty() && (chance(0.6) || (!read && j + 1 == extents.size()));
      idx.push_back(use ? extra_index_expr(ex, num_vars, extents[j])
                        : index_expr(num_vars, extents[j]));
      read = read || use;
    }
    return idx;
  }

  // Overflow conditions; with extras, sometimes one that reads them (also where there are no
  // index expressions at all to read them: a 0-d x or output).
  std::vector<std::string> conditions_with(const Extras& ex, int num_vars, bool must_read) {
    std::vector<std::string> out = conditions(num_vars);
    if (ex.empty() || !(must_read || chance(0.3))) return out;
    const std::string r = extra_read(ex, num_vars, true);
    const std::string var = num_vars > 0 ? "i" + std::to_string(uniform(0, num_vars - 1)) : "0";
    switch (uniform(0, 4)) {
      case 0:
        out.push_back(r + ">" + std::to_string(uniform(0, 3)));
        break;
      case 1:
        out.push_back(r + "==" + var);
        break;
      case 2:
        out.push_back("(" + r + "-" + var + ")%2");
        break;
      case 3:
        out.push_back("!(" + r + "<0) && " + var + "!=1");
        break;
      default:
        out.push_back(r + "<0 || " + r + ">=" + std::to_string(uniform(1, 4)));
        break;
    }
    return out;
  }

  // ------------------------------------------------------------ ops
  const Value& add_reindex(const Value& x, const Shape& shape, bool allow_extras = false) {
    // The span of the extras' values: about the extents they index.
    int64_t span = 1;
    for (int64_t d : x.var.shape()) span = std::max(span, d);
    for (int64_t d : shape) span = std::max(span, d);
    const Extras ex = allow_extras && chance(0.3) ? random_extras(span) : Extras{};
    const std::vector<std::string> idx = index_exprs(ex, int(shape.size()), x.var.shape());
    const std::vector<std::string> cond = conditions_with(ex, int(shape.size()), x.var.ndim() == 0);
    const DType dt = x.var.dtype();
    double overflow = dt == DType::Bool ? double(uniform(0, 1))
                      : is_float(dt)    ? pick(std::vector<double>{0, -1, 1.5, 7, -2.25})
                                        : double(uniform(-3, 9));
    Var r = reindex(x.var, shape, idx, overflow, cond, ex.vars);
    return add_value(
        r,
        "reindex(" + x.name + ", " + shape_cpp(shape) + ", " + strings_cpp(idx) + ", " +
            num(overflow) + ", " + strings_cpp(cond) + (ex.empty() ? "" : ", " + ex.cpp()) + ")",
        std::max(x.bound, std::fabs(overflow)), x.may_nan, x.fragile, false, ex.listing);
  }

  void op_unary() {
    const Value x = pick_value();
    const int op = uniform(0, 18);
    const bool xf = is_float(x.var.dtype());
    static const char* names[] = {"-",     "abs",     "exp",  "log",   "sqrt",        "sin", "cos",
                                  "tanh",  "sigmoid", "relu", "floor", "logical_not", "erf", "atan",
                                  "expm1", "log1p",   "tan",  "asin",  "acos"};
    Var r;
    double bound = x.bound;
    bool nan = x.may_nan, fragile = x.fragile;
    switch (op) {
      case 0:
        r = -x.var;
        break;
      case 1:
        r = abs(x.var);
        break;
      case 2:
        r = exp(x.var);
        bound = x.bound > 700 ? kInf : std::exp(x.bound);
        fragile = true;
        break;
      case 3:
        r = log(x.var);
        bound = kInf;  // log(0) = -inf; negatives give NaN
        fragile = true;
        break;
      case 4:
        r = sqrt(x.var);
        bound = std::sqrt(x.bound);
        nan = true;
        fragile = true;
        break;
      case 5:
      case 6:
      case 7:
      case 8: {
        static Var (*const f[])(const Var&) = {sin, cos, tanh, sigmoid};
        r = f[op - 5](x.var);
        bound = 1;
        nan = x.may_nan || std::isinf(x.bound);  // sin(inf)
        fragile = true;
        break;
      }
      case 9:
        r = relu(x.var);
        break;
      case 10:
        if (x.fragile) throw Rejected{};  // one ulp below an integer floors one lower
        r = floor(x.var);
        break;
      case 12:
      case 13:
        r = op == 12 ? erf(x.var) : atan(x.var);
        bound = 2;
        fragile = true;
        break;
      case 14:
        r = expm1(x.var);
        bound = x.bound > 700 ? kInf : std::exp(x.bound);
        fragile = true;
        break;
      case 15:
        r = log1p(x.var);
        bound = kInf;  // log1p(-1) = -inf; below -1 NaN
        nan = true;
        fragile = true;
        break;
      case 16:
        // tan amplifies an input's error by 1 + tan^2: a fragile input only within [-1, 1],
        // where that is at most 3.5 (tan(exp(4)) differed by 3 float32 ulps, seed 678).
        if (x.fragile && x.bound > 1) throw Rejected{};
        r = tan(x.var);
        bound = kInf;
        nan = x.may_nan || std::isinf(x.bound);
        fragile = true;
        break;
      case 17:
      case 18:
        if (x.fragile) throw Rejected{};  // the slope is unbounded at -1 and 1
        r = op == 17 ? asin(x.var) : acos(x.var);
        bound = 4;
        nan = true;  // outside [-1, 1]
        fragile = true;
        break;
      case 11:
        if (x.fragile) throw Rejected{};
        r = logical_not(x.var);
        bound = 1;
        nan = false;
        break;
    }
    if (!xf && ((op >= 2 && op <= 8) || op >= 12)) fragile = true;  // integers go through float32
    add_value(r, std::string(op == 0 ? "-" : names[op]) + "(" + x.name + ")", bound, nan, fragile,
              op <= 1);
  }

  void op_binary() {
    const Value x = pick_value();
    const int op = uniform(0, 8);  // + - * / maximum minimum pow, comparison, logical
    const bool scalar_form = chance(0.3);
    Value y;
    double s = 0;
    bool scalar_left = false;
    if (scalar_form) {
      s = random_scalar(x.var.dtype());
      // double-Var forms exist for + - * / and the comparisons.
      scalar_left = (op <= 3 || op == 7) && chance(0.4);
    } else {
      y = compatible(pick_value(), x.var.shape());
    }
    const Var xv = x.var, yv = scalar_form ? Var() : Var(y.var);
    auto apply = [&](auto f) -> Var {
      if (scalar_form) return scalar_left ? f(s, xv) : f(xv, s);
      return f(xv, yv);
    };
    auto apply_right = [&](auto f) -> Var { return scalar_form ? f(xv, s) : f(xv, yv); };
    const double by = scalar_form ? std::fabs(s) : y.bound;
    const bool ynan = scalar_form ? false : y.may_nan;
    const bool yfrag = scalar_form ? false : y.fragile;
    const std::string yname = scalar_form ? num(s) : y.name;
    const std::string args = scalar_left ? yname + ", " + x.name : x.name + ", " + yname;
    const std::string lhs = scalar_left ? yname : x.name, rhs = scalar_left ? x.name : yname;
    const bool nan = x.may_nan || ynan, fragile = x.fragile || yfrag;
    switch (op) {
      case 0:
        add_value(apply([](auto a, auto b) { return a + b; }), lhs + " + " + rhs, x.bound + by, nan,
                  fragile, true);
        return;
      case 1:
        add_value(apply([](auto a, auto b) { return a - b; }), lhs + " - " + rhs, x.bound + by, nan,
                  fragile, true);
        return;
      case 2:
        add_value(apply([](auto a, auto b) { return a * b; }), lhs + " * " + rhs, x.bound * by, nan,
                  fragile, true);
        return;
      case 3: {
        Var r = apply([](auto a, auto b) { return a / b; });
        const bool float_div = is_float(r.dtype());
        // Integer division never grows |value| (x/0 == 0); float division may give inf/NaN.
        add_value(r, lhs + " / " + rhs, float_div ? kInf : std::max(x.bound, by), nan || float_div,
                  fragile || float_div);
        return;
      }
      case 4:
        add_value(apply_right([](auto a, auto b) { return maximum(a, b); }),
                  "maximum(" + args + ")", std::max(x.bound, by), nan, fragile);
        return;
      case 5:
        add_value(apply_right([](auto a, auto b) { return minimum(a, b); }),
                  "minimum(" + args + ")", std::max(x.bound, by), nan, fragile);
        return;
      case 6: {
        // Integer powers only (no 0 to a negative power, no overflow); floats also take
        // 0.5 (NaN for negatives).
        const double e = pick(std::vector<double>{2, 3, is_float(x.var.dtype()) ? 0.5 : 1});
        Var r = pow(x.var, e);
        add_value(r, "pow(" + x.name + ", " + num(e) + ")", std::pow(std::max(x.bound, 1.0), e),
                  x.may_nan || e == 0.5, true, true);
        return;
      }
      case 7: {
        if (fragile) throw Rejected{};
        const int c = uniform(0, 5);
        static const char* syms[] = {"==", "!=", "<", "<=", ">", ">="};
        Var r = apply([c](auto a, auto b) {
          switch (c) {
            case 0:
              return a == b;
            case 1:
              return a != b;
            case 2:
              return a < b;
            case 3:
              return a <= b;
            case 4:
              return a > b;
            default:
              return a >= b;
          }
        });
        add_value(r, lhs + " " + syms[c] + " " + rhs, 1, false, false);
        return;
      }
      default: {
        if (fragile || scalar_form) throw Rejected{};
        const bool is_and = chance(0.5);
        Var r = is_and ? logical_and(x.var, y.var) : logical_or(x.var, y.var);
        add_value(r, std::string(is_and ? "logical_and(" : "logical_or(") + args + ")", 1, false,
                  false);
        return;
      }
    }
  }

  void op_where() {
    const Value a = pick_value();
    const Shape target = a.var.shape();
    Value cond = compatible(pick_value(), target);
    if (cond.fragile) throw Rejected{};
    Value b = compatible(pick_value(), target);
    Var r = where(cond.var, a.var, b.var);
    add_value(r, "where(" + cond.name + ", " + a.name + ", " + b.name + ")",
              std::max(a.bound, b.bound), a.may_nan || b.may_nan, a.fragile || b.fragile);
  }

  void op_cast() {
    const Value x = pick_value();
    const DType to = random_dtype();
    const DType from = x.var.dtype();
    if (is_float(from) && !is_float(to)) {
      // Truncation is exact only for exact, finite values in range.
      if (x.fragile || x.may_nan || x.bound >= (to == DType::Int64 ? 1e15 : 1e9)) throw Rejected{};
    }
    double bound = x.bound;
    // A narrower integer wraps, and a float out of the type's range gives 0: either way |value|
    // stays within the type's limit.
    if (!is_float(to)) bound = std::min(bound, int_limit(to));
    if (from == DType::Float64 && to == DType::Float32 && bound > 3e38) bound = kInf;
    add_value(cast(x.var, to), "cast(" + x.name + ", " + dtype_cpp(to) + ")", bound, x.may_nan,
              x.fragile);
  }

  void op_broadcast_to() {
    const Value x = pick_value();
    const Shape& in = x.var.shape();
    // Each input axis keeps its extent (or grows from 1); 0-2 new axes go in between.
    const int new_axes = uniform(in.empty() ? 1 : 0, 2);
    if (int(in.size()) + new_axes > 5) throw Rejected{};
    std::vector<bool> is_new(in.size() + size_t(new_axes), false);
    for (int k = 0; k < new_axes;) {
      const size_t pos = size_t(uniform(0, int(is_new.size()) - 1));
      if (!is_new[pos]) {
        is_new[pos] = true;
        ++k;
      }
    }
    Shape shape;
    std::vector<int64_t> dims;
    const int64_t out_nd = int64_t(is_new.size());
    bool leading_only = true;
    for (size_t k = 0, j = 0; k < is_new.size(); ++k) {
      if (is_new[k]) {
        shape.push_back(uniform(1, 4));
        dims.push_back(chance(0.5) ? int64_t(k) : int64_t(k) - out_nd);  // negative form
        leading_only = leading_only && k < size_t(new_axes);
      } else {
        const int64_t d = in[j++];
        shape.push_back(d == 1 && chance(0.6) ? uniform(1, 4) : d);
      }
    }
    if (leading_only && chance(0.5)) dims.clear();  // numpy rules
    Var r = broadcast_to(x.var, shape, dims);
    add_value(r, "broadcast_to(" + x.name + ", " + shape_cpp(shape) + ", " + ints_cpp(dims) + ")",
              x.bound, x.may_nan, x.fragile);
  }

  void op_reindex() {
    const Value x = pick_value();
    add_reindex(x, random_shape(4), true);
  }

  void op_reindex_reduce() {
    const Value y = pick_value();
    const Shape shape = random_shape(3);
    const int ny = int(y.var.ndim());
    int64_t span = 1;
    for (int64_t d : y.var.shape()) span = std::max(span, d);
    for (int64_t d : shape) span = std::max(span, d);
    const Extras ex = chance(0.3) ? random_extras(span) : Extras{};
    const std::vector<std::string> idx = index_exprs(ex, ny, shape);
    const std::vector<std::string> cond = conditions_with(ex, ny, shape.empty());
    const ReduceOp op =
        pick(std::vector<ReduceOp>{ReduceOp::Add, ReduceOp::Mul, ReduceOp::Max, ReduceOp::Min});
    Var r = reindex_reduce(y.var, op, shape, idx, cond, ex.vars);
    const double n = double(std::max<int64_t>(y.var.numel(), 1));
    double bound;
    bool fragile = y.fragile;
    if (op == ReduceOp::Add) {
      bound = y.bound * n;
      fragile = fragile || is_float(r.dtype());  // accumulation order
    } else if (op == ReduceOp::Mul) {
      bound = y.bound <= 1 ? 1 : std::pow(y.bound, n);
      fragile = fragile || is_float(r.dtype());
    } else {
      bound = int_limit(r.dtype());  // untouched targets keep the identity: lowest, -inf, ...
    }
    static const char* ops[] = {"ReduceOp::Add", "ReduceOp::Mul", "ReduceOp::Max", "ReduceOp::Min"};
    add_value(r,
              "reindex_reduce(" + y.name + ", " + ops[int(op)] + ", " + shape_cpp(shape) + ", " +
                  strings_cpp(idx) + ", " + strings_cpp(cond) +
                  (ex.empty() ? "" : ", " + ex.cpp()) + ")",
              bound, y.may_nan, fragile, op == ReduceOp::Add || op == ReduceOp::Mul, ex.listing);
  }

  void op_reduce() {
    const Value x = pick_value();
    const int64_t nd = x.var.ndim();
    if (nd == 0) throw Rejected{};
    std::vector<int64_t> dims;
    double count = 1;
    const bool all = chance(0.2);
    for (int64_t k = 0; k < nd; ++k) {
      if (all || chance(0.4)) {
        if (!all) dims.push_back(chance(0.3) ? k - nd : k);
        count *= double(x.var.shape()[size_t(k)]);
      }
    }
    if (!all && dims.empty()) {
      const int64_t k = uniform(0, int(nd) - 1);
      dims.push_back(k);
      count = double(x.var.shape()[size_t(k)]);
    }
    std::shuffle(dims.begin(), dims.end(), rng_);
    const bool keepdims = chance(0.4);
    const ReduceOp op = pick(std::vector<ReduceOp>{ReduceOp::Add, ReduceOp::Mul, ReduceOp::Max,
                                                   ReduceOp::Min, ReduceOp::Mean});
    Var r = reduce(x.var, op, dims, keepdims);
    double bound = x.bound;
    bool fragile = x.fragile, nan = x.may_nan;
    const bool float_out = is_float(r.dtype());
    switch (op) {
      case ReduceOp::Add:
        bound = x.bound * std::max(count, 1.0);
        fragile = fragile || float_out;
        break;
      case ReduceOp::Mul:
        bound = x.bound <= 1 ? 1 : std::pow(x.bound, count);
        fragile = fragile || float_out;
        break;
      case ReduceOp::Mean:
        fragile = true;
        nan = nan || count == 0;  // 0/0
        break;
      default:
        if (count == 0) bound = int_limit(r.dtype());  // the identity: lowest, -inf, ...
        break;
    }
    static const char* ops[] = {"ReduceOp::Add", "ReduceOp::Mul", "ReduceOp::Max", "ReduceOp::Min",
                                "ReduceOp::Mean"};
    add_value(r,
              std::string("reduce(") + x.name + ", " + ops[int(op)] + ", " + ints_cpp(dims) + ", " +
                  (keepdims ? "true" : "false") + ")",
              bound, nan, fragile, op == ReduceOp::Add || op == ReduceOp::Mul);
  }

  void op_transpose() {
    const Value x = pick_value();
    const int64_t nd = x.var.ndim();
    if (nd < 2) throw Rejected{};
    std::vector<int64_t> perm(static_cast<size_t>(nd));
    for (int64_t k = 0; k < nd; ++k) perm[size_t(k)] = k;
    std::shuffle(perm.begin(), perm.end(), rng_);
    for (int64_t& p : perm)
      if (chance(0.3)) p -= nd;  // negative form
    add_value(transpose(x.var, perm), "transpose(" + x.name + ", " + ints_cpp(perm) + ")", x.bound,
              x.may_nan, x.fragile);
  }

  void op_reshape() {
    const Value x = pick_value();
    const Shape& in = x.var.shape();
    Shape shape;
    const int kind = uniform(0, 2);
    if (kind == 0) {  // flatten
      shape = {x.var.numel() > 0 && chance(0.5) ? -1 : x.var.numel()};
    } else if (kind == 1 && in.size() >= 2) {  // merge two adjacent axes
      const size_t k = size_t(uniform(0, int(in.size()) - 2));
      for (size_t j = 0; j < in.size(); ++j) {
        if (j == k)
          shape.push_back(in[j] * in[j + 1]);
        else if (j != k + 1)
          shape.push_back(in[j]);
      }
    } else {  // insert a size-1 axis
      shape = in;
      shape.insert(shape.begin() + uniform(0, int(in.size())), 1);
      if (shape.size() > 5) throw Rejected{};
    }
    add_value(reshape(x.var, shape), "reshape(" + x.name + ", " + shape_cpp(shape) + ")", x.bound,
              x.may_nan, x.fragile);
  }

  void add_random_op() {
    const int r = uniform(0, 99);
    if (r < 20)
      op_unary();
    else if (r < 45)
      op_binary();
    else if (r < 50)
      op_where();
    else if (r < 57)
      op_cast();
    else if (r < 64)
      op_broadcast_to();
    else if (r < 74)
      op_reindex();
    else if (r < 80)
      op_reindex_reduce();
    else if (r < 91)
      op_reduce();
    else if (r < 96)
      op_transpose();
    else
      op_reshape();
  }

  RandomBits rng_;
  bool large_ = false;
  int num_extras_ = 0;  // extra leaves made so far (named e0, e1, ...)
  std::optional<size_t> staged_;
  std::vector<Value> values_;
  std::map<const Node*, size_t> value_of_node_;  // index in values_ of each value's node
  std::ostringstream listing_;
};

}  // namespace random_graph_detail

using random_graph_detail::GraphGenerator;

}  // namespace metajit_test
