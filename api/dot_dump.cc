// METAJIT_DUMP_DOT: one DOT file (and SVG) per evaluation (api/dot_dump.h).
#include "api/dot_dump.h"

#include <metajit/error.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <mutex>

#include "base/config.h"
#include "base/log.h"
#include "cache/cache_store.h"  // write_file_atomically
#include "runtime/compiler_driver.h"

namespace metajit {
namespace {

namespace fs = std::filesystem;

constexpr double kDotTimeoutSeconds = 60;

std::atomic<uint64_t> dump_count{0};

// `svg` from `dot_file` by Graphviz, through Boost.Process with an argument vector (no shell:
// the paths come from the environment). Without `dot` on PATH, nothing (said once at info).
void render_svg(const fs::path& dot_file, const fs::path& svg) {
  fs::path tmp = svg;
  tmp += ".tmp";
  CompileOutcome r =
      run_compiler({"dot", "-Tsvg", "-o", tmp.string(), dot_file.string()}, kDotTimeoutSeconds);
  if (r.failed_to_start) {
    static std::once_flag said;
    std::call_once(said, [&] {
      log_message(LogLevel::Info, "METAJIT_DUMP_DOT: no SVG next to the .dot files (" + r.output +
                                      "; install Graphviz for them)");
    });
    return;
  }
  std::error_code ec;
  if (!r.ok) {
    fs::remove(tmp, ec);
    throw Error("'" + r.command + "' failed: " + r.output);
  }
  fs::rename(tmp, svg, ec);
  if (ec) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
    throw Error("cannot rename " + tmp.string() + " to " + svg.string() + ": " + ec.message());
  }
}

}  // namespace

bool dumping_dot() {
  return !config().dump_dot_dir.empty();
}

void dump_dot(const std::function<std::string()>& picture) {
  const std::string dir = config().dump_dot_dir;
  if (dir.empty()) return;
  const uint64_t n = ++dump_count;
  try {
    // Absolute, so that no argument given to `dot` can start with '-'.
    const fs::path where = fs::absolute(dir);
    std::error_code ec;
    fs::create_directories(where, ec);
    if (ec) throw Error("cannot create the directory " + where.string() + ": " + ec.message());
    const std::string stem = "eval-" + std::to_string(::getpid()) + "-" + std::to_string(n);
    const fs::path dot_file = where / (stem + ".dot");
    write_file_atomically(dot_file, picture(), /*durable=*/false);  // a picture, not data
    render_svg(dot_file, where / (stem + ".svg"));
  } catch (const std::exception& e) {
    warn_once("METAJIT_DUMP_DOT", "METAJIT_DUMP_DOT=" + dir + ": " + e.what() +
                                      "; evaluation goes on (this warning is given once)");
  }
}

}  // namespace metajit
