// to_dot() and METAJIT_DUMP_DOT: the Graphviz picture of a plan (one cluster per kernel,
// backward ops coloured apart) and one dump per evaluation.
#include <metajit/metajit.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <string>
#include <vector>

#include "support/files.h"
#include "support/processes.h"
#include "support/scoped_env.h"
#include "support/text.h"

using namespace metajit;
using metajit_test::count_occurrences;

namespace {

namespace fs = std::filesystem;

// The fills of api/dot_graph.cc's op nodes (the legend uses BGCOLOR, never fillcolor).
const std::string kBackwardNode = "fillcolor=\"#fce5cd\"";
const std::string kForwardNode = "fillcolor=\"#cfe2f3\"";

bool dot_on_path() {
  return metajit_test::run_command("command -v dot").exit_code == 0;
}

struct SoftmaxGraph {
  Var x, loss, dx;
};

// x [4,8] (evaluated: an input), loss = sum(softmax(x, 1) * w), dx = d loss / dx.
SoftmaxGraph softmax_graph() {
  Var x = randn({4, 8}, 1);
  Var w = rand({4, 8}, 2);
  eval({x, w});
  Var loss = sum(softmax(x, 1) * w);
  return {x, loss, grad(loss, {x})[0]};
}

// Names of the files in `dir` ending in `suffix`.
std::vector<std::string> files_ending(const fs::path& dir, const std::string& suffix) {
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() >= suffix.size() &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
      names.push_back(name);
  }
  return names;
}

// Runs `dot -Tsvg` on `text`; true when it accepts it.
bool dot_accepts(const std::string& text) {
  metajit_test::TempDir dir;
  metajit_test::write_file(dir.path() / "g.dot", text);
  const auto r = metajit_test::run_command(
      "dot -Tsvg -o " + metajit_test::shell_quote((dir.path() / "g.svg").string()) + " " +
      metajit_test::shell_quote((dir.path() / "g.dot").string()));
  INFO(r.output);
  return r.exit_code == 0 &&
         metajit_test::read_file(dir.path() / "g.svg").find("<svg") != std::string::npos;
}

}  // namespace

TEST_CASE("to_dot of softmax forward and backward: a cluster per kernel, backward coloured",
          "[dot]") {
  SoftmaxGraph s = softmax_graph();
  reset_stats();
  const std::string dot = to_dot({s.loss, s.dx});
  CHECK(stats().kernels_compiled == 0);
  CHECK(stats().kernels_launched == 0);
  INFO(dot);
  CHECK(dot.rfind("digraph metajit {", 0) == 0);
  CHECK(count_occurrences(dot, "subgraph cluster_") == plan({s.loss, s.dx}).size());
  CHECK(count_occurrences(dot, kBackwardNode) > 0);
  CHECK(count_occurrences(dot, kForwardNode) > 0);
  // Inputs, ops and values name their dtype and shape; the requested values are marked.
  CHECK(dot.find("input #") != std::string::npos);
  CHECK(dot.find("float32[4, 8]") != std::string::npos);
  CHECK(dot.find("reduce.max(axes=1,keepdims)\\nfloat32[4, 1]") != std::string::npos);
  CHECK(dot.find("output 0\\nfloat32[]") != std::string::npos);
  CHECK(dot.find("output 1\\nfloat32[4, 8]") != std::string::npos);
  CHECK(dot.find("legend") != std::string::npos);
  // Nothing was evaluated: the same Vars still plan, and to_dot is deterministic.
  CHECK(to_dot({s.loss, s.dx}) == dot);
}

TEST_CASE("to_dot: no backward node without grad, and equal graphs draw equal pictures", "[dot]") {
  SoftmaxGraph a = softmax_graph(), b = softmax_graph();
  const std::string dot = to_dot({a.loss});
  INFO(dot);
  CHECK(count_occurrences(dot, "subgraph cluster_") == plan({a.loss}).size());
  CHECK(count_occurrences(dot, kBackwardNode) == 0);
  CHECK(count_occurrences(dot, kForwardNode) > 0);
  // Different nodes, the same structure: no addresses in the text.
  CHECK(to_dot({b.loss, b.dx}) == to_dot({a.loss, a.dx}));
}

TEST_CASE("to_dot of a conv2d training step", "[dot]") {
  Var x = randn({4, 3, 8, 8}, 1), w = randn({8, 3, 3, 3}, 2), t = rand({4, 8, 8, 8}, 3);
  eval({x, w, t});
  Var loss = sum(relu(conv2d(x, w, 1, 1)) * t);
  std::vector<Var> g = grad(loss, {w, x});
  const std::string dot = to_dot({loss, g[0], g[1]});
  INFO(dot);
  CHECK(count_occurrences(dot, "subgraph cluster_") == plan({loss, g[0], g[1]}).size());
  CHECK(count_occurrences(dot, kBackwardNode) > 0);
  CHECK(dot.find("output 1\\nfloat32[8, 3, 3, 3]") != std::string::npos);
  CHECK(dot.find("output 2\\nfloat32[4, 3, 8, 8]") != std::string::npos);
  if (dot_on_path()) {
    CHECK(dot_accepts(dot));
  } else {
    WARN("Graphviz's dot is not on PATH: the DOT text was not rendered");
  }
}

TEST_CASE("to_dot output passes dot -Tsvg", "[dot]") {
  SoftmaxGraph s = softmax_graph();
  const std::string dot = to_dot({s.loss, s.dx});
  CHECK(dot.find("}\n") != std::string::npos);
  if (!dot_on_path()) {
    WARN("Graphviz's dot is not on PATH: the DOT text was not rendered");
    return;
  }
  CHECK(dot_accepts(dot));
  CHECK(dot_accepts(to_dot({s.x * 2.0})));
}

TEST_CASE("to_dot of evaluated or undefined Vars", "[dot]") {
  Var x = rand({3}, 1);
  eval({x});
  CHECK(to_dot({x}).find("nothing to compute") != std::string::npos);
  CHECK_THROWS_AS(to_dot({Var()}), Error);
}

TEST_CASE("METAJIT_DUMP_DOT writes one .dot per evaluation, program cache hits included", "[dot]") {
  metajit_test::TempDir tmp;
  const fs::path dir = tmp.path() / "dumps";  // created by the first dump
  metajit_test::ScopedEnv env("METAJIT_DUMP_DOT", dir.string());
  Var x = rand({5, 7}, 1);
  eval({x});
  for (int i = 0; i < 3; ++i) {  // the same structure: the 2nd and 3rd hit the program cache
    Var y = exp(x) * double(i + 1);
    eval({y});
  }
  SoftmaxGraph s = softmax_graph();  // its inputs are leaves: their eval runs nothing
  eval({s.loss, s.dx});
  eval({s.loss});  // already evaluated: nothing runs, nothing is written

  const std::vector<std::string> dots = files_ending(dir, ".dot");
  CHECK(dots.size() == 4);
  CHECK(files_ending(dir, ".tmp").empty());
  const std::string prefix = "eval-" + std::to_string(::getpid()) + "-";
  for (const std::string& name : dots) CHECK(name.rfind(prefix, 0) == 0);
  // The last evaluation's picture, forward and backward.
  const std::string last = metajit_test::read_file(dir / (prefix + "4.dot"));
  CHECK(count_occurrences(last, kBackwardNode) > 0);
  CHECK(count_occurrences(metajit_test::read_file(dir / (prefix + "3.dot")), "subgraph cluster_") ==
        1);
  if (dot_on_path()) {
    CHECK(files_ending(dir, ".svg").size() == dots.size());
  } else {
    WARN("Graphviz's dot is not on PATH: no .svg dumps to check");
  }
}

TEST_CASE("an unusable METAJIT_DUMP_DOT warns and evaluation goes on", "[dot]") {
  metajit_test::TempDir tmp;
  metajit_test::write_file(tmp.path() / "file", "not a directory");
  metajit_test::ScopedEnv env("METAJIT_DUMP_DOT", (tmp.path() / "file" / "dumps").string());
  Var x = array<float>({1, 2, 3}, {3});
  Var y = x * 2.0 + 1.0;
  std::vector<float> v = y.to_vector<float>();
  CHECK(v == std::vector<float>{3, 5, 7});
  CHECK(metajit_test::count_entries(tmp.path()) == 1);
}
