#include "runtime/kernel_library.h"

#include <metajit/error.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <unordered_map>

#include "base/checksum.h"
#include "base/config.h"
#include "base/log.h"
#include "cache/cache_store.h"
#include "cache/manifest.h"
#include "codegen/cpp_emitter.h"
#include "codegen/cuda_emitter.h"
#include "codegen/cuda_emulation.h"
#include "codegen/kernel_key.h"
#include "codegen/kernel_spec.h"
#include "remote_cache/remote_store.h"
#include "runtime/compiler_driver.h"
#include "runtime/cuda_toolchain.h"
#include "runtime/loader.h"
#include "runtime/miss_cause.h"
#include "runtime/portable_toolchain.h"
#include "runtime/runtime_stats.h"
#include "runtime/toolchain.h"

namespace metajit {
namespace {

namespace fs = std::filesystem;

// Below this much free space the cache counts as full: a compile there would fail half-way.
constexpr uint64_t kMinFreeBytes = uint64_t(8) << 20;

struct MemoryTable {
  std::mutex mu;
  std::unordered_map<std::string, KernelHandle> by_ir;  // canonical IR text -> kernel
};
MemoryTable& table() {
  static MemoryTable* t = new MemoryTable;  // never destroyed: kernels may run during exit
  return *t;
}

// Memory hits are counted in the persistent statistics too, but writing stats.json on every
// evaluation would cost more than the evaluation: they are added with the next batch of disk
// work, or at exit.
std::atomic<uint64_t> unflushed_memory_hits{0};

// Adds what the remote counters (remote_store.h) gained since the last call to `delta`: they
// go to the cache's statistics with the batch that made them, uploads (a background thread's)
// with a later one or at exit.
void take_remote_counts(CacheCounters& delta) {
  static std::mutex mu;
  static uint64_t seen[6] = {0, 0, 0, 0, 0, 0};
  RemoteCounters& r = remote_counters();
  const uint64_t now[6] = {r.hits.load(),   r.misses.load(),   r.rejected.load(),
                           r.errors.load(), r.timeouts.load(), r.uploads.load()};
  uint64_t CacheCounters::*fields[6] = {
      &CacheCounters::remote_hits,     &CacheCounters::remote_misses,
      &CacheCounters::remote_rejected, &CacheCounters::remote_errors,
      &CacheCounters::remote_timeouts, &CacheCounters::remote_uploads};
  std::lock_guard<std::mutex> lock(mu);
  for (int i = 0; i < 6; ++i) {
    delta.*fields[i] += now[i] - seen[i];
    seen[i] = now[i];
  }
}

void flush_memory_hits() {
  uint64_t n = unflushed_memory_hits.exchange(0);
  CacheCounters delta;
  take_remote_counts(delta);
  if (!n && !delta.remote_uploads && !delta.remote_errors) return;
  delta.memory_hits = n;
  try {
    CacheStore(config().cache_dir).add_counters(delta);
  } catch (...) {
    // At exit nothing may throw; statistics are not worth failing for.
  }
}

void flush_memory_hits_at_exit() {
  static std::once_flag once;
  std::call_once(once, [] { std::atexit(flush_memory_hits); });
}

// A private cache used when the configured one cannot be written (read-only, full, foreign):
// the program keeps running, kernels are compiled into a temporary directory removed at exit.
CacheStore& fallback_store() {
  static CacheStore* store = [] {
    std::string tmpl = (fs::temp_directory_path() / "metajit-private-XXXXXX").string();
    char* dir = mkdtemp(tmpl.data());
    if (!dir) throw CacheError("cannot create a private temporary kernel cache under " + tmpl);
    static fs::path root = dir;
    std::atexit([] {
      std::error_code ec;
      fs::remove_all(root, ec);
    });
    return new CacheStore(root);
  }();
  return *store;
}

// False when the cache cannot be written or its file system has less than kMinFreeBytes
// available.
bool has_room(const CacheStore& store, std::string& why) {
  // A read-only or unwritable root has no free bytes to report: say what it is (issue 26: a
  // read-only mount was reported as "full (0 bytes free)").
  if (std::optional<std::string> reason = store.unwritable_reason()) {
    why = "cache: " + store.root().string() + " cannot be written: " + *reason;
    return false;
  }
  struct statvfs vfs;
  fs::path probe = store.root();
  while (!probe.empty() && ::statvfs(probe.c_str(), &vfs) != 0) {
    if (probe == probe.parent_path()) return true;
    probe = probe.parent_path();
  }
  if (probe.empty()) return true;
  uint64_t avail = uint64_t(vfs.f_bavail) * uint64_t(vfs.f_frsize);
  if (avail >= kMinFreeBytes) return true;
  why = "cache: " + store.root().string() + " is full (" + std::to_string(avail) + " bytes free)";
  return false;
}

// METAJIT_RECORD=FILE: the manifest of every kernel this process used, rewritten (atomically)
// each time a kernel is used for the first time, so a crash later still leaves a manifest.
class KernelRecorder {
 public:
  void record(const std::string& key, const KernelIR& ir, const char* backend) {
    const std::string& path = config().record_path;
    if (path.empty()) return;
    std::lock_guard<std::mutex> lock(mu_);
    if (!keys_.insert(key).second) return;
    entries_.push_back({key, backend, ir.ops, kernel_spec_to_json(ir)});
    try {
      write_manifest(path, entries_);
    } catch (const std::exception& e) {
      warn_once("record:" + path, std::string("METAJIT_RECORD: ") + e.what());
    }
  }

 private:
  std::mutex mu_;
  std::set<std::string> keys_;
  std::vector<ManifestEntry> entries_;
};
KernelRecorder& recorder() {
  static KernelRecorder* r = new KernelRecorder;
  return *r;
}

// Leftovers of dead processes (staging directories, lock files, temp files) go the first time a
// process reaches the disk cache: a few directory reads, once.
void sweep_once(CacheStore& store) {
  static std::once_flag once;
  std::call_once(once, [&store] {
    try {
      store.sweep_stale_staging();
    } catch (const std::exception&) {
      // A cache we cannot clean is reported where it is used.
    }
  });
}

// What differs between the C++ and the CUDA path through the cache: the source the emitter
// writes, the compiler that builds it and the identity that goes into the key.
struct Backend {
  std::string name;         // "cpu" | "cuda" | "cuda-emu" (the key's backend field)
  std::string identity;     // the toolchain's, hashed into every key
  std::string source_file;  // kernel.cc | kernel.cu
  std::function<std::string(const KernelIR&)> emit;
  std::function<std::vector<std::string>(const fs::path&, const fs::path&)> command;
  nlohmann::json meta;  // compiler, compiler_version, target, flags: recorded in meta.json
  KeyParts parts;       // what the key is made of besides the IR (key left empty)
  // The toolchain identity of remote keys (portable_toolchain.h): hashes the compiler's
  // binaries, so it is computed only when a remote cache is in use.
  std::function<std::string()> portable;
};

// A kernel's key in the remote cache: the local key's fields with the portable identity.
std::string remote_key_of(const Backend& b, const std::string& ir_text,
                          const std::string& portable) {
  return kernel_key(b.name, ir_text, "portable\n" + portable);
}

std::string emit_cuda_for_gpu(const KernelIR& ir) {
  return emit_cuda(ir, CudaTarget::Gpu);
}
std::string emit_cuda_for_emulation(const KernelIR& ir) {
  return emit_cuda(ir, CudaTarget::HostEmulation);
}

// The backend of `device` for the current config (resolving its toolchain: CompileError when
// the compiler is missing).
Backend backend_for(Device device) {
  Backend b;
  if (device == Device::CPU) {
    const Toolchain& tc = host_toolchain();
    b.name = "cpu";
    b.identity = tc.identity();
    b.source_file = "kernel.cc";
    b.emit = [&tc](const KernelIR& ir) { return emit_cpp(ir, tc.target); };
    b.command = [&tc](const fs::path& src, const fs::path& so) {
      return tc.compile_command(src, so);
    };
    b.meta = {{"compiler", tc.path.string()},
              {"compiler_version", tc.version_line()},
              {"target", tc.resolved_target},
              {"isa", tc.target.name()},
              {"flags", tc.flags}};
    b.parts.backend = b.name;
    b.parts.codegen = kCodegenVersion;
    b.parts.compiler = tc.path.string();
    b.parts.compiler_version = tc.version_line();
    b.parts.compiler_id = xxh3_128_hex(tc.binary_identity());
    b.parts.target = tc.resolved_target;
    b.parts.isa = tc.target.name();
    b.parts.flags = tc.flags;
    b.portable = [&tc] { return portable_identity(tc); };
    return b;
  }
  const CudaToolchain& tc = cuda_toolchain();
  b.name = tc.backend();
  b.identity = tc.identity();
  b.source_file = "kernel.cu";
  b.emit = tc.emulated ? emit_cuda_for_emulation : emit_cuda_for_gpu;
  b.command = [&tc](const fs::path& src, const fs::path& so) {
    return tc.compile_command(src, so);
  };
  b.meta = {{"compiler", tc.path.string()},
            {"compiler_version", tc.version_line()},
            {"target", tc.emulated ? "host emulation" : tc.arch},
            {"flags", tc.flags}};
  b.parts.backend = b.name;
  b.parts.codegen = std::string(kCodegenVersion) + " " + kCudaCodegenVersion;
  if (tc.emulated)  // the prelude is part of the code the kernels are compiled with
    b.parts.codegen += " emulation-" + xxh3_128_hex(kCudaEmulationPrelude).substr(0, 8);
  b.parts.compiler = tc.path.string();
  b.parts.compiler_version = tc.version_line();
  b.parts.compiler_id = xxh3_128_hex(tc.binary_identity());
  b.parts.target = tc.emulated ? "host emulation" : tc.arch;
  b.parts.flags = tc.flags;
  b.portable = [&tc] { return portable_identity(tc); };
  return b;
}

// The settings that choose `device`'s toolchain, cheap to compute: part of the memory table's
// key, because reload_config() may change them.
std::string memory_settings(Device device) {
  const Config& c = config();
  std::string s = device == Device::CPU
                      ? "cpu " + c.cxx
                      : "cuda " + c.nvcc + " " + c.cuda_arch + (c.cuda_emulate ? " emu" : "");
  for (const std::string& f : device == Device::CPU ? c.extra_cxxflags : c.extra_nvccflags)
    s += " " + f;
  return s + "\n";
}

struct Pending {
  std::string key;
  std::string ir_text;      // serialize_ir(*ir)
  std::string remote_key;   // set when a remote cache is in use
  std::string lease_token;  // the fleet-wide lease on compiling it, when this process holds it
  std::string ir_digest;    // the kernel-IR index's name for it (miss_cause.h)
  const KernelIR* ir = nullptr;
  std::vector<size_t> positions;  // where in the request this kernel is needed
  CacheStore* store = nullptr;
  fs::path staging;
  std::vector<std::string> command;
  CacheKeyLock lock;  // held from the re-check after a miss until the entry is installed
  fs::path source;    // the staged source file
  fs::path object;    // the installed (or staged) kernel.so once built
  double compile_seconds = 0;
  MissExplanation why;  // a miss: why it compiles
};

void write_source(const fs::path& dir, const std::string& file, const std::string& src) {
  fs::path path = dir / file;
  std::ofstream f(path, std::ios::binary);
  f << src;
  f.close();
  if (!f) throw CacheError("cache: cannot write " + path.string());
}

// Puts `p`'s source into a staging directory of `store`, or of the private fallback cache when
// `store` cannot be written or is full (one warning per process).
void stage(Pending& p, CacheStore& store, const Backend& backend) {
  const std::string src = backend.emit(*p.ir);
  if (log_enabled(LogLevel::Debug))
    log_message(LogLevel::Debug, "source of " + p.key + ":\n" + src);
  p.store = &store;
  try {
    std::string why;
    if (!has_room(store, why)) throw CacheError(why);
    p.staging = store.make_staging_dir();
    write_source(p.staging, backend.source_file, src);
  } catch (const CacheError& e) {
    if (!p.staging.empty()) store.discard(p.staging);
    warn_once(
        "cache-unwritable:" + store.root().string(),
        std::string(e.what()) + "; kernels go to a private temporary directory for this process");
    p.store = &fallback_store();
    p.staging = p.store->make_staging_dir();
    write_source(p.staging, backend.source_file, src);
  }
  p.source = p.staging / backend.source_file;
  p.command = backend.command(p.source, p.staging / "kernel.so");
}

// What every meta.json of `backend` records about `p`, however the entry was made.
nlohmann::json entry_meta(const Pending& p, const Backend& backend) {
  nlohmann::json meta = backend.meta;
  meta["backend"] = backend.name;
  meta["source_file"] = backend.source_file;
  meta["ops"] = p.ir->ops;
  meta["spec"] = kernel_spec_to_json(*p.ir);
  // The key's parts apart (compiler, flags, target above): what `cache stats` and a later
  // miss of the same IR compare.
  meta["ir_digest"] = p.ir_digest;
  meta["codegen"] = backend.parts.codegen;
  meta["compiler_id"] = backend.parts.compiler_id;
  return meta;
}

CompileError compile_failure(const Pending& p, const CompileOutcome& r) {
  std::string why = r.failed_to_start ? "could not be started"
                    : r.timed_out     ? "timed out after " +
                                        std::to_string(int(config().compile_timeout_seconds)) +
                                        " s and was killed"
                                  : "failed with exit status " + std::to_string(r.exit_code);
  std::string out_text = r.output.size() > 4000 ? r.output.substr(0, 4000) + "\n[...]" : r.output;
  return CompileError("compiling kernel " + p.key + ": the compiler " + why +
                          "\n  command: " + r.command + "\n  source kept at: " + p.source.string() +
                          (out_text.empty() ? "" : "\n" + out_text),
                      r.command, r.output, p.source.string());
}

// Points the kernel-IR index at `p`'s new entry. Only a hint: a cache that cannot take it
// loses the explanation of a later miss, nothing else.
void record_parts(CacheStore& store, const Pending& p, const Backend& backend) {
  KeyParts parts = backend.parts;
  parts.key = p.key;
  try {
    store.write_ir_record(p.ir_digest, key_parts_to_json(parts));
  } catch (const std::exception& e) {
    log_message(LogLevel::Debug, "not indexing " + p.key + ": " + e.what());
  }
}

// Why `p` misses: the kernel-IR index's record of the same IR against the current parts.
MissExplanation explain(const CacheStore& store, const Pending& p, const Backend& backend) {
  KeyParts now = backend.parts;
  now.key = p.key;
  std::optional<KeyParts> before;
  if (std::optional<nlohmann::json> record = store.read_ir_record(p.ir_digest))
    before = key_parts_from_json(*record);
  if (before && before->backend != now.backend) before.reset();
  return explain_miss(before ? &*before : nullptr, now);
}

// One info line per cause of the misses of one batch (an evaluation, a warm): after a compiler
// upgrade "27 kernels compiled again: the compiler changed (...)", not 27 lines. New kernels
// say nothing here (the debug log has each miss).
void log_miss_causes(const std::vector<Pending*>& missed) {
  if (!log_enabled(LogLevel::Info)) return;
  std::vector<std::pair<std::string, uint64_t>> counts;  // by reason, first seen first
  for (const Pending* p : missed) {
    if (p->why.cause == MissCause::New) continue;
    auto it = std::find_if(counts.begin(), counts.end(),
                           [p](const auto& c) { return c.first == p->why.reason; });
    if (it == counts.end())
      counts.emplace_back(p->why.reason, 1);
    else
      it->second++;
  }
  for (const auto& [reason, n] : counts) log_message(LogLevel::Info, recompile_summary(n, reason));
}

// What is wrong with a compiler's output that cannot be a shared object (missing, empty, not
// ELF), or nullopt: such output is the compiler's failure, a CompileError, not a loader Error
// later (issue 26: a compiler writing an empty kernel.so gave a plain Error).
std::optional<std::string> unloadable_output(const fs::path& so) {
  std::error_code ec;
  if (!fs::is_regular_file(so, ec)) return "wrote no " + so.filename().string();
  const uintmax_t size = fs::file_size(so, ec);
  if (ec || size == 0) return "wrote an empty " + so.filename().string();
  char magic[4] = {};
  std::ifstream in(so, std::ios::binary);
  in.read(magic, sizeof magic);
  if (!in || magic[0] != 0x7f || magic[1] != 'E' || magic[2] != 'L' || magic[3] != 'F')
    return "wrote " + so.filename().string() + " (" + std::to_string(size) +
           " bytes), which is not an ELF shared object";
  return std::nullopt;
}

// Compiles every staged kernel of `todo` in parallel and installs the good ones; sets each
// one's `object` (empty where its compile failed). Returns the first failure, if any. Failed
// kernels keep their staging directory (with the source) for inspection.
std::optional<CompileError> compile_and_install(std::vector<Pending*>& todo,
                                                const CacheStore& main_store,
                                                const Backend& backend, int jobs,
                                                bool always_show_progress, CacheCounters& delta) {
  std::vector<std::vector<std::string>> commands;
  for (Pending* p : todo) commands.push_back(p->command);
  std::vector<CompileOutcome> results =
      run_compilers(commands, jobs, config().compile_timeout_seconds, always_show_progress);
  std::optional<CompileError> failure;
  RuntimeCounters& counters = runtime_counters();
  for (size_t k = 0; k < todo.size(); ++k) {
    Pending& p = *todo[k];
    const CompileOutcome& r = results[k];
    if (!r.ok) {
      delta.errors++;
      if (!failure) failure = compile_failure(p, r);
      p.lock.release();
      continue;
    }
    if (std::optional<std::string> bad = unloadable_output(p.staging / "kernel.so")) {
      delta.errors++;
      if (!failure)
        failure = CompileError("compiling kernel " + p.key + ": the compiler exited 0 but " + *bad +
                                   "\n  command: " + r.command +
                                   "\n  source kept at: " + p.source.string(),
                               r.command, r.output, p.source.string());
      p.lock.release();
      continue;
    }
    nlohmann::json meta = entry_meta(p, backend);
    meta["compile_command"] = p.command;
    meta["compile_seconds"] = r.seconds;
    uint64_t bytes = 0;
    bool installed = false;
    try {
      p.object = p.store->install(p.key, p.staging, std::move(meta), &bytes);
      installed = true;
    } catch (const CacheError& e) {
      // A cache that fails at the last step must not stop the program: run the staged copy.
      warn_once("cache-unwritable:" + p.store->root().string(),
                std::string(e.what()) + "; running kernels from their staging directory");
      p.object = p.staging / "kernel.so";
    }
    p.lock.release();  // installed: waiters find the entry
    if (installed && p.store == &main_store) record_parts(*p.store, p, backend);
    p.compile_seconds = r.seconds;
    counters.kernels_compiled++;
    counters.compile_micros += uint64_t(r.seconds * 1e6);
    delta.compiles++;
    delta.compile_seconds += r.seconds;
    if (p.store == &main_store) delta.bytes += int64_t(bytes);  // `delta` is main_store's
    log_message(LogLevel::Info, "compiled " + p.key + " in " + std::to_string(r.seconds) + " s");
  }
  return failure;
}

// One Pending per distinct key among `irs[i]` for i in `which` (texts[i] = serialize_ir), in key
// order: locks are taken in key order, so processes needing overlapping sets never deadlock.
std::vector<Pending> group_by_key(const std::vector<const KernelIR*>& irs,
                                  const std::vector<std::string>& texts,
                                  const std::vector<size_t>& which, const Backend& backend) {
  std::vector<Pending> pending;
  std::unordered_map<std::string, size_t> by_key;
  for (size_t i : which) {
    std::string key = kernel_key(backend.name, texts[i], backend.identity);
    auto [it, fresh] = by_key.emplace(key, pending.size());
    if (fresh) {
      Pending p;
      p.key = key;
      p.ir_digest = ir_digest(backend.name, texts[i]);
      p.ir = irs[i];
      p.ir_text = texts[i];
      pending.push_back(std::move(p));
    }
    pending[it->second].positions.push_back(i);
  }
  std::sort(pending.begin(), pending.end(),
            [](const Pending& a, const Pending& b) { return a.key < b.key; });
  return pending;
}

// Looks `p` up on disk; on a miss waits for the key's lock (another process may be compiling
// it) and looks again. Returns the verified kernel.so, or nullopt with the lock held.
std::optional<fs::path> find_or_lock(CacheStore& store, Pending& p) {
  std::optional<fs::path> so = store.find(p.key);
  if (so) return so;
  try {
    p.lock = store.lock_key(p.key);
  } catch (const CacheError&) {
    // An unusable cache cannot be shared anyway; the compile falls back.
  }
  so = store.find(p.key);
  if (so) p.lock.release();
  return so;
}

// The remote cache when one is configured and this process may read or write it.
RemoteStore* usable_remote() {
  RemoteStore* remote = RemoteStore::current();
  return remote && (remote->readable() || remote->writable()) ? remote : nullptr;
}

// The portable identity of `backend` (computed once per batch: it hashes compiler binaries);
// "" when it cannot be had, which keeps the remote out of this batch.
std::string portable_of(const Backend& backend) {
  try {
    return backend.portable();
  } catch (const std::exception& e) {
    warn_once("remote-identity", std::string("remote cache: cannot identify the toolchain (") +
                                     e.what() + "); kernels are not shared");
    return "";
  }
}

// Installs the verified remote entry `env` of `p` (its local lock held) in `store` under the
// local key with the local cache's staging, rename and checksums; returns its kernel.so.
std::optional<fs::path> install_envelope(RemoteStore& remote, CacheStore& store, Pending& p,
                                         const Backend& backend, const OpenedEnvelope& env,
                                         CacheCounters& delta) {
  // The signer vouches for its binary; the source must also be what this machine's code
  // generator writes for the kernel, or the entry describes some other kernel.
  const std::string src = backend.emit(*p.ir);
  const EnvelopeFile *so_file = nullptr, *src_file = nullptr;
  for (const EnvelopeFile& f : env.files) {
    if (f.name == "kernel.so") so_file = &f;
    if (f.name == backend.source_file) src_file = &f;
  }
  if (!so_file || !src_file || src_file->bytes != src) {
    remote.reject(p.remote_key, "its source is not what this machine generates for the kernel");
    return std::nullopt;
  }
  fs::path staging;
  try {
    std::string room;
    if (!has_room(store, room)) throw CacheError(room);
    staging = store.make_staging_dir();
    write_source(staging, backend.source_file, src);
    write_source(staging, "kernel.so", so_file->bytes);
    nlohmann::json meta = entry_meta(p, backend);
    meta["origin"] = "remote";
    meta["remote_key"] = p.remote_key;
    meta["remote_signer"] = env.signer;
    if (env.header.contains("producer")) meta["remote_producer"] = env.header["producer"];
    if (env.header.contains("compile_seconds") && env.header["compile_seconds"].is_number())
      meta["compile_seconds"] = env.header["compile_seconds"];
    uint64_t bytes = 0;
    fs::path so = store.install(p.key, staging, std::move(meta), &bytes);
    delta.bytes += int64_t(bytes);
    record_parts(store, p, backend);
    remote_counters().hits++;
    log_message(LogLevel::Info,
                "remote hit " + p.key + " (remote key " + p.remote_key +
                    (env.signer.empty() ? ", unsigned" : ", signed by " + env.signer) + ")");
    return so;
  } catch (const CacheError& e) {
    // A local cache that cannot take the entry: compile as if the remote had missed.
    if (!staging.empty()) store.discard(staging);
    log_message(LogLevel::Debug, "not installing remote " + p.remote_key + ": " + e.what());
    return std::nullopt;
  }
}

// Looks `p` (its local lock held) up in the remote cache: a verified hit is installed
// (install_envelope) and its kernel.so returned. On a miss a writer takes the fleet-wide lease
// on compiling it; `leased_by_other` says another machine holds that lease, and the caller
// waits for that machine's upload later (wait_and_install), once its own kernels are built. An
// entry uploaded between the lookup and the lease (Claim::Arrived) is fetched again at once.
std::optional<fs::path> install_from_remote(RemoteStore& remote, CacheStore& store, Pending& p,
                                            const Backend& backend, CacheCounters& delta,
                                            bool& leased_by_other) {
  OpenedEnvelope env;
  std::string why;
  using Lookup = RemoteStore::Lookup;
  using Claim = RemoteStore::Claim;
  leased_by_other = false;
  Lookup found = remote.readable() ? remote.fetch(p.remote_key, env, why) : Lookup::Miss;
  if (found == Lookup::Miss) {
    const Claim claim = remote.claim(p.remote_key, p.lease_token);
    leased_by_other = claim == Claim::Others;
    if (claim == Claim::Arrived) found = remote.fetch(p.remote_key, env, why);
  }
  if (found != Lookup::Hit) return std::nullopt;
  return install_envelope(remote, store, p, backend, env, delta);
}

// Waits (bounded) for the entry of `p` that another machine holds the lease on, and installs it.
std::optional<fs::path> wait_and_install(RemoteStore& remote, CacheStore& store, Pending& p,
                                         const Backend& backend, CacheCounters& delta) {
  OpenedEnvelope env;
  std::string why;
  if (remote.wait_for_entry(p.remote_key, env, why) != RemoteStore::Lookup::Hit)
    return std::nullopt;
  return install_envelope(remote, store, p, backend, env, delta);
}

// The envelope's contents for the entry whose kernel.so is `object`.
UploadJob upload_job(const Pending& p, const fs::path& object, const Backend& backend,
                     const std::string& portable) {
  UploadJob job;
  job.remote_key = p.remote_key;
  job.lease_token = p.lease_token;
  job.info = {{"backend", backend.name},
              {"toolchain", xxh3_128_hex(portable)},
              {"producer", remote_producer()},
              {"ops", p.ir->ops},
              {"compile_seconds", p.compile_seconds}};
  for (const std::string& name : {backend.source_file, std::string("kernel.so")}) {
    std::ifstream in(object.parent_path() / name, std::ios::binary);
    if (!in) throw CacheError("cannot read " + (object.parent_path() / name).string());
    job.files.push_back({name, std::string((std::istreambuf_iterator<char>(in)),
                                           std::istreambuf_iterator<char>())});
  }
  return job;
}

// The sequence obtain_kernels and warm_kernels share: sweep the cache once per process, find
// each key in it or lock and stage it (`use_cached(p, so)` takes a found entry; false: not
// usable, build it again), compile and install the missing ones in parallel and hand each to
// `use_compiled` (its `object` empty where the compile failed) before the cache is maintained
// (an eviction cannot take a kernel before it is loaded), add the counters to the cache's
// statistics, maintain the cache. Returns the first compile failure.
std::optional<CompileError> find_or_compile(
    std::vector<Pending>& pending, const Backend& backend, int jobs, bool always_show_progress,
    bool require_writable,
    const std::function<bool(Pending&, const fs::path&, KernelOrigin)>& use_cached,
    const std::function<void(Pending&)>& use_compiled, CacheCounters& delta) {
  CacheStore store(config().cache_dir);
  sweep_once(store);
  if (require_writable) store.private_dir("tmp");
  RemoteStore* remote = usable_remote();
  std::string portable;  // the remote keys' toolchain identity, once per batch
  std::vector<Pending*> compiled, waiting, late;
  // A miss: counted, explained and staged, to be compiled with `round`.
  auto miss = [&](Pending& p, std::vector<Pending*>& round) {
    delta.misses++;
    p.why = explain(store, p, backend);
    delta.*miss_cause_counter(p.why.cause) += 1;
    if (log_enabled(LogLevel::Debug))
      log_message(LogLevel::Debug,
                  "miss " + p.key + " (" + std::to_string(p.ir->ops.size()) +
                      " ops: " + (p.ir->ops.empty() ? "" : p.ir->ops.front()) +
                      (p.ir->ops.size() > 1 ? ", ..." : "") +
                      "): " + (p.why.cause == MissCause::New ? "a new kernel" : p.why.reason));
    stage(p, store, backend);
    round.push_back(&p);
  };
  // Compiles and installs `round`, hands each kernel over and queues its upload (which ends its
  // lease). Returns the round's first compile failure.
  auto build = [&](std::vector<Pending*>& round) {
    log_miss_causes(round);
    std::optional<CompileError> failure;
    if (round.empty()) return failure;
    failure = compile_and_install(round, store, backend, jobs, always_show_progress, delta);
    for (Pending* p : round) use_compiled(*p);
    if (remote)
      for (Pending* p : round) {
        if (!p->object.empty() && remote->writable()) {
          try {
            remote->upload_later(upload_job(*p, p->object, backend, portable));
            continue;
          } catch (const CacheError& e) {
            log_message(LogLevel::Debug, "not uploading " + p->key + ": " + e.what());
          }
        }
        remote->release_lease(p->remote_key, p->lease_token);
      }
    return failure;
  };
  for (Pending& p : pending) {
    if (std::optional<fs::path> so = find_or_lock(store, p)) {
      if (use_cached(p, *so, KernelOrigin::Disk)) continue;
      p.lock = store.lock_key(p.key);
    }
    if (remote && portable.empty() && (portable = portable_of(backend)).empty()) remote = nullptr;
    if (remote) {
      p.remote_key = remote_key_of(backend, p.ir_text, portable);
      bool leased_by_other = false;
      if (std::optional<fs::path> so =
              install_from_remote(*remote, store, p, backend, delta, leased_by_other)) {
        p.lock.release();
        if (use_cached(p, *so, KernelOrigin::Remote)) continue;
        p.lock = store.lock_key(p.key);
      } else if (leased_by_other) {
        waiting.push_back(&p);
        continue;
      }
    }
    miss(p, compiled);
  }
  // The kernels other machines hold leases on are waited for only after this process has built
  // (and queued the uploads of) the ones it holds leases on: waiting while holding leases would
  // wait for machines that wait for us. Two machines whose local keys order the kernels
  // differently (another compiler path or mtime, same content: the same remote keys) each
  // waited out METAJIT_REMOTE_WAIT, then both compiled everything.
  std::optional<CompileError> failure = build(compiled);
  for (Pending* p : waiting) {
    if (std::optional<fs::path> so = wait_and_install(*remote, store, *p, backend, delta)) {
      p->lock.release();
      if (use_cached(*p, *so, KernelOrigin::Remote)) continue;
      p->lock = store.lock_key(p->key);
    }
    miss(*p, late);
  }
  std::optional<CompileError> late_failure = build(late);
  if (!failure) failure = late_failure;
  take_remote_counts(delta);
  store.add_counters(delta);
  if (!compiled.empty() || !late.empty()) store.maintain(config().cache_max_size);
  return failure;
}

}  // namespace

std::string key_of(const KernelIR& ir, Device device) {
  const Backend b = backend_for(device);
  return kernel_key(b.name, serialize_ir(ir), b.identity);
}

void count_memory_hits(uint64_t n) {
  runtime_counters().memory_hits += n;
  unflushed_memory_hits += n;
  flush_memory_hits_at_exit();
}

std::string kernel_source(const KernelIR& ir, Device device) {
  return backend_for(device).emit(ir);
}

std::vector<KernelHandle> obtain_kernels(const std::vector<const KernelIR*>& irs, Device device) {
  RuntimeCounters& counters = runtime_counters();
  std::vector<KernelHandle> out(irs.size());
  std::vector<std::string> texts(irs.size());
  std::vector<size_t> misses;
  // The compiler settings are part of the memory key: reload_config() may change them.
  const std::string settings = memory_settings(device);
  {
    MemoryTable& t = table();
    std::lock_guard<std::mutex> lock(t.mu);
    for (size_t i = 0; i < irs.size(); ++i) {
      texts[i] = serialize_ir(*irs[i]);
      if (auto it = t.by_ir.find(settings + texts[i]); it != t.by_ir.end()) {
        out[i] = it->second;
        counters.memory_hits++;
        unflushed_memory_hits++;
        if (log_enabled(LogLevel::Debug)) log_message(LogLevel::Debug, "memory hit " + out[i].key);
      } else {
        misses.push_back(i);
      }
    }
  }
  if (misses.empty()) return out;
  flush_memory_hits_at_exit();

  const Backend backend = backend_for(device);
  std::vector<Pending> pending = group_by_key(irs, texts, misses, backend);
  CacheCounters delta;
  delta.memory_hits = unflushed_memory_hits.exchange(0);
  auto load_cached = [&](Pending& p, const fs::path& so, KernelOrigin origin) {
    try {
      KernelHandle h{load_kernel(so), p.key, origin};
      for (size_t i : p.positions) out[i] = h;
      if (origin == KernelOrigin::Disk) {
        counters.disk_hits++;
        delta.disk_hits++;
        log_message(LogLevel::Debug, "disk hit " + p.key);
      }
      recorder().record(p.key, *p.ir, device_name(device));
      return true;
    } catch (const Error& e) {
      // Verified a moment ago but gone now (evicted or cleared by another process), or not
      // loadable here: build it again rather than fail.
      log_message(LogLevel::Debug, "cannot load " + p.key + " (" + e.what() + "); rebuilding");
      return false;
    }
  };
  auto load_compiled = [&](Pending& p) {
    if (p.object.empty()) return;
    KernelHandle h{load_kernel(p.object), p.key, KernelOrigin::Compiled, p.compile_seconds};
    for (size_t i : p.positions) out[i] = h;
    recorder().record(p.key, *p.ir, device_name(device));
  };
  std::optional<CompileError> failure =
      find_or_compile(pending, backend, config().jobs, /*always_show_progress=*/false,
                      /*require_writable=*/false, load_cached, load_compiled, delta);
  if (failure) throw *failure;

  MemoryTable& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  for (size_t i : misses) t.by_ir.emplace(settings + texts[i], out[i]);
  return out;
}

WarmSummary warm_kernels(const std::vector<KernelIR>& irs, int jobs, Device device, bool push) {
  const auto start = std::chrono::steady_clock::now();
  WarmSummary summary;
  std::vector<const KernelIR*> ptrs;
  std::vector<std::string> texts;
  std::vector<size_t> all;
  for (const KernelIR& ir : irs) {
    all.push_back(ptrs.size());
    ptrs.push_back(&ir);
    texts.push_back(serialize_ir(ir));
  }
  const Backend backend = backend_for(device);
  std::vector<Pending> pending = group_by_key(ptrs, texts, all, backend);
  summary.total = pending.size();

  CacheCounters delta;
  auto count_cached = [&](Pending&, const fs::path&, KernelOrigin origin) {
    summary.cached++;
    if (origin == KernelOrigin::Remote) summary.fetched++;
    return true;
  };
  auto count_compiled = [&](Pending& p) {
    if (!p.object.empty()) {
      summary.compiled++;
    } else {
      summary.failed++;
      summary.failed_keys.push_back(p.key);
    }
  };
  // Warming a cache that cannot keep what it compiles would be pointless: require_writable.
  std::optional<CompileError> failure =
      find_or_compile(pending, backend, jobs, /*always_show_progress=*/true,
                      /*require_writable=*/true, count_cached, count_compiled, delta);
  if (failure) summary.first_failure = failure->what();
  if (push) {
    RemoteStore* remote = usable_remote();
    if (!remote || !remote->writable())
      throw CacheError(
          "cache warm --push: remote writes are off (set METAJIT_REMOTE, "
          "METAJIT_REMOTE_MODE=readwrite and METAJIT_REMOTE_SIGNING_KEY)");
    const std::string portable = portable_of(backend);
    if (portable.empty()) throw CacheError("cache warm --push: cannot identify the toolchain");
    CacheStore store(config().cache_dir);
    for (Pending& p : pending) {
      std::optional<fs::path> so = store.find(p.key);
      if (!so) continue;  // its compile failed
      p.remote_key = remote_key_of(backend, p.ir_text, portable);
      std::string why;
      if (remote->upload_now(upload_job(p, *so, backend, portable), why))
        summary.pushed++;
      else
        summary.push_failed++;
    }
    CacheCounters pushed;
    take_remote_counts(pushed);
    store.add_counters(pushed);
  }
  summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return summary;
}

std::vector<PushResult> push_kernels(const std::vector<std::string>& keys) {
  RemoteStore* remote = usable_remote();
  if (!remote || !remote->writable())
    throw CacheError(
        "cache push: remote writes are off (set METAJIT_REMOTE, "
        "METAJIT_REMOTE_MODE=readwrite and METAJIT_REMOTE_SIGNING_KEY)");
  CacheStore store(config().cache_dir);
  std::vector<PushResult> results;
  std::map<std::string, std::string> portable_by_backend;
  for (const std::string& key : keys) {
    PushResult r{key, false, ""};
    try {
      nlohmann::json meta = store.read_meta(key);
      const std::string name = meta.value("backend", "");
      Device device = name == "cpu" ? Device::CPU : Device::CUDA;
      if (name != "cpu" && name != "cuda" && name != "cuda-emu")
        throw CacheError("unknown backend '" + name + "'");
      if (!meta.contains("spec")) throw CacheError("meta.json has no kernel spec");
      KernelIR ir = kernel_spec_from_json(meta["spec"]);
      const Backend backend = backend_for(device);
      Pending p;
      p.ir = &ir;
      p.ir_text = serialize_ir(ir);
      if (backend.name != name || kernel_key(backend.name, p.ir_text, backend.identity) != key)
        throw CacheError("built by another toolchain than this machine's current one");
      auto it = portable_by_backend.find(name);
      if (it == portable_by_backend.end())
        it = portable_by_backend.emplace(name, portable_of(backend)).first;
      if (it->second.empty()) throw CacheError("cannot identify the toolchain");
      std::optional<fs::path> so = store.find(key);
      if (!so) throw CacheError("not in the cache (or failed its checks)");
      p.key = key;
      p.remote_key = remote_key_of(backend, p.ir_text, it->second);
      if (meta.contains("compile_seconds") && meta["compile_seconds"].is_number())
        p.compile_seconds = meta["compile_seconds"].get<double>();
      r.pushed = remote->upload_now(upload_job(p, *so, backend, it->second), r.why);
    } catch (const Error& e) {
      r.why = e.what();
    }
    results.push_back(std::move(r));
  }
  CacheCounters pushed;
  take_remote_counts(pushed);
  try {
    store.add_counters(pushed);
  } catch (const CacheError&) {
  }
  return results;
}

std::filesystem::path cache_dir() {
  return config().cache_dir;
}

std::filesystem::path cache_entry_dir(const std::string& key) {
  if (key.size() != 32 || !is_key_hex(key))
    throw Error("cache_entry_dir: \"" + key.substr(0, 64) +
                "\" is not a kernel key; expected the 32 lowercase hex digits of KernelInfo::key");
  return CacheStore(config().cache_dir).entry_dir(key);
}

}  // namespace metajit
