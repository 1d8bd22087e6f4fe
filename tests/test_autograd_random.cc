// Gradients of random graphs against finite differences of metajit's own forward pass.
//
// Each graph (float64 leaves, a few dozen elements in all) is built from smooth element-wise
// ops, numpy broadcasting, broadcast_to, reindex (affine, strided, reversed, diagonal, modulo
// and division indexes, overflow values and conditions), reindex_reduce, reduce, transpose,
// reshape, matmul, softmax, conv2d and max_pool2d, plus a few ops with kinks or jumps
// (abs, relu, floor, maximum/minimum, max/min reductions, where on a comparison). The loss is
// the sum of the graph's outputs; grad() of it is compared with central differences
// (f(x+h) - f(x-h)) / 2h, h = 1e-6, evaluated by metajit itself: all 2N+1 perturbed losses of
// a graph in one eval() call.
//
// Kinks: with continuous random inputs, a kink or jump lies within h of an input only by
// accident. Where one does, the one-sided differences (f(x+h) - f(x))/h and (f(x) - f(x-h))/h
// disagree, and the central difference may be off from either side's derivative by up to half
// their gap: the tolerance of that coordinate grows by the gap |D+ - D-| (for a smooth function
// the gap is about h|f''|, negligible). Such coordinates are counted, and each batch checks
// that they are rare, so the check never passes by excusing everything.
//
// Each graph comes from std::mt19937_64 seeded with its number:
//   METAJIT_GRAD_SEED=1234 test_autograd_random "[grad-seed]"
// rebuilds graph 1234 and prints it as C++. METAJIT_GRAD_GRAPHS=N changes how many graphs each
// batch checks (default 30; a whole number from 1 up, anything else fails the batch; 100 or more
// for a deeper run than CI's).
#include <metajit/metajit.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <limits>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

using namespace metajit;

namespace {

constexpr double kStep = 1e-6;         // finite-difference step
constexpr double kTolerance = 1e-4;    // |grad - fd| <= kTolerance * (1 + |fd|) (+ kink gap)
constexpr int64_t kMaxLeafNumel = 40;  // all leaves together: 2N+1 forward copies per graph
constexpr int64_t kMaxNumel = 400;     // elements of any intermediate value
constexpr double kMaxBound = 60;       // |value| of any intermediate value
constexpr double kLeafBound = 1.5;     // leaves are uniform in [-1.5, 1.5]
constexpr uint64_t kMaxGraphsPerBatch = 100000;  // seeds of batch b are b * 100000 + k

std::string shape_cpp(const Shape& s) {
  std::string out = "{";
  for (size_t k = 0; k < s.size(); ++k) out += (k ? ", " : "") + std::to_string(s[k]);
  return out + "}";
}

std::string strings_cpp(const std::vector<std::string>& v) {
  std::string out = "{";
  for (size_t k = 0; k < v.size(); ++k) out += (k ? ", \"" : "\"") + v[k] + "\"";
  return out + "}";
}

std::string num(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  std::string t = buf;
  if (t.find_first_of(".en") == std::string::npos) t += ".0";
  return t;
}

struct Rejected {};  // an op the generator does not want here: it tries another

// A random graph of float64 ops as a program that can be replayed on any leaves: the test
// builds it once on the leaves, then on each perturbed copy of them.
class SmoothGraph {
 public:
  using Step = std::function<Var(const std::vector<Var>&)>;

  explicit SmoothGraph(uint64_t seed) : rng_(seed) {}

  // 1-3 leaves, 2-10 random ops, then the output: the single value nothing else uses, or the
  // weighted sum of the sums of all such values.
  void build() {
    const int leaves = uniform(1, 3);
    int64_t budget = kMaxLeafNumel;
    for (int k = 0; k < leaves && budget > 0; ++k) budget -= add_leaf(budget);
    const int ops = uniform(2, 10);
    for (int k = 0; k < ops; ++k) {
      for (int attempt = 0;; ++attempt) {
        if (attempt >= 200) throw std::logic_error("random graph: no valid op in 200 tries");
        try {
          add_random_op();
          break;
        } catch (const Rejected&) {
        }
      }
    }
    finish();
  }

  size_t num_leaves() const { return leaf_values_.size(); }
  const std::vector<double>& leaf_values(size_t k) const { return leaf_values_[k]; }
  const Shape& leaf_shape(size_t k) const { return leaf_shapes_[k]; }
  std::string listing() const { return listing_.str(); }
  // Whether grad() is asked for the gradient of the (non-scalar) output itself, whose sum is
  // the loss, rather than of its sum.
  bool grad_of_output() const { return grad_of_output_; }

  Var make_leaf(size_t k, const std::vector<double>& values) const {
    return array(values, leaf_shapes_[k]);
  }
  // The graph replayed on `leaves`: its output.
  Var output(const std::vector<Var>& leaves) const {
    std::vector<Var> v = leaves;
    for (const Step& s : steps_) v.push_back(s(v));
    return v.back();
  }

 private:
  struct Value {
    Shape shape;
    double bound = 0;
    bool used = false;
  };

  // ------------------------------------------------------------ randomness
  int uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  bool chance(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }
  template <class T>
  T pick(const std::vector<T>& v) {
    return v[size_t(uniform(0, int(v.size()) - 1))];
  }
  // Prefer recent values so that graphs grow deep rather than wide.
  size_t pick_value() {
    const int n = int(values_.size());
    return size_t(chance(0.5) ? n - 1 : uniform(0, n - 1));
  }
  std::string name(size_t k) const { return "v" + std::to_string(k); }

  Shape random_shape(int max_rank) {
    const int r = uniform(0, 99);
    int rank = r < 10 ? 0 : r < 35 ? 1 : r < 70 ? 2 : r < 90 ? 3 : 4;
    rank = std::min(rank, max_rank);
    Shape s;
    for (int k = 0; k < rank; ++k) s.push_back(uniform(1, 5));
    return s;
  }

  // ------------------------------------------------------------ values
  int64_t add_leaf(int64_t budget) {
    Shape shape;
    for (int tries = 0;; ++tries) {
      shape = random_shape(3);
      if (numel_of(shape) <= budget) break;
      if (tries > 50) shape = {};
    }
    std::vector<double> vals;
    std::uniform_real_distribution<double> u(-kLeafBound, kLeafBound);
    for (int64_t k = 0; k < numel_of(shape); ++k) vals.push_back(u(rng_));
    listing_ << "Var " << name(values_.size()) << " = array<double>({";
    for (size_t k = 0; k < vals.size(); ++k) listing_ << (k ? ", " : "") << num(vals[k]);
    listing_ << "}, " << shape_cpp(shape) << ");\n";
    current_.push_back(array(vals, shape));
    values_.push_back({shape, kLeafBound, false});
    leaf_values_.push_back(std::move(vals));
    leaf_shapes_.push_back(shape);
    return numel_of(shape);
  }

  // Records the op `step` on the values built so far, or rejects it: a metajit error (an
  // invalid shape), too many elements or too large a bound.
  size_t add(const Step& step, const std::string& text, double bound,
             const std::vector<size_t>& operands) {
    if (!(bound <= kMaxBound)) throw Rejected{};
    Var v;
    try {
      v = step(current_);
    } catch (const metajit::Error&) {
      throw Rejected{};
    }
    if (v.numel() == 0 || v.numel() > kMaxNumel || v.dtype() != DType::Float64) throw Rejected{};
    for (size_t k : operands) values_[k].used = true;
    const size_t k = values_.size();
    listing_ << "Var " << name(k) << " = " << text << ";  // " << shape_str(v.shape()) << "\n";
    steps_.push_back(step);
    current_.push_back(v);
    values_.push_back({v.shape(), bound, false});
    return k;
  }

  // ------------------------------------------------------------ index expressions
  // An affine expression over i0..i<num_vars-1> that usually lands in [0, extent): random
  // variables (sometimes one shared by two axes: a diagonal), coefficients up to 3, reversed,
  // sometimes a modulo or a division.
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
    if (chance(0.1))
      e = "(" + e + ")%" + std::to_string(chance(0.5) ? 2 : std::max<int64_t>(extent, 1));
    else if (chance(0.08))
      e = "(" + e + ")/2";
    return e;
  }

  std::vector<std::string> conditions(int num_vars) {
    std::vector<std::string> out;
    if (num_vars == 0 || !chance(0.25)) return out;
    const std::string a = "i" + std::to_string(uniform(0, num_vars - 1));
    const std::string b = "i" + std::to_string(uniform(0, num_vars - 1));
    switch (uniform(0, 3)) {
      case 0:
        out.push_back(a + ">" + std::to_string(uniform(0, 3)));
        break;
      case 1:
        out.push_back("(" + a + "-" + b + ")%2");
        break;
      case 2:
        out.push_back("!(" + a + "==" + std::to_string(uniform(0, 2)) + ")");
        break;
      default:
        out.push_back(a + "*2>=" + b + "+1");
        break;
    }
    return out;
  }

  // x read into `shape` by a random reindex (a new value), e.g. an operand of matmul or conv2d.
  size_t into(size_t x, const Shape& shape) {
    const Value& xv = values_[x];
    std::vector<std::string> idx;
    // Half of the time each input axis reads its own output axis (a crop, a pad or a stride):
    // the invertible maps the gradient computes as a gather; else random expressions.
    const bool structured = chance(0.5) && xv.shape.size() <= shape.size();
    std::vector<int> axes(shape.size());
    for (size_t k = 0; k < axes.size(); ++k) axes[k] = int(k);
    std::shuffle(axes.begin(), axes.end(), rng_);
    for (size_t j = 0; j < xv.shape.size(); ++j) {
      if (!structured) {
        idx.push_back(index_expr(int(shape.size()), xv.shape[j]));
        continue;
      }
      const std::string i = "i" + std::to_string(axes[j]);
      switch (uniform(0, 4)) {
        case 0:
          idx.push_back(i);
          break;
        case 1:
          idx.push_back(i + "-1");  // pad before
          break;
        case 2:
          idx.push_back(i + "*2");  // stride
          break;
        case 3:
          idx.push_back(std::to_string(xv.shape[j] - 1) + "-" + i);  // flip
          break;
        default:
          idx.push_back(i + "+1");  // crop
          break;
      }
    }
    const std::vector<std::string> cond = conditions(int(shape.size()));
    const double overflow = pick(std::vector<double>{0, 0, -1, 1.5, 0.25});
    return add([=](const std::vector<Var>& v) { return reindex(v[x], shape, idx, overflow, cond); },
               "reindex(" + name(x) + ", " + shape_cpp(shape) + ", " + strings_cpp(idx) + ", " +
                   num(overflow) + ", " + strings_cpp(cond) + ")",
               std::max(xv.bound, std::fabs(overflow)), {x});
  }

  // A value that broadcasts into `target`: y itself when it does, else y summed to 0-d or
  // reindexed into `target` with some leading axes dropped and some set to 1.
  size_t compatible(size_t y, const Shape& target) {
    const Shape& ys = values_[y].shape;
    bool fits = ys.size() <= target.size();
    for (size_t k = 0; fits && k < ys.size(); ++k) {
      const int64_t d = ys[ys.size() - 1 - k];
      fits = d == 1 || d == target[target.size() - 1 - k];
    }
    if (fits && chance(0.85)) return y;
    if (chance(0.2)) {
      const double bound = values_[y].bound * double(numel_of(ys));
      return add([=](const std::vector<Var>& v) { return sum(v[y]); }, "sum(" + name(y) + ")",
                 bound, {y});
    }
    Shape s;
    const size_t drop = size_t(uniform(0, int(target.size())));
    for (size_t k = drop; k < target.size(); ++k) s.push_back(chance(0.3) ? 1 : target[k]);
    return into(y, s);
  }

  // ------------------------------------------------------------ ops
  void op_unary() {
    const size_t x = pick_value();
    const double b = values_[x].bound;
    const std::string n = name(x);
    auto unary = [&](Var (*f)(const Var&), const std::string& fname, double bound) {
      add([=](const std::vector<Var>& v) { return f(v[x]); }, fname + "(" + n + ")", bound, {x});
    };
    switch (uniform(0, 19)) {
      case 0:
        add([=](const std::vector<Var>& v) { return -v[x]; }, "-" + n, b, {x});
        return;
      case 1:
        return unary(sin, "sin", 1);
      case 2:
        return unary(cos, "cos", 1);
      case 3:
        return unary(tanh, "tanh", 1);
      case 4:
        return unary(sigmoid, "sigmoid", 1);
      case 5:
        if (b > 3) throw Rejected{};
        return unary(exp, "exp", std::exp(b));
      case 6: {  // log of a value at least c > 0
        const double c = pick(std::vector<double>{0.5, 1, 2});
        add([=](const std::vector<Var>& v) { return log(v[x] * v[x] + c); },
            "log(" + n + " * " + n + " + " + num(c) + ")",
            std::max(std::fabs(std::log(c)), std::log(b * b + c)), {x});
        return;
      }
      case 7: {
        const double c = pick(std::vector<double>{0.25, 1});
        add([=](const std::vector<Var>& v) { return sqrt(v[x] * v[x] + c); },
            "sqrt(" + n + " * " + n + " + " + num(c) + ")", std::sqrt(b * b + c), {x});
        return;
      }
      case 8: {
        const double e = pick(std::vector<double>{2, 3});
        add([=](const std::vector<Var>& v) { return pow(v[x], e); },
            "pow(" + n + ", " + num(e) + ")", std::pow(b, e), {x});
        return;
      }
      case 9: {  // a fractional or negative power of a positive value
        const double c = pick(std::vector<double>{0.5, 1});
        const double p = pick(std::vector<double>{0.5, -0.5, 1.5, -1});
        add([=](const std::vector<Var>& v) { return pow(v[x] * v[x] + c, p); },
            "pow(" + n + " * " + n + " + " + num(c) + ", " + num(p) + ")",
            p > 0 ? std::pow(b * b + c, p) : std::pow(c, p), {x});
        return;
      }
      case 10:  // kinks at 0
        return unary(abs, "abs", b);
      case 11:
        return unary(relu, "relu", b);
      case 12:  // zero gradient, jumps at integers
        if (!chance(0.3)) throw Rejected{};
        return unary(floor, "floor", b + 1);
      case 13:
        return unary(erf, "erf", 1);
      case 14:
        return unary(atan, "atan", 2);
      case 15:
        if (b > 3) throw Rejected{};
        return unary(expm1, "expm1", std::exp(b));
      case 16: {  // log1p of a value at least c > -1
        const double c = pick(std::vector<double>{-0.5, 0, 1});
        add([=](const std::vector<Var>& v) { return log1p(v[x] * v[x] + c); },
            "log1p(" + n + " * " + n + " + " + num(c) + ")",
            std::max(std::fabs(std::log1p(c)), std::log1p(b * b + c)), {x});
        return;
      }
      case 17: {  // asin, acos and tan inside their domains: of 0.9 tanh(x), |.| < 0.9
        static Var (*const f[])(const Var&) = {asin, acos, tan};
        static const char* names[] = {"asin", "acos", "tan"};
        const int k = uniform(0, 2);
        add([=](const std::vector<Var>& v) { return f[k](tanh(v[x]) * 0.9); },
            std::string(names[k]) + "(tanh(" + n + ") * 0.9)", 3.2, {x});
        return;
      }
      case 18: {
        const bool approx = chance(0.5);
        add([=](const std::vector<Var>& v) { return gelu(v[x], approx); },
            "gelu(" + n + ", " + (approx ? "true" : "false") + ")", b, {x});
        return;
      }
      default: {  // a composite the rules see often: x * sigmoid(x) (SiLU)
        add([=](const std::vector<Var>& v) { return v[x] * sigmoid(v[x]); },
            n + " * sigmoid(" + n + ")", b, {x});
        return;
      }
    }
  }

  void op_binary() {
    const size_t x = pick_value();
    const double bx = values_[x].bound;
    const std::string nx = name(x);
    const int op = uniform(0, 7);   // + - * / maximum minimum pow where
    if (chance(0.25) && op <= 5) {  // a scalar operand
      const double s = pick(std::vector<double>{-2, -1, -0.5, 0.5, 2, 3});
      const bool left = chance(0.4);
      switch (op) {
        case 0:
          add([=](const std::vector<Var>& v) { return left ? s + v[x] : v[x] + s; },
              left ? num(s) + " + " + nx : nx + " + " + num(s), bx + std::fabs(s), {x});
          return;
        case 1:
          add([=](const std::vector<Var>& v) { return left ? s - v[x] : v[x] - s; },
              left ? num(s) + " - " + nx : nx + " - " + num(s), bx + std::fabs(s), {x});
          return;
        case 2:
          add([=](const std::vector<Var>& v) { return left ? s * v[x] : v[x] * s; },
              left ? num(s) + " * " + nx : nx + " * " + num(s), bx * std::fabs(s), {x});
          return;
        case 3:
          if (left)
            add([=](const std::vector<Var>& v) { return s / (v[x] * v[x] + 0.5); },
                num(s) + " / (" + nx + " * " + nx + " + 0.5)", std::fabs(s) * 2, {x});
          else
            add([=](const std::vector<Var>& v) { return v[x] / s; }, nx + " / " + num(s),
                bx / std::fabs(s), {x});
          return;
        case 4:
          add([=](const std::vector<Var>& v) { return maximum(v[x], s); },
              "maximum(" + nx + ", " + num(s) + ")", std::max(bx, std::fabs(s)), {x});
          return;
        default:
          add([=](const std::vector<Var>& v) { return minimum(v[x], s); },
              "minimum(" + nx + ", " + num(s) + ")", std::max(bx, std::fabs(s)), {x});
          return;
      }
    }
    const size_t y = compatible(pick_value(), values_[x].shape);
    const double by = values_[y].bound;
    const std::string ny = name(y);
    switch (op) {
      case 0:
        add([=](const std::vector<Var>& v) { return v[x] + v[y]; }, nx + " + " + ny, bx + by,
            {x, y});
        return;
      case 1:
        add([=](const std::vector<Var>& v) { return v[x] - v[y]; }, nx + " - " + ny, bx + by,
            {x, y});
        return;
      case 2:
        add([=](const std::vector<Var>& v) { return v[x] * v[y]; }, nx + " * " + ny, bx * by,
            {x, y});
        return;
      case 3: {  // the divisor kept away from 0
        const double c = pick(std::vector<double>{0.5, 1});
        add([=](const std::vector<Var>& v) { return v[x] / (v[y] * v[y] + c); },
            nx + " / (" + ny + " * " + ny + " + " + num(c) + ")", bx / c, {x, y});
        return;
      }
      case 4:
        add([=](const std::vector<Var>& v) { return maximum(v[x], v[y]); },
            "maximum(" + nx + ", " + ny + ")", std::max(bx, by), {x, y});
        return;
      case 5:
        add([=](const std::vector<Var>& v) { return minimum(v[x], v[y]); },
            "minimum(" + nx + ", " + ny + ")", std::max(bx, by), {x, y});
        return;
      case 6: {  // a Var exponent: both gradients (the base's and the exponent's)
        if (by > 2) throw Rejected{};
        const double c = pick(std::vector<double>{0.5, 1});
        add([=](const std::vector<Var>& v) { return pow(v[x] * v[x] + c, v[y]); },
            "pow(" + nx + " * " + nx + " + " + num(c) + ", " + ny + ")",
            std::max(std::pow(bx * bx + c, by), std::pow(c, -by)), {x, y});
        return;
      }
      default: {  // where on a comparison: a jump where x crosses y
        const size_t z = compatible(pick_value(), values_[x].shape);
        const std::string nz = name(z);
        add([=](const std::vector<Var>& v) { return where(v[x] > v[y], v[x], v[z]); },
            "where(" + nx + " > " + ny + ", " + nx + ", " + nz + ")",
            std::max(bx, values_[z].bound), {x, y, z});
        return;
      }
    }
  }

  void op_broadcast_to() {
    const size_t x = pick_value();
    const Shape in = values_[x].shape;
    const int new_axes = uniform(in.empty() ? 1 : 0, 2);
    if (int(in.size()) + new_axes > 4) throw Rejected{};
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
    bool leading_only = true;
    for (size_t k = 0, j = 0; k < is_new.size(); ++k) {
      if (is_new[k]) {
        shape.push_back(uniform(1, 4));
        dims.push_back(int64_t(k));
        leading_only = leading_only && k < size_t(new_axes);
      } else {
        const int64_t d = in[j++];
        shape.push_back(d == 1 && chance(0.6) ? uniform(2, 4) : d);
      }
    }
    if (leading_only && chance(0.5)) dims.clear();  // numpy rules
    add([=](const std::vector<Var>& v) { return broadcast_to(v[x], shape, dims); },
        "broadcast_to(" + name(x) + ", " + shape_cpp(shape) + ", " + shape_cpp(dims) + ")",
        values_[x].bound, {x});
  }

  void op_reindex_reduce() {
    const size_t y = pick_value();
    const Value& yv = values_[y];
    const Shape shape = random_shape(3);
    const int ny = int(yv.shape.size());
    std::vector<std::string> idx;
    for (int64_t d : shape) idx.push_back(index_expr(ny, d));
    const std::vector<std::string> cond = conditions(ny);
    const int op = uniform(0, 3);
    const std::string args =
        shape_cpp(shape) + ", " + strings_cpp(idx) + ", " + strings_cpp(cond) + ")";
    const std::string n = name(y);
    const double b = yv.bound;
    switch (op) {
      case 0:
        add(
            [=](const std::vector<Var>& v) {
              return reindex_reduce(v[y], ReduceOp::Add, shape, idx, cond);
            },
            "reindex_reduce(" + n + ", ReduceOp::Add, " + args, b * double(numel_of(yv.shape)),
            {y});
        return;
      case 1: {  // products of at most 24 values of at most 1.2
        if (b > 1.2 || numel_of(yv.shape) > 24) throw Rejected{};
        add(
            [=](const std::vector<Var>& v) {
              return reindex_reduce(v[y], ReduceOp::Mul, shape, idx, cond);
            },
            "reindex_reduce(" + n + ", ReduceOp::Mul, " + args,
            std::max(1.0, std::pow(b, double(numel_of(yv.shape)))), {y});
        return;
      }
      default: {
        // Targets nothing reaches hold -inf (max) or +inf (min): clamped to a constant past
        // the bound, which never ties with a value.
        const bool is_max = op == 2;
        const double c = is_max ? -(b + 1) : b + 1;
        add(
            [=](const std::vector<Var>& v) {
              Var r =
                  reindex_reduce(v[y], is_max ? ReduceOp::Max : ReduceOp::Min, shape, idx, cond);
              return is_max ? maximum(r, c) : minimum(r, c);
            },
            std::string(is_max ? "maximum(" : "minimum(") + "reindex_reduce(" + n +
                (is_max ? ", ReduceOp::Max, " : ", ReduceOp::Min, ") + args + ", " + num(c) + ")",
            b + 1, {y});
        return;
      }
    }
  }

  void op_reduce() {
    const size_t x = pick_value();
    const Shape& s = values_[x].shape;
    const int64_t nd = int64_t(s.size());
    if (nd == 0) throw Rejected{};
    std::vector<int64_t> dims;
    double count = 1;
    const bool all = chance(0.2);
    for (int64_t k = 0; k < nd; ++k) {
      if (all || chance(0.4)) {
        if (!all) dims.push_back(chance(0.3) ? k - nd : k);
        count *= double(s[size_t(k)]);
      }
    }
    if (!all && dims.empty()) {
      const int64_t k = uniform(0, int(nd) - 1);
      dims.push_back(k);
      count = double(s[size_t(k)]);
    }
    std::shuffle(dims.begin(), dims.end(), rng_);
    const bool keepdims = chance(0.4);
    const ReduceOp op = pick(std::vector<ReduceOp>{ReduceOp::Add, ReduceOp::Add, ReduceOp::Mul,
                                                   ReduceOp::Max, ReduceOp::Min, ReduceOp::Mean});
    const double b = values_[x].bound;
    double bound = b;
    if (op == ReduceOp::Add) bound = b * count;
    if (op == ReduceOp::Mul) {
      if (b > 1.5) throw Rejected{};
      bound = std::max(1.0, std::pow(b, count));
    }
    static const char* ops[] = {"ReduceOp::Add", "ReduceOp::Mul", "ReduceOp::Max", "ReduceOp::Min",
                                "ReduceOp::Mean"};
    add([=](const std::vector<Var>& v) { return reduce(v[x], op, dims, keepdims); },
        std::string("reduce(") + name(x) + ", " + ops[int(op)] + ", " + shape_cpp(dims) + ", " +
            (keepdims ? "true" : "false") + ")",
        bound, {x});
  }

  void op_transpose() {
    const size_t x = pick_value();
    const int64_t nd = int64_t(values_[x].shape.size());
    if (nd < 2) throw Rejected{};
    std::vector<int64_t> perm(static_cast<size_t>(nd));
    for (int64_t k = 0; k < nd; ++k) perm[size_t(k)] = k;
    std::shuffle(perm.begin(), perm.end(), rng_);
    add([=](const std::vector<Var>& v) { return transpose(v[x], perm); },
        "transpose(" + name(x) + ", " + shape_cpp(perm) + ")", values_[x].bound, {x});
  }

  void op_reshape() {
    const size_t x = pick_value();
    const Shape in = values_[x].shape;
    Shape shape;
    const int kind = uniform(0, 2);
    if (kind == 0) {  // flatten
      shape = {numel_of(in)};
    } else if (kind == 1 && in.size() >= 2) {  // merge two adjacent axes
      const size_t k = size_t(uniform(0, int(in.size()) - 2));
      for (size_t j = 0; j < in.size(); ++j) {
        if (j == k)
          shape.push_back(in[j] * in[j + 1]);
        else if (j != k + 1)
          shape.push_back(in[j]);
      }
    } else if (numel_of(in) % 2 == 0 && numel_of(in) > 2) {  // split: [n] -> [2, n/2]
      shape = {2, -1};
    } else {  // insert a size-1 axis
      shape = in;
      shape.insert(shape.begin() + uniform(0, int(in.size())), 1);
      if (shape.size() > 4) throw Rejected{};
    }
    add([=](const std::vector<Var>& v) { return reshape(v[x], shape); },
        "reshape(" + name(x) + ", " + shape_cpp(shape) + ")", values_[x].bound, {x});
  }

  void op_matmul() {
    size_t x = pick_value();
    Shape s = values_[x].shape;
    if (s.size() < 2 || s.size() > 3) {
      Shape t = {int64_t(uniform(1, 4)), int64_t(uniform(1, 4))};
      x = into(x, t);
      s = t;
    }
    const int64_t k = s[s.size() - 1], m = uniform(1, 4);
    const size_t w = into(pick_value(), {k, m});
    const double bound = values_[x].bound * values_[w].bound * double(k);
    const bool swap = chance(0.3) && s.size() == 2;  // [m', n] x [n, k] with a new left operand
    if (swap) {
      const size_t l = into(pick_value(), {int64_t(uniform(1, 4)), s[0]});
      add([=](const std::vector<Var>& v) { return matmul(v[l], v[x]); },
          "matmul(" + name(l) + ", " + name(x) + ")",
          values_[l].bound * values_[x].bound * double(s[0]), {l, x});
      return;
    }
    add([=](const std::vector<Var>& v) { return matmul(v[x], v[w]); },
        "matmul(" + name(x) + ", " + name(w) + ")", bound, {x, w});
  }

  void op_softmax() {
    const size_t x = pick_value();
    const int64_t nd = int64_t(values_[x].shape.size());
    if (nd == 0 || values_[x].bound > 20) throw Rejected{};
    const int64_t dim = uniform(0, int(nd) - 1) - (chance(0.3) ? nd : 0);
    add([=](const std::vector<Var>& v) { return softmax(v[x], dim); },
        "softmax(" + name(x) + ", " + std::to_string(dim) + ")", 1, {x});
  }

  void op_conv() {
    const int64_t N = uniform(1, 2), C = uniform(1, 3), H = uniform(3, 6), W = uniform(3, 6);
    const int64_t stride = uniform(1, 2), padding = uniform(0, 1);
    if (chance(0.25)) {  // max_pool2d
      const int64_t kernel = uniform(2, 3);
      const int64_t pad = std::min<int64_t>(padding, kernel / 2);
      if (H + 2 * pad < kernel || W + 2 * pad < kernel) throw Rejected{};
      const size_t x = into(pick_value(), {N, C, H, W});
      add([=](const std::vector<Var>& v) { return max_pool2d(v[x], kernel, stride, pad); },
          "max_pool2d(" + name(x) + ", " + std::to_string(kernel) + ", " + std::to_string(stride) +
              ", " + std::to_string(pad) + ")",
          values_[x].bound, {x});
      return;
    }
    const int64_t O = uniform(1, 3), kh = uniform(1, 3), kw = uniform(1, 3);
    const int64_t dilation = uniform(1, 2);
    if (H + 2 * padding - dilation * (kh - 1) - 1 < 0 ||
        W + 2 * padding - dilation * (kw - 1) - 1 < 0)
      throw Rejected{};
    const size_t x = into(pick_value(), {N, C, H, W});
    const size_t w = into(pick_value(), {O, C, kh, kw});
    add([=](const std::vector<Var>& v) { return conv2d(v[x], v[w], stride, padding, dilation); },
        "conv2d(" + name(x) + ", " + name(w) + ", " + std::to_string(stride) + ", " +
            std::to_string(padding) + ", " + std::to_string(dilation) + ")",
        values_[x].bound * values_[w].bound * double(C * kh * kw), {x, w});
  }

  void add_random_op() {
    const int r = uniform(0, 99);
    if (r < 22)
      op_unary();
    else if (r < 44)
      op_binary();
    else if (r < 51)
      op_broadcast_to();
    else if (r < 61)
      into(pick_value(), random_shape(4));
    else if (r < 67)
      op_reindex_reduce();
    else if (r < 77)
      op_reduce();
    else if (r < 82)
      op_transpose();
    else if (r < 86)
      op_reshape();
    else if (r < 92)
      op_matmul();
    else if (r < 95)
      op_softmax();
    else
      op_conv();
  }

  // The output: the only unused value, or sum_k w_k * sum(unused_k).
  void finish() {
    std::vector<size_t> sinks;
    for (size_t k = 0; k < values_.size(); ++k)
      if (!values_[k].used) sinks.push_back(k);
    if (sinks.size() == 1) {
      grad_of_output_ = !values_[sinks[0]].shape.empty() && chance(0.5);
      const size_t s = sinks[0];
      if (s != values_.size() - 1)
        steps_.push_back([s](const std::vector<Var>& v) { return v[s]; });
      listing_ << "Var output = " << name(s) << ";\n"
               << (grad_of_output_ ? "grad(output, leaves)\n" : "grad(sum(output), leaves)\n");
      return;
    }
    std::vector<double> weights;
    std::string text;
    for (size_t k : sinks) {
      weights.push_back(pick(std::vector<double>{1, -0.5, 0.75, 2}));
      text += (text.empty() ? "" : " + ") + num(weights.back()) + " * sum(" + name(k) + ")";
    }
    steps_.push_back([sinks, weights](const std::vector<Var>& v) {
      Var out = sum(v[sinks[0]]) * weights[0];
      for (size_t k = 1; k < sinks.size(); ++k) out = out + sum(v[sinks[k]]) * weights[k];
      return out;
    });
    listing_ << "Var output = " << text << ";\ngrad(sum(output), leaves)\n";
  }

  std::mt19937_64 rng_;
  std::vector<Value> values_;
  std::vector<Var> current_;  // the values, built on the leaves while generating
  std::vector<Step> steps_;
  std::vector<std::vector<double>> leaf_values_;
  std::vector<Shape> leaf_shapes_;
  bool grad_of_output_ = false;
  std::ostringstream listing_;
};

// What checking one graph found.
struct GraphResult {
  bool checked = false;  // gradients were compared with finite differences
  int coordinates = 0;   // leaf elements compared
  int kinks = 0;         // ... of which lay within a step of a kink or jump
};

// Builds graph `seed`, evaluates its loss and gradients in one eval(), then every perturbed
// loss in another, and compares.
GraphResult run_graph(uint64_t seed, bool print = false) {
  GraphResult result;
  SmoothGraph g(seed);
  try {
    g.build();
  } catch (const std::exception& e) {
    FAIL_CHECK("seed " << seed << ": building the graph threw: " << e.what() << "\n"
                       << g.listing());
    return result;
  }
  if (print) std::cout << "seed " << seed << ":\n" << g.listing() << std::flush;
  INFO("seed " << seed << " (rerun: METAJIT_GRAD_SEED=" << seed
               << " test_autograd_random \"[grad-seed]\")\n"
               << g.listing());
  const size_t L = g.num_leaves();
  std::vector<Var> leaves;
  for (size_t k = 0; k < L; ++k) leaves.push_back(g.make_leaf(k, g.leaf_values(k)));
  double loss_value = 0;
  std::vector<std::vector<double>> grads(L);
  try {
    Var out = g.output(leaves);
    Var loss = sum(out);
    std::vector<Var> gv = grad(g.grad_of_output() ? out : loss, leaves);
    REQUIRE(gv.size() == L);
    std::vector<Var> all = {loss};
    all.insert(all.end(), gv.begin(), gv.end());
    eval(all);
    loss_value = loss.item<double>();
    for (size_t k = 0; k < L; ++k) {
      CHECK(gv[k].dtype() == DType::Float64);
      CHECK(gv[k].shape() == g.leaf_shape(k));
      if (gv[k].dtype() != DType::Float64 || gv[k].shape() != g.leaf_shape(k)) return result;
      grads[k] = gv[k].to_vector<double>();
    }
  } catch (const std::exception& e) {
    FAIL_CHECK("grad/eval threw: " << e.what());
    return result;
  }
  // Every perturbed loss, in one eval(): the base, then x+h and x-h for each leaf element.
  struct Probe {
    size_t leaf, elem;
    double up, down;  // the perturbed values
  };
  std::vector<Probe> probes;
  std::vector<Var> losses;
  try {
    losses.push_back(sum(g.output(leaves)));
    for (size_t k = 0; k < L; ++k) {
      for (size_t e = 0; e < g.leaf_values(k).size(); ++e) {
        std::vector<double> vals = g.leaf_values(k);
        const double x = vals[e];
        Probe p{k, e, x + kStep, x - kStep};
        for (double v : {p.up, p.down}) {
          vals[e] = v;
          std::vector<Var> moved = leaves;
          moved[k] = g.make_leaf(k, vals);
          losses.push_back(sum(g.output(moved)));
        }
        probes.push_back(p);
      }
    }
    eval(losses);
  } catch (const std::exception& e) {
    FAIL_CHECK("evaluating the perturbed losses threw: " << e.what());
    return result;
  }
  const double f0 = losses[0].item<double>();
  // The loss evaluated with its gradients and alone: the same forward pass.
  CHECK(std::fabs(loss_value - f0) <= 1e-9 * (1 + std::fabs(f0)));
  CHECK(std::isfinite(f0));
  int reported = 0;
  for (size_t i = 0; i < probes.size(); ++i) {
    const Probe& p = probes[i];
    const double x = g.leaf_values(p.leaf)[p.elem];
    const double fp = losses[1 + 2 * i].item<double>(), fm = losses[2 + 2 * i].item<double>();
    const double central = (fp - fm) / (p.up - p.down);
    const double right = (fp - f0) / (p.up - x), left = (f0 - fm) / (x - p.down);
    const double gap = std::fabs(right - left);
    const double got = grads[p.leaf][p.elem];
    ++result.coordinates;
    const bool kink = !(gap <= 1e-3 * (1 + std::fabs(central)));
    if (kink) ++result.kinks;
    const double tol = kTolerance * (1 + std::fabs(central)) + (kink ? gap : 0);
    const bool ok = std::isfinite(got) && std::fabs(got - central) <= tol;
    if (!ok && reported++ < 5)
      FAIL_CHECK("d loss / d v" << p.leaf << "[" << p.elem << "] (x = " << num(x)
                                << "): grad() gives " << num(got) << ", central difference "
                                << num(central) << " (one-sided: " << num(left) << ", "
                                << num(right) << ")");
  }
  if (reported > 5) FAIL_CHECK("... and " << reported - 5 << " more wrong gradient elements");
  result.checked = true;
  return result;
}

// The whole number `text` spells (decimal digits only), or nullopt.
std::optional<uint64_t> whole_number(const char* text) {
  if (!text || !*text) return std::nullopt;
  uint64_t n = 0;
  for (const char* c = text; *c; ++c) {
    if (*c < '0' || *c > '9') return std::nullopt;
    const uint64_t digit = uint64_t(*c - '0');
    if (n > (std::numeric_limits<uint64_t>::max() - digit) / 10) return std::nullopt;
    n = n * 10 + digit;
  }
  return n;
}

// Graphs per batch: METAJIT_GRAD_GRAPHS, 30 when unset (three batches: 90 graphs, 2-3 s each
// with a cold kernel cache, the largest share of `make test`); anything that would check no
// graph fails the batch.
int graphs_per_batch() {
  const char* env = std::getenv("METAJIT_GRAD_GRAPHS");
  if (!env) return 30;
  const std::optional<uint64_t> n = whole_number(env);
  if (!n || *n < 1 || *n > kMaxGraphsPerBatch)
    FAIL("METAJIT_GRAD_GRAPHS='" << env << "': expected the number of random graphs per batch, "
                                 << "a whole number from 1 to " << kMaxGraphsPerBatch
                                 << " (unset: 30)");
  return int(*n);
}

void run_batch(int batch) {
  const int n = graphs_per_batch();
  int checked = 0, coordinates = 0, kinks = 0;
  for (int k = 0; k < n; ++k) {
    const GraphResult r = run_graph(uint64_t(batch) * kMaxGraphsPerBatch + uint64_t(k));
    checked += r.checked;
    coordinates += r.coordinates;
    kinks += r.kinks;
  }
  INFO("batch " << batch << ": " << checked << " of " << n << " graphs checked, " << coordinates
                << " gradient elements, " << kinks << " of them within a step of a kink");
  CHECK(checked == n);
  // Kinks excuse a coordinate's finite difference: they must stay rare, or the batch checks
  // little.
  CHECK(kinks * 20 <= coordinates);
  CHECK(coordinates >= n);
}

}  // namespace

TEST_CASE("autograd: random graphs against finite differences, batch 0", "[autograd]") {
  run_batch(0);
}
TEST_CASE("autograd: random graphs against finite differences, batch 1", "[autograd][slow]") {
  run_batch(1);
}
TEST_CASE("autograd: random graphs against finite differences, batch 2", "[autograd][slow]") {
  run_batch(2);
}

// Hidden (not run by default): reruns one graph, METAJIT_GRAD_SEED=N, and prints it.
TEST_CASE("autograd: one seed from METAJIT_GRAD_SEED", "[.][grad-seed]") {
  const char* env = std::getenv("METAJIT_GRAD_SEED");
  const std::optional<uint64_t> seed = whole_number(env);
  if (!seed)
    FAIL("METAJIT_GRAD_SEED='" << (env ? env : "") << "': expected the seed of one graph, a "
                               << "whole number (the failure message of a batch names it)");
  CHECK(run_graph(*seed, true).checked);
}

// The generator: same seed, same graph; it produces every op it is meant to.
TEST_CASE("autograd: the gradient graph generator is deterministic and covers its ops",
          "[autograd]") {
  SmoothGraph a(42), b(42);
  a.build();
  b.build();
  CHECK(a.listing() == b.listing());
  std::string all;
  for (uint64_t seed = 0; seed < 300; ++seed) {
    SmoothGraph g(seed);
    g.build();
    all += g.listing();
  }
  for (const char* op : {"reindex(",
                         "reindex_reduce(",
                         "ReduceOp::Mul, ",
                         "ReduceOp::Max, ",
                         "reduce(",
                         "ReduceOp::Mean",
                         "broadcast_to(",
                         "transpose(",
                         "reshape(",
                         "where(",
                         "matmul(",
                         "softmax(",
                         "conv2d(",
                         "max_pool2d(",
                         "exp(",
                         "log(",
                         "sqrt(",
                         "pow(",
                         " / ",
                         "maximum(",
                         "minimum(",
                         "abs(",
                         "relu(",
                         "floor(",
                         "sigmoid(",
                         "tanh(",
                         "erf(",
                         "log1p(",
                         "gelu(",
                         "%",
                         "*2",
                         "grad(output"}) {
    INFO(op);
    CHECK(all.find(op) != std::string::npos);
  }
}
