// What jit() says about how it is used (include/metajit/jit.h): the compiled-again warning for a
// jit function created anew (also an optimizer's jit_step), next to the retracing warning; and
// reading values while a function is traced: an Error naming the function and the argument, the
// captured Vars that may be read, and static arguments, whose values are part of the signature.
//
// The warning is process-wide state (every signature traced, per function identity), so each
// case uses lambdas of its own and creates its jit functions inside SECTIONs or loops it owns.
#include <metajit/metajit.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "support/capture_stderr.h"
#include "support/exceptions.h"
#include "support/scoped_env.h"
#include "support/text.h"

using namespace metajit;
using Catch::Matchers::Contains;
using metajit_test::CaptureStderr;
using metajit_test::count_occurrences;
using metajit_test::message_of;
using metajit_test::ScopedEnv;

namespace {

const std::string kWarning = "metajit: warning: ";
const std::string kAgain = " was traced again only because a new jit object was created";

std::vector<float> floats(const Var& v) {
  return v.to_vector<float>();
}

Var realized(std::vector<float> values) {
  const int64_t n = int64_t(values.size());
  Var v = array<float>(values, {n});
  eval({v});
  return v;
}

Var plus_one_fn(const Var& a) {
  return a + 1;
}
Var times_two_fn(const Var& a) {
  return a * 2;
}

}  // namespace

// ---------------------------------------------------------------- the compiled-again warning

TEST_CASE("a named jit function re-created in a loop warns once, naming it", "[jit][again]") {
  ScopedEnv log("METAJIT_LOG", "warn");
  ScopedEnv limit("METAJIT_RETRACE_WARN", "");
  const Var x = realized({1, 2, 3});
  std::vector<std::string> per_object;
  for (int i = 0; i < 5; ++i) {
    CaptureStderr capture;
    auto f = jit([](const Var& a) { return a * 2 + 1; }, "loop_fn");
    for (int k = 0; k < 3; ++k) CHECK(floats(f(x)) == std::vector<float>{3, 5, 7});
    CHECK(f.traces() == 1);
    per_object.push_back(capture.text());
  }
  INFO("stderr of object 1: " << per_object[0] << "\nobject 2: " << per_object[1]);
  CHECK(per_object[0].empty());  // the first object traces: nothing to say
  CHECK(count_occurrences(per_object[1], kWarning) == 1);
  CHECK(count_occurrences(per_object[1], kWarning + "jit function 'loop_fn'" + kAgain) == 1);
  CHECK_THAT(per_object[1], Contains("the same name and type") && Contains("float32[3]") &&
                                Contains("create the jit function once"));
  // Once per function, however many objects follow (include/metajit/jit.h).
  for (size_t i = 2; i < per_object.size(); ++i) {
    INFO("object " << i + 1 << ": " << per_object[i]);
    CHECK(per_object[i].empty());
  }
}

TEST_CASE("an unnamed jit function re-created warns naming its number and type", "[jit][again]") {
  ScopedEnv log("METAJIT_LOG", "warn");
  const Var x = realized({1, 2});
  CaptureStderr capture;
  std::string second_name;
  for (int i = 0; i < 2; ++i) {
    auto f = jit([](const Var& a) { return a - 1; });
    CHECK(floats(f(x)) == std::vector<float>{0, 1});
    CHECK(floats(f(x)) == std::vector<float>{0, 1});
    second_name = f.name();
  }
  const std::string err = capture.text();
  INFO(err);
  CHECK(count_occurrences(err, kWarning) == 1);
  CHECK(count_occurrences(err, kWarning + "jit function " + second_name + " (") == 1);
  CHECK(count_occurrences(err, kAgain) == 1);
  CHECK_THAT(err, Contains("of the same type already traced this signature"));
}

TEST_CASE("a reused jit function never warns, however often it is called", "[jit][again]") {
  ScopedEnv log("METAJIT_LOG", "warn");
  ScopedEnv limit("METAJIT_RETRACE_WARN", "");
  auto f = jit([](const Var& a) { return a * a; }, "reused");
  CaptureStderr capture;
  const Var x = realized({1, 2, 3}), y = realized({4, 5});
  for (int i = 0; i < 20; ++i) {
    CHECK(floats(f(x)) == std::vector<float>{1, 4, 9});
    CHECK(floats(f(y)) == std::vector<float>{16, 25});  // a second signature, traced once
  }
  // A copy of the jit function is the same function: it shares the traces.
  auto copy = f;
  CHECK(floats(copy(x)) == std::vector<float>{1, 4, 9});
  CHECK(f.traces() == 2);
  const std::string err = capture.text();
  INFO(err);
  CHECK(err.empty());
}

TEST_CASE("different functions under one name, or one lambda under two names, do not warn",
          "[jit][again]") {
  ScopedEnv log("METAJIT_LOG", "warn");
  const Var x = realized({1, 2});
  CaptureStderr capture;
  auto f = jit([](const Var& a) { return a + 1; }, "same_name");
  auto g = jit([](const Var& a) { return a + 1; }, "same_name");  // another lambda type
  CHECK(floats(f(x)) == std::vector<float>{2, 3});
  CHECK(floats(g(x)) == std::vector<float>{2, 3});
  for (const char* name : {"name_a", "name_b"}) {  // one lambda type, two names
    auto h = jit([](const Var& a) { return a + 2; }, name);
    CHECK(floats(h(x)) == std::vector<float>{3, 4});
  }
  // Function pointers: the function, not only its type, identifies them.
  auto p1 = jit(&plus_one_fn, "fn_ptr");
  auto p2 = jit(&times_two_fn, "fn_ptr");
  CHECK(floats(p1(x)) == std::vector<float>{2, 3});
  CHECK(floats(p2(x)) == std::vector<float>{2, 4});
  const std::string err = capture.text();
  INFO(err);
  CHECK(err.empty());
}

TEST_CASE("the same function pointer wrapped again warns", "[jit][again]") {
  ScopedEnv log("METAJIT_LOG", "warn");
  const Var x = realized({1, 2});
  CaptureStderr capture;
  for (int i = 0; i < 3; ++i) {
    auto p = jit(&plus_one_fn, "fn_ptr_again");
    CHECK(floats(p(x)) == std::vector<float>{2, 3});
  }
  const std::string err = capture.text();
  INFO(err);
  CHECK(count_occurrences(err, kWarning) == 1);
  CHECK(count_occurrences(err, kWarning + "jit function 'fn_ptr_again'" + kAgain) == 1);
}

TEST_CASE("a re-created object tracing a new signature does not warn", "[jit][again]") {
  ScopedEnv log("METAJIT_LOG", "warn");
  CaptureStderr capture;
  for (int64_t n = 1; n <= 3; ++n) {
    auto f = jit([](const Var& a) { return a * 3; }, "new_signatures");
    std::vector<float> values(size_t(n), 1.0f);
    CHECK(floats(f(realized(values))) == std::vector<float>(size_t(n), 3.0f));
  }
  const std::string err = capture.text();
  INFO(err);
  CHECK(err.empty());
}

TEST_CASE("METAJIT_RETRACE_WARN still counts real retraces, apart from the compiled-again warning",
          "[jit][again]") {
  ScopedEnv log("METAJIT_LOG", "warn");
  ScopedEnv limit("METAJIT_RETRACE_WARN", "2");
  CaptureStderr capture;
  auto f = jit([](const Var& a) { return a + 5; }, "retracing");
  for (int64_t n = 1; n <= 4; ++n) f(realized(std::vector<float>(size_t(n), 0.0f)));
  CHECK(f.traces() == 4);
  const std::string err = capture.text();
  INFO(err);
  CHECK(count_occurrences(err, kWarning) == 1);
  CHECK(count_occurrences(
            err, kWarning + "jit function 'retracing' was traced 3 times "
                            "(METAJIT_RETRACE_WARN=2); the last retrace was caused by argument "
                            "0: shape [2] -> [3].") == 1);
  CHECK(count_occurrences(err, kAgain) == 0);
}

TEST_CASE("an optimizer's jit_step created again warns once, naming it", "[jit][again][train]") {
  ScopedEnv log("METAJIT_LOG", "warn");
  Var w = realized({1, 2, 3});
  SGD opt({w}, 0.1);
  const Var x = realized({1, 1, 2});
  auto make_step = [&](std::string name) {
    return opt.jit_step([&](const Var& in) { return sum(w * in); }, std::move(name));
  };
  CaptureStderr capture;
  auto first = make_step("sgd_step");
  first(x);
  first(x);
  const std::string after_first = capture.text();
  CHECK(after_first.empty());
  CaptureStderr capture2;
  for (int i = 0; i < 3; ++i) {
    auto again = make_step("sgd_step");
    again(x);
    again(x);
    CHECK(again.traces() == 1);
  }
  const std::string err = capture2.text();
  INFO(err);
  CHECK(count_occurrences(err, kWarning) == 1);
  CHECK(count_occurrences(err, kWarning + "jit function 'sgd_step'" + kAgain) == 1);
  CHECK(opt.steps() == 8);
  // w went down by 0.1 * x per step.
  const std::vector<float> got = floats(w);
  CHECK(got[0] == Approx(1 - 0.8).epsilon(1e-5));
  CHECK(got[2] == Approx(3 - 1.6).epsilon(1e-5));
}

TEST_CASE("jit_steps of different optimizers do not warn, even when one replaces the other",
          "[jit][again][train]") {
  ScopedEnv log("METAJIT_LOG", "warn");
  const Var x = realized({1, 1, 2});
  CaptureStderr capture;
  SECTION("both alive") {
    std::vector<std::unique_ptr<SGD>> opts;
    for (int i = 0; i < 3; ++i) {
      Var w = realized({1, 2, 3});
      opts.push_back(std::make_unique<SGD>(std::vector<Var>{w}, 0.1));
      auto step = opts.back()->jit_step([w](const Var& in) { return sum(w * in); }, "trial");
      step(x);
    }
  }
  SECTION("one after another (a hyperparameter sweep)") {
    for (int i = 0; i < 3; ++i) {
      Var w = realized({1, 2, 3});
      auto opt = std::make_unique<SGD>(std::vector<Var>{w}, 0.1 * (i + 1));
      auto step = opt->jit_step([w](const Var& in) { return sum(w * in); }, "trial");
      step(x);
      CHECK(floats(w)[2] == Approx(3 - 0.2 * (i + 1)).epsilon(1e-5));
    }  // the optimizer is freed: the next one may be allocated at the same address
  }
  const std::string err = capture.text();
  INFO(err);
  CHECK(count_occurrences(err, kAgain) == 0);
}

// ---------------------------------------------------------------- reading values while traced

TEST_CASE("item, to_vector or eval of an argument while traced is an Error naming both",
          "[jit][values]") {
  const Var x = realized({1, 2, 3}), y = realized({4});
  SECTION("item() on an argument") {
    auto f = jit(
        [](const Var& a, const Var& b) {
          if (b.item<float>() > 0) return a;
          return -a;
        },
        "branchy");
    const std::string msg = message_of<Error>([&] { f(x, y); });
    CHECK_THAT(msg, Contains("jit function 'branchy'") && Contains("item") &&
                        Contains("argument 1") && Contains("static_args = {1}"));
    CHECK(f.traces() == 0);
    // The function is still usable: the same call fails the same way, and nothing is stuck.
    CHECK_THROWS_AS(f(x, y), Error);
    CHECK(floats(x + 1) == std::vector<float>{2, 3, 4});
  }
  SECTION("to_vector() of something computed from an argument") {
    auto f = jit(
        [](const Var& a, const Var& b) {
          std::vector<float> v = (b * 2 + a).to_vector<float>();
          return a * double(v[0]);
        },
        "reads_sum");
    const std::string msg = message_of<Error>([&] { f(y, x); });
    CHECK_THAT(
        msg, Contains("jit function 'reads_sum'") && Contains("to_vector") && Contains("argument"));
  }
  SECTION("eval() of something computed from an argument") {
    auto f = jit(
        [](const Var& a) {
          Var t = exp(a);
          eval({t});
          return t;
        },
        "evals");
    const std::string msg = message_of<Error>([&] { f(x); });
    CHECK_THAT(msg, Contains("jit function 'evals'") && Contains("eval") && Contains("argument 0"));
  }
  SECTION("an unnamed function is named by its number") {
    auto f = jit([](const Var& a) { return a * a.item<float>(); });
    const std::string msg = message_of<Error>([&] { f(y); });
    CHECK_THAT(msg, Contains("jit function " + f.name()) && Contains("argument 0"));
  }
  SECTION("in a function called while another is traced, the outer function is named") {
    auto inner = jit([](const Var& a) { return a * a.item<float>(); }, "inner");
    auto outer = jit([&](const Var& a) { return inner(a + 1); }, "outer");
    const std::string msg = message_of<Error>([&] { outer(y); });
    CHECK_THAT(msg, Contains("jit function 'outer'") && Contains("argument 0"));
  }
}

TEST_CASE("captured Vars may be read while traced, their values are baked in", "[jit][values]") {
  Var scale = realized({3});
  Var lazy = scale * 2;  // lazy, built from a captured value only
  auto f = jit(
      [&](const Var& a) {
        const float s = scale.item<float>();
        eval({lazy});
        return a * double(s) + lazy;
      },
      "captured");
  const Var x = realized({1, 2});
  CHECK(floats(f(x)) == std::vector<float>{9, 12});
  CHECK(floats(f(realized({0, 1}))) == std::vector<float>{6, 9});
  CHECK(f.traces() == 1);
}

TEST_CASE("static arguments may be read, a new value traces again with the right result",
          "[jit][values][static]") {
  auto f = jit([](const Var& x, const Var& n) { return x * double(n.item<float>()); }, "scaled",
               {.static_args = {1}});
  const Var x = realized({1, 2, 3});
  CHECK(floats(f(x, realized({2}))) == std::vector<float>{2, 4, 6});
  CHECK(f.traces() == 1);
  CHECK(floats(f(x, realized({2}))) == std::vector<float>{2, 4, 6});  // another Var, same value
  CHECK(floats(f(realized({5, 6, 7}), realized({2}))) == std::vector<float>{10, 12, 14});
  CHECK(f.traces() == 1);
  CHECK(floats(f(x, realized({3}))) == std::vector<float>{3, 6, 9});  // not the stale 2
  CHECK(f.traces() == 2);
  CHECK(floats(f(x, realized({2}))) == std::vector<float>{2, 4, 6});  // the first plan again
  CHECK(floats(f(x, realized({3}))) == std::vector<float>{3, 6, 9});
  CHECK(f.traces() == 2);
  // A lazy static argument is evaluated first, and its value decides.
  CHECK(floats(f(x, realized({1}) + 2)) == std::vector<float>{3, 6, 9});
  CHECK(f.traces() == 2);

  SECTION("a static Int32 argument, and a non-static one still may not be read") {
    auto g = jit(
        [](const Var& x, const Var& k, const Var& other) {
          Var out = x * double(k.item<int32_t>());
          if (other.numel() > 1) (void)other.to_vector<float>();
          return out;
        },
        "int_static", {.static_args = {1}});
    const Var k = array<int32_t>({4}, {});
    CHECK(floats(g(x, k, realized({0}))) == std::vector<float>{4, 8, 12});
    const std::string msg = message_of<Error>([&] { g(x, k, realized({0, 1})); });
    CHECK_THAT(msg, Contains("jit function 'int_static'") && Contains("argument 2"));
  }
}

TEST_CASE("a static argument index out of range is an Error when the function is created",
          "[jit][values][static]") {
  auto two = [](const Var& a, const Var& b) { return a + b; };
  CHECK_THROWS_AS(jit(two, "two", {.static_args = {2}}), Error);
  CHECK_THROWS_AS(jit(two, "two", {.static_args = {-1}}), Error);
  CHECK_THROWS_AS(jit(two, "two", {.static_args = {0, 5}}), Error);
  const std::string msg = message_of<Error>([&] { jit(two, "two", {.static_args = {2}}); });
  CHECK_THAT(msg, Contains("static_args") && Contains("2"));
  CHECK_NOTHROW(jit(two, "two", {.static_args = {0, 1}}));
}

TEST_CASE("a static argument's new value counts toward METAJIT_RETRACE_WARN and says so",
          "[jit][values][static]") {
  ScopedEnv log("METAJIT_LOG", "warn");
  ScopedEnv limit("METAJIT_RETRACE_WARN", "2");
  auto f = jit([](const Var& x, const Var& n) { return x + double(n.item<float>()); },
               "static_retrace", {.static_args = {1}});
  const Var x = realized({1, 2});
  CaptureStderr capture;
  for (float v : {1.0f, 2.0f, 3.0f, 4.0f}) CHECK(floats(f(x, realized({v})))[0] == 1 + v);
  CHECK(f.traces() == 4);
  const std::string err = capture.text();
  INFO(err);
  CHECK(count_occurrences(err, kWarning) == 1);
  CHECK(count_occurrences(
            err, kWarning + "jit function 'static_retrace' was traced 3 times "
                            "(METAJIT_RETRACE_WARN=2); the last retrace was caused by argument "
                            "1: a new value (a static argument).") == 1);
}

TEST_CASE("jit_step: reading a parameter's value while traced names the parameter",
          "[jit][values][train]") {
  Var w = realized({1, 2, 3});
  SGD opt({w}, 0.1);
  auto step2 = opt.jit_step(
      [&](const Var& in) {
        const std::vector<float> v = w.to_vector<float>();  // a parameter's value
        return sum(w * in) * double(v[0]);
      },
      "reads_param2");
  const Var x = realized({1, 1, 1});
  const std::string msg = message_of<Error>([&] { step2(x); });
  INFO(msg);
  CHECK_THAT(msg, Contains("jit function 'reads_param2'") && Contains("to_vector"));
  // The loss function has one argument (0); the parameter is not an argument it was given, and
  // static_args cannot be given to jit_step: the message must name the parameter instead.
  CHECK_THAT(msg, Contains("parameter 0"));
  CHECK_THAT(msg, !Contains("static_args = {1}"));
  CHECK(floats(w) == std::vector<float>{1, 2, 3});
  CHECK(opt.steps() == 0);
}
