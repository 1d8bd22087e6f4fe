// Entry point of the `metajit` command: parses the command line with CLI11, applies
// --cache-dir, runs the chosen subcommand and turns every failure into one line on stderr.
#include <metajit/error.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "base/config.h"
#include "cli/commands.h"

namespace {

// Messages from CLI11 or exceptions may span lines; the contract is one line per error.
std::string one_line(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  for (char& c : text)
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  return text;
}

int fail(const std::string& message, int status) {
  std::string line = "metajit: " + one_line(message) + "\n";
  std::fwrite(line.data(), 1, line.size(), stderr);
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  using metajit::cli::UsageError;
  CLI::App app{"metajit: a lazy tensor-expression JIT. Inspect the toolchain and the kernel cache.",
               "metajit"};
  app.set_version_flag("--version", std::string("metajit ") + METAJIT_VERSION);
  std::string cache_dir;
  CLI::Option* cache_dir_opt = app.add_option(
      "--cache-dir", cache_dir, "Kernel cache directory (overrides METAJIT_CACHE_DIR)");
  app.require_subcommand(1);

  metajit::cli::Action action;
  metajit::cli::register_doctor_command(app, action);
  metajit::cli::register_cache_commands(app, action);
  metajit::cli::register_remote_commands(app, action);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version: stdout, status 0
    // CLI11 reports `metajit frob` as "A subcommand is required"; name the word instead.
    std::vector<std::string> rest = app.remaining(/*recurse=*/true);
    if (!rest.empty() && dynamic_cast<const CLI::RequiredError*>(&e)) {
      bool option = rest.front().rfind("-", 0) == 0;
      return fail(std::string(option ? "unknown option '" : "unknown command '") + rest.front() +
                      "' (see metajit --help)",
                  1);
    }
    if (!rest.empty() && dynamic_cast<const CLI::ExtrasError*>(&e))
      return fail("unexpected argument '" + rest.front() + "' (see metajit --help)", 1);
    return fail(std::string(e.what()) + " (see metajit --help)", 1);
  }

  try {
    if (cache_dir_opt->count() > 0) {
      if (cache_dir.empty()) throw UsageError("--cache-dir needs a directory");
      ::setenv("METAJIT_CACHE_DIR", cache_dir.c_str(), 1);
    }
    try {
      metajit::reload_config();
    } catch (const metajit::Error& e) {
      throw UsageError(e.what());  // a malformed METAJIT_* variable is the user's to fix
    }
    if (!action) return fail("nothing to do (see metajit --help)", 1);
    return action();
  } catch (const UsageError& e) {
    return fail(e.what(), 1);
  } catch (const std::exception& e) {
    return fail(e.what(), 2);
  } catch (...) {
    return fail("internal error", 2);
  }
}
