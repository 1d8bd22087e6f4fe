// The subcommands of the `metajit` command line (docs/api.md "Command line"). Each registers itself
// on the CLI11 app and, when chosen, leaves the work to do in `action` (run after parsing, so
// that --cache-dir is applied first). Exit status: 0 success, 1 user error, 2 internal failure.
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>

namespace metajit::cli {

// A mistake in the command line or the environment: exit status 1 instead of 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

using Action = std::function<int()>;

void register_cache_commands(CLI::App& app, Action& action);
void register_doctor_command(CLI::App& app, Action& action);
void register_remote_commands(CLI::App& app, Action& action);

// "3.4 MiB": sizes as people read them.
std::string human_bytes(uint64_t bytes);

}  // namespace metajit::cli
