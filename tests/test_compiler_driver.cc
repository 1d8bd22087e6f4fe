// The compiler driver (runtime/compiler_driver.h) and the host toolchain (runtime/toolchain.h):
// output capture, exit codes, missing programs, timeouts, parallel batches, and resolving and
// identifying the C++ compiler.
#include <metajit/error.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "base/config.h"
#include "runtime/compiler_driver.h"
#include "runtime/toolchain.h"
#include "support/exceptions.h"
#include "support/files.h"
#include "support/processes.h"
#include "support/scoped_env.h"

using namespace metajit;
using Catch::Matchers::Contains;
using Catch::Matchers::EndsWith;
using Catch::Matchers::StartsWith;
using metajit_test::message_of;

namespace {

// The pid a command wrote to `file` (0 when it wrote none).
pid_t pid_written_to(const std::filesystem::path& file) {
  const std::string text = metajit_test::read_file(file);
  return text.empty() ? 0 : pid_t(std::stol(text));
}

}  // namespace

TEST_CASE("run_compiler captures stdout and stderr together", "[driver]") {
  CompileOutcome r = run_compiler({"sh", "-c", "echo to-stdout; echo to-stderr >&2"}, 30);
  CHECK(r.ok);
  CHECK(r.exit_code == 0);
  CHECK_FALSE(r.timed_out);
  CHECK_FALSE(r.failed_to_start);
  CHECK_THAT(r.output, Contains("to-stdout") && Contains("to-stderr"));
  CHECK(r.command == "sh -c echo to-stdout; echo to-stderr >&2");
  CHECK(r.seconds >= 0);
}

TEST_CASE("run_compiler reports a failing command with its output and exit code", "[driver]") {
  CompileOutcome r = run_compiler({"sh", "-c", "echo 'error: boom' >&2; exit 3"}, 30);
  CHECK_FALSE(r.ok);
  CHECK(r.exit_code == 3);
  CHECK_FALSE(r.timed_out);
  CHECK_FALSE(r.failed_to_start);
  CHECK_THAT(r.output, Contains("error: boom"));
}

TEST_CASE("run_compiler passes arguments verbatim, without a shell", "[driver]") {
  // Shell metacharacters in an argument stay one argument and are never interpreted.
  CompileOutcome r = run_compiler({"printf", "%s|", "a b", "$(echo no)", ";", "*"}, 30);
  REQUIRE(r.ok);
  CHECK(r.output == "a b|$(echo no)|;|*|");
}

TEST_CASE("run_compiler reports a missing executable without throwing", "[driver]") {
  CompileOutcome on_path = run_compiler({"metajit-no-such-program-xyz", "--version"}, 30);
  CHECK_FALSE(on_path.ok);
  CHECK(on_path.failed_to_start);
  CHECK_THAT(on_path.output, Contains("metajit-no-such-program-xyz") && Contains("not found"));

  CompileOutcome by_path = run_compiler({"/nonexistent/dir/cc", "-c", "x.cc"}, 30);
  CHECK_FALSE(by_path.ok);
  CHECK(by_path.failed_to_start);
  CHECK_THAT(by_path.output, Contains("/nonexistent/dir/cc"));

  CompileOutcome empty = run_compiler({}, 30);
  CHECK_FALSE(empty.ok);
  CHECK(empty.failed_to_start);
}

TEST_CASE("a file that cannot be executed fails to start and leaves no zombie", "[driver]") {
  metajit_test::TempDir dir;
  std::filesystem::path garbage = dir.path() / "not-a-program";
  std::ofstream(garbage) << "\x7f"
                            "ELF but not really";
  std::filesystem::permissions(garbage, std::filesystem::perms::owner_all);
  CompileOutcome r = run_compiler({garbage.string()}, 30);
  CHECK(r.failed_to_start);
  CHECK_FALSE(r.ok);
  CHECK_THAT(r.output, Contains("not-a-program") && Contains("format"));
  int status;
  CHECK(::waitpid(-1, &status, WNOHANG) <= 0);  // no exited, unreaped child of ours
}

// The command would run for 5 minutes. That run_compiler returned because it killed it, not
// because the command ended, shows in the outcome, in the command never reaching its last step,
// and in its process being gone; no clock is read. (A driver that waited would fail these
// checks after 5 minutes, or run into ctest's timeout.)
TEST_CASE("run_compiler kills a command that runs past its timeout", "[driver]") {
  metajit_test::TempDir dir;
  const std::string pid_file = (dir.path() / "pid").string(), done = (dir.path() / "done").string();
  CompileOutcome r = run_compiler(
      {"sh", "-c", "echo $$ > \"$0\"; sleep 300; echo finished > \"$1\"; echo finished", pid_file,
       done},
      2);
  INFO(r.output);
  CHECK(r.timed_out);
  CHECK_FALSE(r.ok);
  CHECK_FALSE(r.failed_to_start);
  CHECK(r.exit_code == -1);  // no exit status: it did not exit, it was killed
  CHECK_THAT(r.output, Contains("'sh' timed out after 2 s and was killed"));
  CHECK_THAT(r.output, !Contains("finished"));
  CHECK_FALSE(std::filesystem::exists(done));
  const pid_t pid = pid_written_to(pid_file);
  REQUIRE(pid > 0);
  CHECK_FALSE(metajit_test::process_is_running(pid));  // killed and reaped
}

TEST_CASE("a timeout also kills the command's children that hold its output", "[driver]") {
  // The shell's child keeps the output pipe open: the driver must kill it too, not wait for it
  // to close the pipe (which it would do only after 5 minutes).
  metajit_test::TempDir dir;
  const std::string pid_file = (dir.path() / "child").string(),
                    survived = (dir.path() / "survived").string();
  CompileOutcome r = run_compiler({"sh", "-c",
                                   "echo started; (sleep 300; echo survived > \"$1\") & "
                                   "echo $! > \"$0\"; wait; echo late",
                                   pid_file, survived},
                                  2);
  INFO(r.output);
  CHECK(r.timed_out);
  CHECK_FALSE(r.ok);
  CHECK_THAT(r.output, Contains("started") && Contains("timed out after 2 s and was killed"));
  CHECK_THAT(r.output, !Contains("late"));
  // Killed, the child ends at once (it may take a moment to finish exiting); spared, it would
  // end only after 5 minutes, having written `survived`.
  const pid_t child = pid_written_to(pid_file);
  REQUIRE(child > 0);
  while (metajit_test::process_is_running(child))
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK_FALSE(std::filesystem::exists(survived));
}

TEST_CASE("a command killed by a signal is a failure that says so", "[driver]") {
  CompileOutcome r = run_compiler({"sh", "-c", "kill -9 $$"}, 30);
  CHECK_FALSE(r.ok);
  CHECK_FALSE(r.timed_out);
  CHECK(r.exit_code == 128 + 9);
  CHECK_THAT(r.output, Contains("signal 9"));
}

TEST_CASE("large output does not block the command", "[driver]") {
  // Far more than a pipe buffer (64 KiB): a driver that reads only at exit would hang here.
  CompileOutcome r =
      run_compiler({"sh", "-c", "head -c 300000 /dev/zero | tr '\\0' x; echo done >&2"}, 60);
  REQUIRE(r.ok);
  CHECK(r.output.size() >= 300000);
  CHECK_THAT(r.output, Contains("done"));
}

TEST_CASE("run_compilers returns outcomes in command order", "[driver]") {
  std::vector<std::vector<std::string>> commands;
  for (int i = 0; i < 7; ++i) {
    // Later commands finish first, so completion order differs from command order.
    std::string sleep = "0.0" + std::to_string(7 - i);
    commands.push_back({"sh", "-c", "sleep " + sleep + "; echo job" + std::to_string(i)});
  }
  commands.push_back({"sh", "-c", "echo failing; exit 5"});
  commands.push_back({"metajit-no-such-program-xyz"});
  std::vector<CompileOutcome> results = run_compilers(commands, 3, 30);
  REQUIRE(results.size() == commands.size());
  for (int i = 0; i < 7; ++i) {
    CHECK(results[i].ok);
    CHECK(results[i].output == "job" + std::to_string(i) + "\n");
  }
  CHECK(results[7].exit_code == 5);
  CHECK_FALSE(results[7].ok);
  CHECK(results[8].failed_to_start);
}

TEST_CASE("run_compilers runs at most `jobs` commands at once", "[driver]") {
  metajit_test::TempDir dir;
  const std::string d = dir.path().string();
  std::vector<std::vector<std::string>> commands;
  for (int i = 0; i < 8; ++i) {
    // Each command records how many others are running when it starts, then holds a marker.
    std::string script = "n=$(ls '" + d + "/running' | wc -l); echo $n; touch '" + d + "/running/" +
                         std::to_string(i) + "'; sleep 0.2; rm '" + d + "/running/" +
                         std::to_string(i) + "'";
    commands.push_back({"sh", "-c", script});
  }
  std::filesystem::create_directory(dir.path() / "running");
  std::vector<CompileOutcome> results = run_compilers(commands, 2, 30);
  REQUIRE(results.size() == 8);
  for (const CompileOutcome& r : results) {
    REQUIRE(r.ok);
    CHECK(std::stoi(r.output) <= 1);  // at most one other job was running
  }
}

TEST_CASE("run_compilers with no commands, or more jobs than commands", "[driver]") {
  CHECK(run_compilers({}, 4, 30).empty());
  std::vector<CompileOutcome> one = run_compilers({{"sh", "-c", "echo x"}}, 16, 30);
  REQUIRE(one.size() == 1);
  CHECK(one[0].output == "x\n");
  std::vector<CompileOutcome> zero_jobs = run_compilers({{"true"}, {"true"}}, 0, 30);
  REQUIRE(zero_jobs.size() == 2);
  CHECK(zero_jobs[0].ok);
  CHECK(zero_jobs[1].ok);
}

TEST_CASE("host_toolchain resolves the compiler and the native target", "[toolchain]") {
  metajit_test::TempDir cache;
  metajit_test::ScopedEnv dir("METAJIT_CACHE_DIR", cache.path().string());
  const Toolchain& tc = host_toolchain();
  CHECK(tc.path.is_absolute());
  CHECK(std::filesystem::exists(tc.path));
  CHECK(tc.binary_size > 0);
  CHECK(tc.binary_mtime > 0);
  CHECK_FALSE(tc.version_output.empty());
  CHECK_FALSE(tc.version_line().empty());
  CHECK(tc.version_line().find('\n') == std::string::npos);
  // gcc spells the resolved target -march=..., clang -target-cpu ...
  bool gcc_like = tc.resolved_target.find("-march=") != std::string::npos;
  bool clang_like = tc.resolved_target.find("-target-cpu") != std::string::npos;
  CHECK((gcc_like || clang_like));
  CHECK_THAT(tc.resolved_target, !Contains("-march=native"));

  std::string id = tc.identity();
  CHECK_THAT(id, Contains(tc.path.string()) && Contains(tc.version_line()) &&
                     Contains(tc.resolved_target) && Contains("-fopenmp"));

  std::vector<std::string> want = {"-std=c++17", "-O3",     "-march=native",
                                   "-fPIC",      "-shared", "-fopenmp"};
  REQUIRE(tc.flags.size() >= want.size());
  CHECK(std::vector<std::string>(tc.flags.begin(), tc.flags.begin() + 6) == want);
  // Signed arithmetic in kernels wraps, index arithmetic included (docs/design.md §3).
  CHECK(std::find(tc.flags.begin(), tc.flags.end(), "-fwrapv") != tc.flags.end());

  // Kernels neither throw nor need libstdc++; with g++ the C libraries are named instead of
  // g++'s defaults (half the link's time), libgomp still coming with -fopenmp.
  CHECK(std::find(tc.flags.begin(), tc.flags.end(), "-fno-exceptions") != tc.flags.end());
  // Floating-point operations under a guard may run in every lane: a float16 read under a
  // padding test vectorises (tests/test_cpu_targets.cc, runtime/toolchain.cc).
  CHECK(std::find(tc.flags.begin(), tc.flags.end(), "-fno-trapping-math") != tc.flags.end());
  // No temporary assembly file between compiler and assembler (runtime/toolchain.cc).
  CHECK(std::find(tc.flags.begin(), tc.flags.end(), "-pipe") != tc.flags.end());
  const bool gcc = tc.version_output.find("clang") == std::string::npos;
  CHECK((std::find(tc.flags.begin(), tc.flags.end(), "-nodefaultlibs") != tc.flags.end()) == gcc);
  const std::vector<std::string> libs =
      gcc ? std::vector<std::string>{"-lmvec", "-lm", "-lc", "-lgcc"}
          : std::vector<std::string>{"-lmvec"};
  CHECK(tc.link_libraries == libs);

  std::vector<std::string> cmd = tc.compile_command("/x/kernel.cc", "/x/kernel.so");
  REQUIRE(cmd.size() == tc.flags.size() + 4 + libs.size());
  CHECK(cmd.front() == tc.path.string());
  const size_t source = tc.flags.size() + 1;
  CHECK(cmd[source] == "/x/kernel.cc");
  CHECK(cmd[source + 1] == "-o");
  CHECK(cmd[source + 2] == "/x/kernel.so");
  CHECK(std::vector<std::string>(cmd.begin() + long(source) + 3, cmd.end()) == libs);

  // Resolved once: the same object again.
  CHECK(&host_toolchain() == &tc);
}

TEST_CASE("the toolchain's slow answers are remembered on disk", "[toolchain]") {
  metajit_test::TempDir cache;
  // A private compiler path so that this process has not resolved it yet.
  std::filesystem::path cxx = cache.path() / "my-g++";
  std::filesystem::create_symlink(host_toolchain().path, cxx);
  metajit_test::ScopedEnv dir("METAJIT_CACHE_DIR", (cache.path() / "c").string());
  metajit_test::ScopedEnv env("METAJIT_CXX", cxx.string());
  const Toolchain& tc = host_toolchain();
  CHECK(tc.path == cxx);

  std::filesystem::path tdir = cache.path() / "c" / "v1" / "toolchains";
  REQUIRE(std::filesystem::is_directory(tdir));
  struct stat st;
  REQUIRE(::stat(tdir.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(tdir)) {
    ++files;
    CHECK(e.path().extension() == ".json");
    std::string text = metajit_test::read_file(e.path());
    CHECK_THAT(text,
               Contains("version_output") && Contains("resolved_target") && Contains(cxx.string()));
    // Mark the remembered answer: a later resolution must read it instead of asking g++.
    nlohmann::json j = nlohmann::json::parse(text);
    j["version_output"] = "remembered-compiler 1.0\n";
    std::filesystem::path marked = e.path();
    std::ofstream(marked, std::ios::trunc) << j.dump();
    std::filesystem::permissions(
        marked, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  }
  CHECK(files == 1);
  // New flags make this process resolve again; the binary and CPU are the same, so the
  // answers come from the file.
  metajit_test::ScopedEnv flags(
      "METAJIT_CXXFLAGS",
      metajit_test::ScopedEnv::appended("METAJIT_CXXFLAGS", "-DMETAJIT_REMEMBERED=1"));
  CHECK(host_toolchain().version_line() == "remembered-compiler 1.0");
  CHECK(host_toolchain().resolved_target == tc.resolved_target);
}

TEST_CASE("METAJIT_CXXFLAGS changes the toolchain's flags and identity", "[toolchain]") {
  const Toolchain& before = host_toolchain();
  std::string id_before = before.identity();
  {
    metajit_test::ScopedEnv flags(
        "METAJIT_CXXFLAGS",
        metajit_test::ScopedEnv::appended("METAJIT_CXXFLAGS", "-DMETAJIT_TEST_FLAG=1 -g0"));
    const Toolchain& with = host_toolchain();
    REQUIRE(with.flags.size() == before.flags.size() + 2);
    CHECK(with.flags[with.flags.size() - 2] == "-DMETAJIT_TEST_FLAG=1");
    CHECK(with.flags.back() == "-g0");
    CHECK(with.identity() != id_before);
  }
  CHECK(host_toolchain().identity() == id_before);
}

TEST_CASE("a missing compiler is a CompileError naming it", "[toolchain]") {
  {
    metajit_test::ScopedEnv cxx("METAJIT_CXX", "/nonexistent/metajit-cc");
    CHECK_THAT(message_of<CompileError>([] { host_toolchain(); }),
               Contains("/nonexistent/metajit-cc") && Contains("METAJIT_CXX"));
  }
  {
    metajit_test::ScopedEnv cxx("METAJIT_CXX", "metajit-nosuchcc");
    CHECK_THAT(message_of<CompileError>([] { host_toolchain(); }),
               Contains("'metajit-nosuchcc'") && Contains("not found on PATH"));
  }
  // Back to the working compiler.
  CHECK_NOTHROW(host_toolchain());
}

TEST_CASE("a compiler whose --version fails is a CompileError", "[toolchain]") {
  metajit_test::TempDir dir;
  std::filesystem::path fake = dir.path() / "broken-cc";
  {
    std::ofstream f(fake);
    f << "#!/bin/sh\necho 'broken-cc: cannot run' >&2\nexit 7\n";
  }
  std::filesystem::permissions(fake, std::filesystem::perms::owner_all);
  metajit_test::ScopedEnv cache("METAJIT_CACHE_DIR", (dir.path() / "c").string());
  metajit_test::ScopedEnv cxx("METAJIT_CXX", fake.string());
  CHECK_THAT(message_of<CompileError>([] { host_toolchain(); }),
             Contains("broken-cc") && Contains("--version") && Contains("status 7") &&
                 Contains("cannot run"));
}

TEST_CASE("the host toolchain compiles a shared object", "[toolchain][compile]") {
  metajit_test::TempDir dir;
  std::filesystem::path src = dir.path() / "kernel.cc", so = dir.path() / "kernel.so";
  {
    std::ofstream f(src);
    f << "extern \"C\" int metajit_test_answer() { return 42; }\n";
  }
  CompileOutcome r = run_compiler(host_toolchain().compile_command(src, so), 120);
  INFO(r.output);
  REQUIRE(r.ok);
  CHECK(std::filesystem::file_size(so) > 0);

  // A syntax error: the compiler's message comes back, nothing is produced.
  {
    std::ofstream f(src);
    f << "extern \"C\" int broken( { return; }\n";
  }
  std::filesystem::path so2 = dir.path() / "broken.so";
  CompileOutcome bad = run_compiler(host_toolchain().compile_command(src, so2), 120);
  CHECK_FALSE(bad.ok);
  CHECK(bad.exit_code != 0);
  CHECK_THAT(bad.output, Contains("error"));
  CHECK_FALSE(std::filesystem::exists(so2));
}
