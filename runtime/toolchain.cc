// Host toolchain resolution (docs/design.md §5, §7). Finding the compiler is cheap; asking it for
// `--version` and for what -march=native means costs two process starts (~50 ms), so those
// answers are remembered on disk per (compiler binary, CPU) and a warm process spawns nothing.
#include "runtime/toolchain.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <boost/process/search_path.hpp>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include <metajit/error.h>

#include "base/checksum.h"
#include "base/config.h"
#include "base/log.h"
#include "cache/cache_store.h"
#include "codegen/cpu_target.h"
#include "runtime/compiler_driver.h"

namespace metajit {
namespace {

constexpr double kQueryTimeoutSeconds = 60;
constexpr int kToolchainFileFormat = 2;  // 2: the effective ISA ("isa")

// The CPU's identity: vendor, family/model/stepping, feature leaves and brand string. Leaf 1
// EBX is left out: it holds the APIC id of whichever core we happen to run on.
std::string compute_cpu_id() {
  std::string raw;
#if defined(__x86_64__) || defined(__i386__)
  auto put = [&raw](unsigned v) { raw.append(reinterpret_cast<const char*>(&v), sizeof v); };
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(0, &a, &b, &c, &d)) {
    put(a), put(b), put(c), put(d);
    if (__get_cpuid(1, &a, &b, &c, &d)) put(a), put(c), put(d);
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) put(b), put(c), put(d);
  }
  if (__get_cpuid(0x80000001, &a, &b, &c, &d)) put(c), put(d);
  for (unsigned leaf = 0x80000002; leaf <= 0x80000004; ++leaf)
    if (__get_cpuid(leaf, &a, &b, &c, &d)) put(a), put(b), put(c), put(d);
#else
  // Elsewhere: the stable lines of /proc/cpuinfo (no MHz, no bogomips).
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0 || line.rfind("Features", 0) == 0 ||
        line.rfind("CPU implementer", 0) == 0 || line.rfind("CPU part", 0) == 0 ||
        line.rfind("isa", 0) == 0)
      raw += line + "\n";
#endif
  return xxh3_128_hex(raw);
}

const std::string& cpu_id() {
  static const std::string id = compute_cpu_id();
  return id;
}

// The target options of the compiler proper's command line, as printed by `-v`: gcc's cc1plus
// line (-march=... -m... --param ...) or clang's -cc1 line (-target-cpu/-target-feature).
std::string parse_resolved_target(const std::string& verbose_output) {
  std::istringstream lines(verbose_output);
  for (std::string line; std::getline(lines, line);) {
    bool gcc = line.find("cc1plus") != std::string::npos;
    bool clang =
        line.find("\"-cc1\"") != std::string::npos || line.find(" -cc1 ") != std::string::npos;
    if (!gcc && !clang) continue;
    std::istringstream in(line);
    std::vector<std::string> tokens;
    for (std::string t; in >> t;) {
      if (t.size() >= 2 && t.front() == '"' && t.back() == '"') t = t.substr(1, t.size() - 2);
      tokens.push_back(t);
    }
    std::string out;
    auto put = [&out](const std::string& t) { out += (out.empty() ? "" : " ") + t; };
    for (size_t i = 0; i < tokens.size(); ++i) {
      const std::string& t = tokens[i];
      bool takes_value =
          t == "--param" || t == "-target-cpu" || t == "-target-feature" || t == "-tune-cpu";
      if (takes_value && i + 1 < tokens.size()) {
        put(t + " " + tokens[++i]);
      } else if (t.rfind("-m", 0) == 0) {
        put(t);
      }
    }
    if (!out.empty()) return out;
  }
  return "";
}

// Remembered answers of one compiler binary on one CPU.
struct Queried {
  std::string version_output;
  std::string resolved_target;
  // CpuTarget::id() per full flag list (joined with spaces): the ISA and features the kernels'
  // schedules are written for, METAJIT_CXXFLAGS included; asked once per flag list. Stored as
  // "target_by_flags": records of before the features ("isa_by_flags", ISA names only) are
  // asked again, so a machine with AVX512_BF16 does not keep an old record's plain "avx512".
  std::map<std::string, std::string> target_by_flags;
};

struct BinaryFacts {
  std::filesystem::path path, canonical;
  uint64_t size = 0;
  int64_t mtime_ns = 0;
};

std::string facts_digest(const BinaryFacts& f) {
  std::string text;
  append_field(text, "format", std::to_string(kToolchainFileFormat));
  append_field(text, "path", f.path.string());
  append_field(text, "canonical", f.canonical.string());
  append_field(text, "size", std::to_string(f.size));
  append_field(text, "mtime", std::to_string(f.mtime_ns));
  append_field(text, "cpu", cpu_id());
  return xxh3_128_hex(text);
}

nlohmann::json facts_json(const BinaryFacts& f) {
  return {{"format", kToolchainFileFormat},
          {"path", f.path.string()},
          {"canonical", f.canonical.string()},
          {"size", f.size},
          {"mtime_ns", f.mtime_ns},
          {"cpu_id", cpu_id()}};
}

std::optional<Queried> load_queried(const std::filesystem::path& file, const BinaryFacts& f) {
  struct stat st;
  // Only a plain file of ours that nobody else can rewrite is trusted.
  if (::lstat(file.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid() ||
      (st.st_mode & 022))
    return std::nullopt;
  std::ifstream in(file, std::ios::binary);
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return std::nullopt;
  const nlohmann::json facts = facts_json(f);  // named: items() must not outlive a temporary
  for (const auto& [k, v] : facts.items())
    if (!j.contains(k) || j[k] != v) return std::nullopt;
  if (!j.contains("version_output") || !j["version_output"].is_string() ||
      !j.contains("resolved_target") || !j["resolved_target"].is_string())
    return std::nullopt;
  Queried q{j["version_output"].get<std::string>(), j["resolved_target"].get<std::string>(), {}};
  if (j.contains("target_by_flags") && j["target_by_flags"].is_object())
    for (const auto& [flags, id] : j["target_by_flags"].items()) {
      CpuTarget parsed;
      if (id.is_string() && parse_cpu_target(id.get<std::string>(), parsed))
        q.target_by_flags[flags] = id.get<std::string>();
    }
  return q;
}

void save_queried(const std::filesystem::path& cache_dir, const std::string& name,
                  const BinaryFacts& f, const Queried& q) {
  try {
    CacheStore store(cache_dir);
    std::filesystem::path dir = store.private_dir("toolchains");
    nlohmann::json j = facts_json(f);
    j["version_output"] = q.version_output;
    j["resolved_target"] = q.resolved_target;
    j["target_by_flags"] = q.target_by_flags;
    write_file_atomically(dir / name, j.dump(2) + "\n");
  } catch (const std::exception& e) {
    // Not fatal: the next process asks the compiler again.
    log_message(LogLevel::Debug, std::string("not remembering the toolchain: ") + e.what());
  }
}

std::string describe_failure(const CompileOutcome& r) {
  std::string why = r.failed_to_start ? "could not be started"
                    : r.timed_out     ? "timed out"
                                      : "exited with status " + std::to_string(r.exit_code);
  std::string line = first_line(r.output);
  return why + (line.empty() ? "" : ": " + line);
}

BinaryFacts locate_compiler(const std::string& cxx) {
  const char* env = std::getenv("METAJIT_CXX");
  std::string origin = env && *env ? " (METAJIT_CXX)" : "";
  const std::string hint = "; install a C++17 compiler (g++) or set METAJIT_CXX to one";
  BinaryFacts f;
  if (cxx.empty()) throw CompileError("compiler name is empty" + origin + hint);
  if (cxx.find('/') != std::string::npos) {
    std::error_code ec;
    f.path = std::filesystem::absolute(cxx, ec);
    if (ec) f.path = cxx;
    struct stat st;
    if (::stat(f.path.c_str(), &st) != 0)
      throw CompileError(
          "compiler '" + cxx + "'" + origin + " not found: " + std::strerror(errno) + hint, cxx);
    if (!S_ISREG(st.st_mode) || ::access(f.path.c_str(), X_OK) != 0)
      throw CompileError("compiler '" + cxx + "'" + origin + " is not an executable file" + hint,
                         cxx);
  } else {
    boost::filesystem::path found = boost::process::search_path(cxx);
    if (found.empty())
      throw CompileError("compiler '" + cxx + "'" + origin + " not found on PATH" + hint, cxx);
    f.path = found.string();
  }
  struct stat st;
  if (::stat(f.path.c_str(), &st) != 0)
    throw CompileError(
        "compiler '" + f.path.string() + "' cannot be examined: " + std::strerror(errno), cxx);
  f.size = uint64_t(st.st_size);
  f.mtime_ns = int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  std::error_code ec;
  f.canonical = std::filesystem::canonical(f.path, ec);
  if (ec) f.canonical = f.path;
  return f;
}

// The flags every kernel compile gets, before the ones that depend on the compiler.
std::vector<std::string> base_kernel_flags() {
  // -fno-math-errno lets loops call the SIMD variants of exp/log/sin/... (libmvec); unlike
  // -ffast-math it changes no result, NaN and Inf included: only errno is no longer set. (It
  // does let g++ fold cos(atan(x)) into a sqrt that loses NaN: the prelude hides atan from that,
  // codegen/cpp_kernel_prelude.h.)
  // -fwrapv: signed integer arithmetic wraps, as docs/design.md §3 defines it, in index
  // expressions and offsets too, not only in the values the emitter already computes unsigned.
  // Measured free (matmul 1024^3, conv2d 3x3, transpose, padding reindex, max_pool, softmax on
  // AVX2), where casting index arithmetic through u64 made matmul 4x slower: GCC still proves
  // the loops' affine accesses with -fwrapv.
  // -fno-exceptions: kernels neither throw nor catch, and without it a contraction kernel
  // references libstdc++'s personality routine.
  // -pipe: the compiler hands its assembly to the assembler through a pipe, not a file in
  // /tmp: an element-wise kernel's compile and link 58 -> 52 ms, a matmul's 559 -> 538 ms
  // (medians of 25 interleaved runs, g++ 12, 2026-11-30).
  // -fno-trapping-math: no kernel reads the floating-point exception flags, so g++ may
  // evaluate a floating-point operation under a guard in every lane and select: a float16 read
  // under a convolution's padding test widens through a multiply (a subnormal's value,
  // codegen/cpp_narrow_prelude.h mj_f16_to_float), which with trapping math kept the whole
  // packing loop scalar. Values are unchanged (rounding stays to nearest: no -frounding-math
  // change, no reassociation).
  return {"-std=c++17",      "-O3",     "-march=native",       "-fPIC",
          "-shared",         "-fopenmp", "-fno-math-errno",    "-fno-trapping-math",
          "-fwrapv",         "-fno-exceptions", "-pipe"};
}

// The kernel flags for a compiler whose --version says `version_output`, resolving
// -march=native to `resolved_target`, with METAJIT_CXXFLAGS (`extra`) last.
std::vector<std::string> kernel_flags(const std::string& version_output,
                                      const std::string& resolved_target,
                                      const std::vector<std::string>& extra) {
  std::vector<std::string> flags = base_kernel_flags();
  // GCC's tree-sink pass moves the exp of `where(x > 0, x, exp(x) - 1)` into the branch that
  // uses it; the loop then has control flow and is not vectorised, and every element calls
  // scalar expf (SELU 16M on AVX2: 56 ms with sinking, 7 ms without, measured). Without the
  // pass, both sides are computed and selected: every select over a transcendental stays
  // one vector loop calling libmvec. Clang has no such pass (and no such flag).
  if (version_output.find("clang") == std::string::npos) flags.push_back("-fno-tree-sink");
  // g++ links every shared object against libstdc++, which kernels do not use: ld reading
  // its symbol table was half of an element-wise kernel's link (27 -> 13 ms of CPU, measured
  // on the ~70 ms of a cold compile). GCC only: the libraries named instead (link_libraries)
  // are GCC's defaults for C; libgomp still comes with -fopenmp.
  if (version_output.find("clang") == std::string::npos) flags.push_back("-nodefaultlibs");
  // GCC prefers 256-bit vectors even where 512-bit ones exist; kernels are loops over large
  // arrays, where the wider vectors win.
  if (resolved_target.find("-mavx512f") != std::string::npos)
    flags.push_back("-mprefer-vector-width=512");
  flags.insert(flags.end(), extra.begin(), extra.end());
  return flags;
}

// What the compiler at `f` says of itself (--version) and of -march=native; throws
// CompileError where it does not run.
Queried query_compiler(const BinaryFacts& f, const Config& c) {
  Queried q;
  CompileOutcome v = run_compiler({f.path.string(), "--version"}, kQueryTimeoutSeconds);
  if (!v.ok)
    throw CompileError(
        "compiler '" + c.cxx + "' does not work: `" + v.command + "` " + describe_failure(v),
        v.command, v.output);
  q.version_output = v.output;
  CompileOutcome target = run_compiler(
      {f.path.string(), "-march=native", "-E", "-v", "-x", "c++", "/dev/null", "-o", "/dev/null"},
      kQueryTimeoutSeconds);
  q.resolved_target = target.ok ? parse_resolved_target(target.output) : "";
  if (q.resolved_target.empty()) {
    // Still keyed to this CPU, so kernels built here are never reused on another one.
    q.resolved_target = "unresolved-native cpu=" + cpu_id();
    log_message(LogLevel::Debug, "could not tell what -march=native means for " + f.path.string() +
                                     "; keying kernels by the CPU id");
  }
  return q;
}

// The ISA the kernels' schedules are written for: what the compiler predefines with the whole
// flag list, METAJIT_CXXFLAGS included (cpu_target.h). Throws CompileError where the compiler
// rejects the flags.
std::string target_of_flags(const BinaryFacts& f, const Config& c,
                            const std::vector<std::string>& flags) {
  std::vector<std::string> argv = {f.path.string()};
  for (const std::string& flag : flags)
    if (flag != "-shared") argv.push_back(flag);
  for (const char* a : {"-dM", "-E", "-x", "c++", "/dev/null"}) argv.push_back(a);
  CompileOutcome macros = run_compiler(argv, kQueryTimeoutSeconds);
  if (!macros.ok)
    throw CompileError("compiler '" + c.cxx + "' rejects the kernel flags: `" + macros.command +
                           "` " + describe_failure(macros),
                       macros.command, macros.output);
  return cpu_target_from_macros(macros.output).id();
}

// The toolchain of setting `c`: the compiler's facts, its kernel flags and ISA, queried once
// per compiler binary and flag list and remembered in the cache (load_queried / save_queried).
Toolchain resolve(const Config& c) {
  Toolchain t;
  t.compiler = c.cxx;
  BinaryFacts f = locate_compiler(c.cxx);
  t.path = f.path;
  t.binary_size = f.size;
  t.binary_mtime = f.mtime_ns;
  const std::string name = facts_digest(f) + ".json";
  const std::filesystem::path file = c.cache_dir / "v1" / "toolchains" / name;
  std::optional<Queried> q = load_queried(file, f);
  if (!q) {
    q = query_compiler(f, c);
    save_queried(c.cache_dir, name, f, *q);
  }
  const std::vector<std::string> flags =
      kernel_flags(q->version_output, q->resolved_target, c.extra_cxxflags);
  std::string joined;
  for (const std::string& flag : flags) joined += (joined.empty() ? "" : " ") + flag;
  if (!q->target_by_flags.count(joined)) {
    q->target_by_flags[joined] = target_of_flags(f, c, flags);
    save_queried(c.cache_dir, name, f, *q);
  }
  t.version_output = q->version_output;
  t.resolved_target = q->resolved_target;
  parse_cpu_target(q->target_by_flags[joined], t.target);
  t.flags = flags;
  t.link_libraries = {"-lmvec"};  // glibc's vector math
  if (std::find(flags.begin(), flags.end(), "-nodefaultlibs") != flags.end())
    t.link_libraries.insert(t.link_libraries.end(), {"-lm", "-lc", "-lgcc"});
  return t;
}

struct Resolved {
  std::mutex mu;
  // Never freed: callers keep references across reload_config().
  std::map<std::string, std::unique_ptr<Toolchain>> by_setting;
};

}  // namespace

std::string first_line(const std::string& text) {
  size_t start = text.find_first_not_of("\r\n \t");
  if (start == std::string::npos) return "";
  size_t end = text.find_first_of("\r\n", start);
  return text.substr(start, end == std::string::npos ? std::string::npos : end - start);
}

std::string Toolchain::binary_identity() const {
  std::string out;
  append_field(out, "compiler", compiler);
  append_field(out, "path", path.string());
  append_field(out, "version", version_output);
  append_field(out, "size", std::to_string(binary_size));
  append_field(out, "mtime", std::to_string(binary_mtime));
  return out;
}

std::string Toolchain::identity() const {
  std::string out = binary_identity();
  append_field(out, "target", resolved_target);
  append_field(out, "isa", target.id());
  std::string joined;
  for (const std::string& f : flags) append_field(joined, "flag", f);
  append_field(out, "flags", joined);
  std::string libs;
  for (const std::string& l : link_libraries) append_field(libs, "lib", l);
  append_field(out, "libs", libs);
  return out;
}

std::string Toolchain::version_line() const {
  return first_line(version_output);
}

std::vector<std::string> Toolchain::compile_command(const std::filesystem::path& source,
                                                    const std::filesystem::path& output) const {
  std::vector<std::string> cmd;
  cmd.reserve(flags.size() + 4);
  cmd.push_back(path.string());
  cmd.insert(cmd.end(), flags.begin(), flags.end());
  cmd.push_back(source.string());
  cmd.push_back("-o");
  cmd.push_back(output.string());
  // After the source: they resolve its calls.
  cmd.insert(cmd.end(), link_libraries.begin(), link_libraries.end());
  return cmd;
}

const Toolchain& host_toolchain() {
  static Resolved* resolved = new Resolved;
  const Config& c = config();
  std::string setting;
  append_field(setting, "cxx", c.cxx);
  for (const std::string& f : c.extra_cxxflags) append_field(setting, "flag", f);
  std::lock_guard<std::mutex> lock(resolved->mu);
  auto it = resolved->by_setting.find(setting);
  if (it != resolved->by_setting.end()) return *it->second;
  auto t = std::make_unique<Toolchain>(resolve(c));  // throws: nothing remembered, retried
  return *resolved->by_setting.emplace(setting, std::move(t)).first->second;
}

}  // namespace metajit
