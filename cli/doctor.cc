// `metajit doctor`: checks everything a first kernel compile depends on (compiler, target,
// OpenMP, nvcc and the GPU, the cache directory and its disk) and says how to fix what is wrong.
#include <dlfcn.h>
#include <metajit/error.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <boost/process/search_path.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "base/config.h"
#include "cache/cache_store.h"
#include "cli/commands.h"
#include "remote_cache/remote_store.h"
#include "runtime/compiler_driver.h"
#include "runtime/cuda_runtime.h"
#include "runtime/cuda_toolchain.h"
#include "runtime/toolchain.h"

namespace metajit::cli {
namespace {

namespace fs = std::filesystem;

// Below this much free space a few hundred kernels no longer fit.
constexpr uint64_t kMinFreeBytes = uint64_t(100) << 20;
constexpr double kProbeTimeoutSeconds = 120;

enum class Status { Ok, Problem, Info };

struct Check {
  Check(std::string n, Status s = Status::Ok, std::string d = {}, std::string f = {})
      : name(std::move(n)), status(s), detail(std::move(d)), fix(std::move(f)) {}
  std::string name;
  Status status;
  std::string detail;
  std::string fix;  // one line, for problems
};

const char* status_word(Status s) {
  return s == Status::Ok ? "ok" : s == Status::Problem ? "problem" : "info";
}

// A temporary directory for the OpenMP probe, removed on scope exit.
class ScratchDir {
 public:
  ScratchDir() {
    std::string tmpl = (fs::temp_directory_path() / "metajit-doctor-XXXXXX").string();
    if (::mkdtemp(tmpl.data())) path_ = tmpl;
  }
  ~ScratchDir() {
    std::error_code ec;
    if (!path_.empty()) fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// Builds a shared object with the kernels' own flags, loads it and runs a parallel loop: the
// whole compile -> dlopen -> OpenMP path a kernel takes.
Check check_openmp(const Toolchain& tc) {
  Check c{"openmp"};
  const char* fix = "install the compiler's OpenMP runtime (libgomp: apt-get install g++)";
  ScratchDir dir;
  if (dir.path().empty()) {
    return {"openmp", Status::Problem, "cannot create a temporary directory for the probe",
            "make $TMPDIR writable"};
  }
  fs::path src = dir.path() / "probe.cc", so = dir.path() / "probe.so";
  {
    std::ofstream f(src);
    f << "#include <omp.h>\n"
         "extern \"C\" long metajit_doctor_probe(int* threads) {\n"
         "  long sum = 0;\n"
         "  int most = 1;\n"
         "#pragma omp parallel for reduction(+ : sum) reduction(max : most)\n"
         "  for (int i = 1; i <= 1000; ++i) {\n"
         "    sum += i;\n"
         "    int t = omp_get_num_threads();\n"
         "    most = t > most ? t : most;\n"
         "  }\n"
         "  *threads = most;\n"
         "  return sum;\n"
         "}\n";
  }
  CompileOutcome r = run_compiler(tc.compile_command(src, so), kProbeTimeoutSeconds);
  if (!r.ok) {
    c.status = Status::Problem;
    c.detail = "compiling an OpenMP probe failed: " + first_line(r.output);
    c.fix = fix;
    return c;
  }
  void* lib = ::dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* err = ::dlerror();
    return {"openmp", Status::Problem,
            std::string("loading the probe failed: ") + (err ? err : "unknown error"), fix};
  }
  auto fn = reinterpret_cast<long (*)(int*)>(::dlsym(lib, "metajit_doctor_probe"));
  int threads = 0;
  long sum = fn ? fn(&threads) : -1;
  // No dlclose: libgomp came in with the probe and its idle worker threads still run its code.
  if (sum != 500500) {
    return {"openmp", Status::Problem, "the probe computed a wrong result", fix};
  }
  // The kernels' threads are OpenMP's (OMP_NUM_THREADS); METAJIT_JOBS is how many compiles run
  // at once, not a thread count (issue 26: this line read as if it were).
  const char* omp = std::getenv("OMP_NUM_THREADS");
  c.detail = "a parallel loop ran on " + std::to_string(threads) + " thread" +
             (threads == 1 ? "" : "s") + " (OMP_NUM_THREADS=" + (omp ? omp : "unset") +
             "; compile jobs at once: METAJIT_JOBS=" + std::to_string(config().jobs) + ")";
  return c;
}

Check check_nvcc() {
  Check c{"nvcc", Status::Info};
  const fs::path path = locate_nvcc();
  if (path.empty()) {
    c.detail = "'" + config().nvcc +
               "' not found (METAJIT_NVCC, PATH, /usr/local/cuda/bin); the CUDA backend is "
               "unavailable";
    return c;
  }
  // nvcc compiles each kernel's host side with the C++ compiler (-ccbin): without one, the fix
  // is that compiler, not the CUDA toolkit (issue 26: this line said to reinstall CUDA).
  try {
    host_toolchain();
  } catch (const Error& e) {
    c.status = Status::Problem;
    c.detail = path.string() + " needs a host C++ compiler for -ccbin: " + first_line(e.what());
    c.fix = "install g++ (apt-get install g++) or point METAJIT_CXX at a C++ compiler";
    return c;
  }
  try {
    const CudaToolchain& tc = cuda_toolchain();
    c.status = Status::Ok;
    c.detail = tc.path.string() + " (" + tc.version_line() + "), kernels for " +
               (tc.emulated ? "host emulation" : tc.arch) +
               (tc.library_dir.empty() ? "" : ", libcudart in " + tc.library_dir);
  } catch (const Error& e) {
    c.status = Status::Problem;
    c.detail = e.what();
    c.fix = "reinstall the CUDA toolkit or point METAJIT_NVCC at a working nvcc";
  }
  return c;
}

// The GPU the CUDA backend would run on; its absence is information, not a problem: CUDA
// kernels can still be compiled (cache warm) here.
Check check_gpu() {
  Check c{"gpu", Status::Info};
  if (CudaRuntime* rt = cuda_runtime()) {
    c.status = Status::Ok;
    c.detail = rt->describe();
  } else {
    c.detail = "none usable: " + cuda_runtime_problem() +
               "; metajit runs on the CPU (CUDA kernels can still be compiled and cached)";
  }
  return c;
}

std::string mode_text(mode_t m) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", unsigned(m & 07777));
  return buf;
}

// The directory whose permissions and file system matter: the cache root, or the nearest
// existing parent when the root is still to be created.
fs::path nearest_existing(fs::path p) {
  std::error_code ec;
  while (!p.empty() && !fs::exists(p, ec) && p != p.parent_path()) p = p.parent_path();
  return p.empty() ? fs::path(".") : p;
}

Check check_cache_dir(const fs::path& root) {
  Check c{"cache dir"};
  struct stat st;
  if (::stat(root.c_str(), &st) != 0) {
    fs::path parent = nearest_existing(root);
    if (::access(parent.c_str(), W_OK) != 0) {
      c.status = Status::Problem;
      c.detail = root.string() + " does not exist and " + parent.string() + " is not writable";
      c.fix = "set METAJIT_CACHE_DIR (or --cache-dir) to a directory you can write";
    } else {
      c.detail = root.string() + " (not created yet; it will be, with mode 0700)";
    }
    return c;
  }
  if (!S_ISDIR(st.st_mode)) {
    return {"cache dir", Status::Problem, root.string() + " is not a directory",
            "remove it or set METAJIT_CACHE_DIR to a directory"};
  }
  if (st.st_uid != ::geteuid()) {
    return {"cache dir", Status::Problem,
            root.string() + " is owned by uid " + std::to_string(st.st_uid) +
                ", not by you; metajit will not load kernels from it",
            "set METAJIT_CACHE_DIR to a directory you own"};
  }
  if (st.st_mode & 022) {
    return {"cache dir", Status::Problem,
            root.string() + " has mode " + mode_text(st.st_mode) +
                " (writable by group or others); metajit will not load kernels from it",
            "chmod 700 " + root.string()};
  }
  struct statvfs ro;
  if (::statvfs(root.c_str(), &ro) == 0 && (ro.f_flag & ST_RDONLY)) {
    // A warm cache mounted read-only is a deployment README "Cache" recommends: kernels load,
    // missing ones compile into a private temporary cache, statistics stay in memory.
    c.detail = root.string() +
               " (read-only file system: fine for deployment; kernels it lacks "
               "are compiled into a temporary cache)";
    return c;
  }
  if (::access(root.c_str(), W_OK) != 0) {
    return {"cache dir", Status::Problem,
            root.string() + " is not writable; kernels will be compiled into a temporary cache",
            "chmod u+w " + root.string()};
  }
  fs::path v1 = root / "v1";
  if (::lstat(v1.c_str(), &st) == 0 &&
      (!S_ISDIR(st.st_mode) || st.st_uid != ::geteuid() || (st.st_mode & 022))) {
    return {
        "cache dir", Status::Problem,
        v1.string() + " is not a private directory of yours (mode " + mode_text(st.st_mode) + ")",
        "metajit --cache-dir " + root.string() + " cache clear, then chmod 700 " + v1.string()};
  }
  c.detail = root.string() + " (yours, mode " +
             mode_text(::stat(root.c_str(), &st) == 0 ? st.st_mode : 0) + ")";
  return c;
}

Check check_free_space(const fs::path& root, std::optional<uint64_t>& free_bytes) {
  Check c{"free space"};
  struct statvfs vfs;
  fs::path where = nearest_existing(root);
  if (::statvfs(where.c_str(), &vfs) != 0) {
    c.status = Status::Info;
    c.detail = "cannot tell for " + where.string();
    return c;
  }
  free_bytes = uint64_t(vfs.f_bavail) * uint64_t(vfs.f_frsize);
  c.detail = human_bytes(*free_bytes) + " available on the cache's file system";
  if (*free_bytes < kMinFreeBytes) {
    c.status = Status::Problem;
    c.fix = "free disk space, or set METAJIT_CACHE_DIR to another file system";
  }
  return c;
}

// "-march=znver3 -mtune=znver3 (+97 more target options)": the full list is in --json.
std::string summarize_target(const std::string& target) {
  std::istringstream in(target);
  std::string shown;
  size_t others = 0;
  for (std::string t; in >> t;) {
    if (t.rfind("-march=", 0) == 0 || t.rfind("-mtune=", 0) == 0 || t == "-target-cpu")
      shown += (shown.empty() ? "" : " ") + t;
    else if (t.rfind("-", 0) == 0)
      ++others;
  }
  if (shown.empty()) return target.size() > 100 ? target.substr(0, 97) + "..." : target;
  return shown + " (+" + std::to_string(others) + " more target options)";
}

// The remote cache (README "Sharing kernels across machines"): off is information; a server
// that cannot be reached, keys that cannot be read, or a noeviction policy (uploads fail once
// the server is full) are problems.
Check check_remote() {
  Check c{"remote", Status::Info};
  RemoteStore* store = RemoteStore::current();
  if (!store) {
    c.detail = "off (METAJIT_REMOTE " +
               std::string(config().remote_url.empty() ? "is not set)" : "with mode off)");
    return c;
  }
  RemoteStatus s = store->status();
  std::string what = s.url + ", " + s.mode + ", namespace " + s.name_space;
  if (!s.reachable) {
    return {"remote", Status::Problem, what + ": not reachable (" + s.error + ")",
            "check METAJIT_REMOTE, METAJIT_REMOTE_PASSWORD_FILE and that the server runs "
            "(metajit remote status)"};
  }
  if (!s.readable || (s.mode == "readwrite" && !s.writable))
    return {
        "remote", Status::Problem,
        what + ": reads " + (s.readable ? "on" : "off") + ", writes " + (s.writable ? "on" : "off"),
        s.readable ? "set METAJIT_REMOTE_SIGNING_KEY to a key made by `metajit remote keygen`"
                   : "set METAJIT_REMOTE_TRUSTED_KEYS to a file of trusted public keys"};
  if (s.maxmemory_policy == "noeviction")
    return {"remote", Status::Problem,
            what + ": the server's maxmemory-policy is noeviction: uploads fail once it is full",
            "redis-cli CONFIG SET maxmemory-policy allkeys-lru (and in redis.conf)"};
  c.status = Status::Ok;
  c.detail = what + ": Redis " + s.server_version + ", " +
             (s.entries >= 0 ? std::to_string(s.entries) + " kernels, " : "") + "policy " +
             (s.maxmemory_policy.empty() ? "unknown" : s.maxmemory_policy) +
             (s.trust_unsigned ? " (signatures not required)" : "");
  return c;
}

int run_doctor(bool json) {
  std::vector<Check> checks;
  nlohmann::json report = nlohmann::json::object();
  const fs::path root = config().cache_dir;

  const Toolchain* tc = nullptr;
  try {
    tc = &host_toolchain();
    checks.push_back({"compiler", Status::Ok, tc->path.string() + " (" + tc->version_line() + ")"});
    report["compiler"] = {{"path", tc->path.string()},
                          {"version", tc->version_line()},
                          {"target", tc->resolved_target},
                          {"flags", tc->flags}};
    bool resolved = tc->resolved_target.rfind("unresolved", 0) != 0;
    checks.push_back({"target", resolved ? Status::Ok : Status::Problem,
                      resolved
                          ? (json ? tc->resolved_target : summarize_target(tc->resolved_target))
                          : "cannot tell what -march=native means for this compiler",
                      resolved ? ""
                               : "check that `" + tc->path.string() +
                                     " -march=native -E -v -x c++ /dev/null` works"});
    checks.push_back(check_openmp(*tc));
  } catch (const Error& e) {
    checks.push_back({"compiler", Status::Problem, e.what(),
                      "install g++ (apt-get install g++) or set METAJIT_CXX to a C++17 compiler"});
    checks.push_back({"openmp", Status::Info, "not checked: no working compiler"});
  }
  checks.push_back(check_nvcc());
  checks.push_back(check_gpu());
  checks.push_back(check_cache_dir(root));
  std::optional<uint64_t> free_bytes;
  checks.push_back(check_free_space(root, free_bytes));
  checks.push_back(check_remote());

  uint64_t entries = 0, bytes = 0;
  try {
    for (const CacheEntryInfo& e : CacheStore(root).list()) ++entries, bytes += e.bytes;
    Check c{"entries", Status::Info,
            std::to_string(entries) + " kernel" + (entries == 1 ? "" : "s") + ", " +
                human_bytes(bytes) + " of " + human_bytes(config().cache_max_size) + " allowed"};
    checks.push_back(c);
  } catch (const Error& e) {
    checks.push_back({"entries", Status::Problem, e.what(),
                      "metajit --cache-dir " + root.string() + " cache clear"});
  }

  size_t problems = 0;
  for (const Check& c : checks) problems += c.status == Status::Problem;
  if (json) {
    report["ok"] = problems == 0;
    report["problems"] = problems;
    report["cache"] = {{"dir", root.string()}, {"entries", entries}, {"bytes", bytes}};
    if (free_bytes) report["cache"]["free_bytes"] = *free_bytes;
    report["checks"] = nlohmann::json::array();
    for (const Check& c : checks) {
      nlohmann::json j = {
          {"name", c.name}, {"status", status_word(c.status)}, {"detail", c.detail}};
      if (!c.fix.empty()) j["fix"] = c.fix;
      report["checks"].push_back(j);
    }
    std::cout << report.dump(2) << "\n";
  } else {
    std::cout << "metajit " << METAJIT_VERSION << " doctor\n";
    for (const Check& c : checks) {
      std::printf("  %-8s %-11s %s\n", status_word(c.status), c.name.c_str(), c.detail.c_str());
      if (!c.fix.empty()) std::printf("  %-8s %-11s fix: %s\n", "", "", c.fix.c_str());
    }
    if (problems == 0)
      std::printf("no problems found\n");
    else
      std::printf("%zu problem%s found\n", problems, problems == 1 ? "" : "s");
  }
  std::fflush(stdout);
  return problems == 0 ? 0 : 1;
}

}  // namespace

void register_doctor_command(CLI::App& app, Action& action) {
  auto json = std::make_shared<bool>(false);
  CLI::App* doctor =
      app.add_subcommand("doctor", "Check the compiler, OpenMP, nvcc and the cache directory");
  doctor->add_flag("--json", *json, "Print a JSON report");
  doctor->callback([&action, json] { action = [json] { return run_doctor(*json); }; });
}

}  // namespace metajit::cli
