// jit(fn): trace once per signature, replay afterwards (docs/design.md §8). Replays must equal
// eager evaluation and the reference interpreter, never trace or compile again, retrace on a new
// dtype or shape (with one warning past METAJIT_RETRACE_WARN), work from several threads and
// with lazy arguments, and report undefined Vars.
#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "meta_ops/node.h"
#include "support/capture_stderr.h"
#include "support/reference_check.h"
#include "support/scoped_env.h"
#include "support/text.h"
#include "support/threads.h"

using namespace metajit;
using metajit_test::CaptureStderr;
using metajit_test::count_occurrences;
using metajit_test::ScopedEnv;

namespace {

std::vector<double> values_of(const Var& v) {
  return metajit_test_detail::eval_values_as_double(v);
}

// `got` (jit results) against `eager` (the same function applied eagerly to the same inputs,
// still lazy): the reference interpreter within the usual tolerance, eager eval exactly (the
// same kernels run on the same values).
void check_matches(const std::vector<Var>& got, std::vector<Var> eager) {
  REQUIRE(got.size() == eager.size());
  const std::vector<HostTensor> refs = interpret(eager);
  eval(eager);
  for (size_t k = 0; k < got.size(); ++k) {
    INFO("output " << k);
    REQUIRE(got[k].defined());
    REQUIRE(got[k].node()->realized());
    CHECK(got[k].shape() == refs[k].shape);
    CHECK(got[k].dtype() == refs[k].dtype);
    CHECK(got[k].shape() == eager[k].shape());
    const std::vector<double> g = values_of(got[k]), e = values_of(eager[k]),
                              r = refs[k].as_double();
    REQUIRE(g.size() == r.size());
    REQUIRE(g.size() == e.size());
    const double tol = metajit_test_detail::tolerance_of(refs[k].dtype);
    for (size_t i = 0; i < g.size(); ++i) {
      INFO("element " << i << ": jit " << g[i] << ", eager " << e[i] << ", reference " << r[i]);
      CHECK(metajit_test_detail::values_match(g[i], r[i], tol));
      CHECK(metajit_test_detail::values_match(g[i], e[i], 0));
    }
  }
}

Var realized_rand(Shape shape, uint64_t seed, DType dtype = DType::Float32) {
  Var v = rand(std::move(shape), seed, dtype);
  eval({v});
  return v;
}

std::vector<Var> as_list(Var v) {
  return {std::move(v)};
}
std::vector<Var> as_list(std::vector<Var> v) {
  return v;
}

// Runs jit(fn) on several fresh inputs of these shapes (a trace, then replays) and checks every
// result against fn applied eagerly.
template <size_t N, class J, class F>
void check_function(J& jf, F fn, std::array<Shape, N> shapes, int calls = 4) {
  for (int c = 0; c < calls; ++c) {
    std::vector<Var> in;
    for (size_t i = 0; i < N; ++i)
      in.push_back(realized_rand(shapes[i], uint64_t(100 * c + i + 1)));
    auto apply = [&](auto&& g) {
      return [&]<size_t... I>(std::index_sequence<I...>) {
        return as_list(g(in[I]...));
      }
      (std::make_index_sequence<N>{});
    };
    std::vector<Var> got = apply(jf), want = apply(fn);
    check_matches(got, want);
  }
  CHECK(jf.traces() == 1);
}

Var mul_add(Var a, const Var& b, const Var& c) {  // a plain function; one parameter by value
  return a * b + c;
}

}  // namespace

TEST_CASE("jit replays equal eager eval and the reference interpreter", "[jit]") {
  SECTION("element-wise, from a plain function") {
    auto f = jit(mul_add);
    for (int c = 0; c < 4; ++c) {
      Var a = realized_rand({2, 3}, 10 + c), b = realized_rand({2, 3}, 20 + c),
          d = realized_rand({3}, 30 + c);
      check_matches({f(a, b, d)}, {mul_add(a, b, d)});
    }
    CHECK(f.traces() == 1);
  }
  SECTION("reductions") {
    auto fn = [](const Var& x) {
      return std::vector<Var>{sum(x, {1}), mean(x, {0}, true), max(exp(x) - 1.0), prod(x, {1})};
    };
    auto f = jit(fn);
    check_function<1>(f, fn, {Shape{4, 5}});
  }
  SECTION("softmax") {
    auto fn = [](const Var& x) { return softmax(x * 3.0, 1); };
    auto f = jit(fn);
    check_function<1>(f, fn, {Shape{3, 7}});
  }
  SECTION("matmul with bias and relu") {
    auto fn = [](const Var& x, const Var& w, const Var& b) { return relu(matmul(x, w) + b); };
    auto f = jit(fn);
    check_function<3>(f, fn, {Shape{3, 4}, Shape{4, 5}, Shape{5}});
  }
  SECTION("several outputs sharing work") {
    auto fn = [](Var x, Var y) {
      Var e = exp(x - y);
      return std::vector<Var>{e, sum(e, {0}), e * 2.0, x < y};
    };
    auto f = jit(fn);
    check_function<2>(f, fn, {Shape{2, 3}, Shape{2, 3}});
  }
  SECTION("a captured double is static") {
    double scale = 2.5;
    auto fn = [&scale](const Var& x) { return x * scale + 1.0; };
    auto f = jit(fn);
    check_function<1>(f, fn, {Shape{5}});
    // Changing the captured value does not retrace: the traced value (2.5) stays baked in.
    scale = 100;
    Var x = realized_rand({5}, 7);
    Var y = f(x);
    CHECK(f.traces() == 1);
    check_matches({y}, {x * 2.5 + 1.0});
  }
}

TEST_CASE("jit of functions returning their inputs, captured Vars and constants", "[jit]") {
  Var captured = realized_rand({2}, 5);
  Var lazy_captured = captured * 2.0;  // recomputed by every replay
  auto f = jit([&](const Var& x, const Var& y) {
    return std::vector<Var>{x, y + lazy_captured, captured, full({2}, 4.0), x};
  });
  for (int c = 0; c < 3; ++c) {
    Var x = realized_rand({3}, 40 + c), y = realized_rand({2}, 50 + c);
    std::vector<Var> out = f(x, y);
    REQUIRE(out.size() == 5);
    CHECK(out[0].node() == x.node());  // returned unchanged: the argument itself
    CHECK(out[4].node() == x.node());
    CHECK(out[2].node() == captured.node());
    check_matches({out[1], out[3]}, {y + captured * 2.0, full({2}, 4.0)});
  }
  CHECK(f.traces() == 1);

  auto identity = jit([](const Var& x) { return x; });
  Var x = realized_rand({4}, 9);
  CHECK(identity(x).node() == x.node());
  Var y = realized_rand({4}, 10);
  CHECK(identity(y).node() == y.node());
  CHECK(identity.traces() == 1);

  auto nullary = jit([] { return arange(4) * 2.0; });
  CHECK(nullary().to_vector<int32_t>() == std::vector<int32_t>{0, 2, 4, 6});
  CHECK(nullary().to_vector<int32_t>() == std::vector<int32_t>{0, 2, 4, 6});
  CHECK(nullary.traces() == 1);
}

TEST_CASE("jit replay neither traces nor compiles, and launches kernels", "[jit]") {
  auto f = jit([](const Var& a, const Var& b, const Var& c) { return a * b + c; }, "mul_add");
  CHECK(f.name() == "mul_add");
  Var a = realized_rand({2, 3}, 1), b = realized_rand({2, 3}, 2), c = realized_rand({2, 3}, 3);
  Var first = f(a, b, c);
  CHECK(f.traces() == 1);
  const Stats before = stats();
  const std::vector<float> want = first.to_vector<float>(), va = a.to_vector<float>(),
                           vb = b.to_vector<float>(), vc = c.to_vector<float>();
  for (size_t k = 0; k < 6; ++k)  // (the kernel may contract a*b+c into a fused multiply-add)
    CHECK(std::fabs(want[k] - (va[k] * vb[k] + vc[k])) <= 1e-6f);
  for (int i = 0; i < 100; ++i) {
    Var y = f(a, b, c);
    REQUIRE(y.node()->realized());
    REQUIRE(y.node() != first.node());  // a fresh result every call
    const std::vector<float> vy = y.to_vector<float>();
    REQUIRE(vy == want);  // bit for bit: the same kernel on the same values
  }
  const Stats after = stats();
  CHECK(f.traces() == 1);
  CHECK(after.kernels_compiled == before.kernels_compiled);
  CHECK(after.memory_hits == before.memory_hits);
  CHECK(after.disk_hits == before.disk_hits);
  CHECK(after.kernels_launched == before.kernels_launched + 100);
}

TEST_CASE("jit retraces for a new shape or dtype and keeps every signature", "[jit]") {
  auto fn = [](const Var& x, const Var& y) { return sum(x * y, {1}); };
  auto f = jit(fn);
  Var a = realized_rand({2, 3}, 1), b = realized_rand({2, 3}, 2);
  Var c = realized_rand({4, 5}, 3), d = realized_rand({4, 5}, 4);
  check_matches({f(a, b)}, {fn(a, b)});
  CHECK(f.traces() == 1);
  const uint64_t compiled = stats().kernels_compiled;
  check_matches({f(c, d)}, {fn(c, d)});  // new shape: retrace, same (shape-generic) kernel
  CHECK(f.traces() == 2);
  CHECK(stats().kernels_compiled == compiled);
  for (int i = 0; i < 3; ++i) {
    check_matches({f(a, b)}, {fn(a, b)});
    check_matches({f(c, d)}, {fn(c, d)});
  }
  CHECK(f.traces() == 2);

  Var e = realized_rand({2, 3}, 5, DType::Float64), g = realized_rand({2, 3}, 6, DType::Float64);
  Var r = f(e, g);  // new dtype: retrace
  CHECK(r.dtype() == DType::Float64);
  check_matches({r}, {fn(e, g)});
  CHECK(f.traces() == 3);
  check_matches({f(a, b)}, {fn(a, b)});
  CHECK(f.traces() == 3);

  // Mixed dtypes promote as eagerly; a shape that only broadcasts is a signature of its own.
  Var h = realized_rand({3}, 7);
  check_matches({f(e, h)}, {fn(e, h)});
  CHECK(f.traces() == 4);
}

TEST_CASE("the same Var passed twice is traced as two arguments", "[jit]") {
  auto f = jit([](const Var& x, const Var& y) { return x - y; });
  Var a = realized_rand({3}, 1), b = realized_rand({3}, 2);
  CHECK(f(a, a).to_vector<float>() == std::vector<float>{0, 0, 0});
  check_matches({f(a, b)}, {a - b});
  CHECK(f.traces() == 1);
}

TEST_CASE("jit warns once about retracing, naming the function and the change", "[jit]") {
  ScopedEnv log("METAJIT_LOG", "warn");
  SECTION("default limit 8") {
    ScopedEnv limit("METAJIT_RETRACE_WARN", "");  // empty: the default
    auto f = jit([](const Var& x, const Var& y) { return x + y; }, "step");
    Var y = realized_rand({3}, 1);
    CaptureStderr capture;
    for (int64_t n = 1; n <= 8; ++n) f(realized_rand({n, 3}, uint64_t(n)), y);
    CHECK(f.traces() == 8);
    for (int64_t n = 9; n <= 12; ++n) f(realized_rand({n, 3}, uint64_t(n)), y);
    CHECK(f.traces() == 12);
    const std::string err = capture.text();
    INFO(err);
    CHECK(count_occurrences(err, "metajit: warning: ") == 1);
    CHECK(count_occurrences(
              err,
              "metajit: warning: jit function 'step' was traced 9 times "
              "(METAJIT_RETRACE_WARN=8); the last retrace was caused by argument 0: shape "
              "[8, 3] -> [9, 3]. Shapes that change every call retrace every call") == 1);
  }
  SECTION("METAJIT_RETRACE_WARN=2, a dtype change, an unnamed function") {
    ScopedEnv limit("METAJIT_RETRACE_WARN", "2");
    auto f = jit([](const Var& x, const Var& y) { return x * y; });
    CHECK(f.name().rfind("#", 0) == 0);
    Var x = realized_rand({1}, 1);
    CaptureStderr capture;
    f(x, realized_rand({2}, 2));
    f(x, realized_rand({3}, 3));
    f(x, realized_rand({3}, 4));  // replay: not a trace
    f(x, realized_rand({3}, 5, DType::Float64));
    f(x, realized_rand({2}, 6, DType::Float64));
    CHECK(f.traces() == 4);
    const std::string err = capture.text();
    INFO(err);
    CHECK(count_occurrences(err, "metajit: warning: ") == 1);
    CHECK(count_occurrences(err, "metajit: warning: jit function " + f.name() + " (") == 1);
    CHECK(count_occurrences(
              err,
              " was traced 3 times (METAJIT_RETRACE_WARN=2); the last retrace was caused by "
              "argument 1: dtype float32 -> float64. ") == 1);
  }
  SECTION("METAJIT_RETRACE_WARN=0 turns it off") {
    ScopedEnv limit("METAJIT_RETRACE_WARN", "0");
    auto f = jit([](const Var& x) { return x + 1.0; }, "quiet");
    CaptureStderr capture;
    for (int64_t n = 1; n <= 12; ++n) f(realized_rand({n}, uint64_t(n)));
    CHECK(f.traces() == 12);
    CHECK(capture.text().find("warning") == std::string::npos);
  }
}

TEST_CASE("jit from 8 threads at once, with different inputs and shapes", "[jit][threads]") {
  auto f = jit(
      [](const Var& a, const Var& b) {
        return std::vector<Var>{a * b + 1.0, sum(a, {1})};
      },
      "threads");
  constexpr int kThreads = 8, kCalls = 200;
  std::vector<int> bad(kThreads, 0);
  const std::vector<std::string> thrown = metajit_test::run_threads(kThreads, [&](int t) {
    const int64_t rows = 1 + t % 3, cols = 4;  // three signatures, traced concurrently
    for (int i = 0; i < kCalls; ++i) {
      std::vector<float> va(size_t(rows * cols)), vb(va.size());
      for (size_t k = 0; k < va.size(); ++k) {
        va[k] = float(t * 1000 + i) + float(k);
        vb[k] = float(k % 5) - float(i % 7);
      }
      Var a = array(va, {rows, cols}), b = array(vb, {rows, cols});
      std::vector<Var> out = f(a, b);
      const std::vector<float> p = out[0].to_vector<float>(), s = out[1].to_vector<float>();
      for (size_t k = 0; k < va.size(); ++k)
        if (p[k] != va[k] * vb[k] + 1.0f) ++bad[size_t(t)];
      for (int64_t r = 0; r < rows; ++r) {
        float want = 0;
        for (int64_t c = 0; c < cols; ++c) want += va[size_t(r * cols + c)];
        if (s[size_t(r)] != want) ++bad[size_t(t)];
      }
    }
  });
  CHECK(thrown == std::vector<std::string>(kThreads));
  CHECK(bad == std::vector<int>(kThreads, 0));
  CHECK(f.traces() == 3);
}

TEST_CASE("jit takes lazy arguments and evaluates them first", "[jit]") {
  auto fn = [](const Var& x, const Var& y) { return x * y; };
  auto f = jit(fn);
  for (int c = 0; c < 3; ++c) {
    Var base = realized_rand({2, 2}, uint64_t(c + 1));
    Var lazy = exp(base) + 1.0;  // not evaluated yet
    Var other = base * 3.0;
    CHECK_FALSE(lazy.node()->realized());
    Var out = f(lazy, other);
    CHECK(lazy.node()->realized());
    check_matches({out}, {fn(lazy, other)});
    // A lazy argument that is itself a function of a jit result.
    Var again = f(out + 1.0, base);
    check_matches({again}, {fn(out + 1.0, base)});
  }
  CHECK(f.traces() == 1);
}

TEST_CASE("a jit function called while another is traced becomes part of that trace", "[jit]") {
  auto inner = jit([](const Var& x) { return x * 2.0; }, "inner");
  auto outer = jit([&](const Var& x) { return inner(x) + 1.0; }, "outer");
  for (int c = 0; c < 3; ++c) {
    Var x = realized_rand({3}, uint64_t(c + 1));
    check_matches({outer(x)}, {x * 2.0 + 1.0});
  }
  CHECK(outer.traces() == 1);
  CHECK(inner.traces() == 0);  // inlined, never traced on its own
  Var x = realized_rand({3}, 9);
  check_matches({inner(x)}, {x * 2.0});
  CHECK(inner.traces() == 1);
}

TEST_CASE("jit errors: undefined arguments and results", "[jit][errors]") {
  auto f = jit([](const Var& x, const Var& y) { return x + y; }, "adder");
  Var x = realized_rand({2}, 1);
  // The wrong number or type of arguments does not compile.
  static_assert(std::is_invocable_v<decltype(f), Var, Var>);
  static_assert(!std::is_invocable_v<decltype(f), Var>);
  static_assert(!std::is_invocable_v<decltype(f), Var, Var, Var>);
  static_assert(!std::is_invocable_v<decltype(f), Var, double>);
  static_assert(std::is_same_v<std::invoke_result_t<decltype(f), Var, Var>, Var>);

  CHECK_THROWS_WITH(f(x, Var()), Catch::Contains("jit function 'adder'") &&
                                     Catch::Contains("argument 1 is undefined"));
  CHECK_THROWS_AS(f(Var(), x), Error);
  CHECK(f.traces() == 0);
  CHECK(f(x, x).to_vector<float>().size() == 2);

  auto g = jit([](const Var&) { return Var(); }, "broken");
  CHECK_THROWS_WITH(g(x), Catch::Contains("jit function 'broken' returned an undefined") &&
                              Catch::Contains("output 0"));
  auto h = jit([](const Var& x) { return std::vector<Var>{x + 1.0, Var()}; }, "broken2");
  CHECK_THROWS_WITH(h(x), Catch::Contains("jit function 'broken2'") && Catch::Contains("output 1"));
  CHECK(h.traces() == 0);

  // Shape errors inside fn surface from the trace, and nothing is cached for them.
  auto bad = jit([](const Var& x, const Var& y) { return x + y; }, "bad_shapes");
  CHECK_THROWS_AS(bad(realized_rand({2}, 1), realized_rand({3}, 2)), ShapeError);
  CHECK(bad.traces() == 0);
}

TEST_CASE("jit replays are profiled like eval launches", "[jit][profile]") {
  auto f = jit([](const Var& a, const Var& b) { return exp(a) * b - 0.5; }, "profiled");
  Var a = realized_rand({3, 7}, 11), b = realized_rand({3, 7}, 12);
  f(a, b);  // trace
  set_profiling(true);
  reset_profile();
  for (int i = 0; i < 5; ++i) f(a, b);
  set_profiling(false);
  std::string report = profile_report();
  INFO(report);
  CHECK_THAT(report, Catch::Matchers::Contains("1 kernel, 5 launches"));
}

// ---------------------------------------------------------------- list parameters

TEST_CASE("jit, value_and_grad and jit_step take std::vector<Var> parameters", "[jit][lists]") {
  Var x = realized_rand({2, 3}, 21);
  std::vector<Var> ws = {realized_rand({3, 3}, 22), realized_rand({3, 3}, 23),
                         realized_rand({3, 3}, 24)};
  auto chain = [](const Var& in, const std::vector<Var>& layers) {
    Var h = in;
    for (const Var& w : layers) h = tanh(matmul(h, w));
    return sum(h);
  };
  auto f = jit(chain, "chain");
  check_matches({f(x, ws)}, {chain(x, ws)});
  check_matches({f(x, ws)}, {chain(x, ws)});
  CHECK(f.traces() == 1);
  // Another length is another signature; the first one's plan is still there.
  const std::vector<Var> two(ws.begin(), ws.begin() + 2);
  check_matches({f(x, two)}, {chain(x, two)});
  CHECK(f.traces() == 2);
  f(x, ws);
  CHECK(f.traces() == 2);

  SECTION("value_and_grad: a list parameter gives one gradient per element") {
    auto vg = jit(value_and_grad(chain, {1}), "chain_grad");
    const std::vector<Var> got = vg(x, ws);
    REQUIRE(got.size() == 4);
    std::vector<Var> eager = {chain(x, ws)};
    const std::vector<Var> g = grad(eager[0], ws);
    eager.insert(eager.end(), g.begin(), g.end());
    check_matches(got, eager);
    // argnums {0, 1}: the Var's gradient, then the list's.
    auto vg01 = jit(value_and_grad(chain, {0, 1}), "chain_grad01");
    CHECK(vg01(x, ws).size() == 5);
  }
  SECTION("an undefined element is named by its list index") {
    std::vector<Var> holes = ws;
    holes[1] = Var();
    CHECK_THROWS_WITH(f(x, holes), Catch::Contains("argument 1[1] is undefined"));
  }
  SECTION("a jit_step over a list of batches") {
    Var w = realized_rand({3, 1}, 25);
    SGD opt({w}, 0.1);
    auto step = opt.jit_step(
        [&](const std::vector<Var>& batches) {
          Var loss = scalar(0.0, DType::Float32);
          for (const Var& b : batches) loss = loss + sum(matmul(b, w) * matmul(b, w));
          return loss;
        },
        "list_step");
    const std::vector<Var> batches = {realized_rand({2, 3}, 26), realized_rand({4, 3}, 27)};
    const std::vector<double> w0 = values_of(w);
    // The expected update, by hand: d/dw sum((b w)^2) = 2 b^T (b w), summed over the batches.
    std::vector<double> g(3, 0.0);
    for (const Var& b : batches) {
      const std::vector<double> bv = values_of(b);
      const size_t rows = bv.size() / 3;
      for (size_t r = 0; r < rows; ++r) {
        double bw = 0;
        for (size_t k = 0; k < 3; ++k) bw += bv[r * 3 + k] * w0[k];
        for (size_t k = 0; k < 3; ++k) g[k] += 2 * bv[r * 3 + k] * bw;
      }
    }
    step(batches);
    const std::vector<double> w1 = values_of(w);
    for (size_t k = 0; k < 3; ++k) CHECK(w1[k] == Approx(w0[k] - 0.1 * g[k]).epsilon(1e-5));
    step(batches);
    CHECK(step.traces() == 1);
  }
}

// ---------------------------------------------------------------- state and switches

TEST_CASE("a Var assigned inside a jit function is state: each call reads and assigns it",
          "[jit][state]") {
  Var count = zeros({}, DType::Float32);
  Var running = zeros({3}, DType::Float32);  // lazy when first read: the trace computes it first
  auto f = jit(
      [&](const Var& v) {
        count.assign(count + 1.0);
        running.assign(running * 0.5 + v * 0.5);
        return v * count;
      },
      "stateful");
  Var v = array<float>({2, 4, 8}, {3});
  CHECK(values_of(f(v)) == std::vector<double>{2, 4, 8});
  CHECK(values_of(f(v)) == std::vector<double>{4, 8, 16});
  CHECK(values_of(f(v)) == std::vector<double>{6, 12, 24});
  CHECK(count.item<float>() == 3.0f);
  CHECK(values_of(running) == std::vector<double>{1.75, 3.5, 7});
  CHECK(f.traces() == 1);
  // A value set between calls is what the next call reads.
  count.assign(scalar(10.0, DType::Float32) * 1.0);  // lazy
  CHECK(values_of(f(v)) == std::vector<double>{22, 44, 88});
  CHECK(f.traces() == 1);

  SECTION("an error while tracing leaves the state as it was") {
    Var kept = array<float>({1, 2}, {2});
    auto bad = jit(
        [&](const Var& a) {
          kept.assign(kept * 3.0);
          return a + kept;  // [3] + [2]: ShapeError
        },
        "bad_state");
    CHECK_THROWS_AS(bad(v), ShapeError);
    CHECK(values_of(kept) == std::vector<double>{1, 2});
  }
}

TEST_CASE("a jit function traced under one value of a TraceSwitch traces again under the other",
          "[jit][state]") {
  auto training = std::make_shared<detail::TraceSwitch>(true);
  auto f = jit([&](const Var& v) { return detail::read_switch(training) ? v * 2.0 : v + 100.0; },
               "switched");
  Var v = array<float>({1, 2}, {2});
  CHECK(values_of(f(v)) == std::vector<double>{2, 4});
  training->set(false);
  CHECK(values_of(f(v)) == std::vector<double>{101, 102});
  CHECK(f.traces() == 2);
  training->set(true);
  CHECK(values_of(f(v)) == std::vector<double>{2, 4});
  CHECK(f.traces() == 2);  // the first plan again
  // Outside a trace, reading a switch records nothing.
  CHECK(detail::read_switch(training));
}
