#include "runtime/disk_tier.h"

#include <metajit/error.h>
#include <stdlib.h>
#include <sys/statvfs.h>

#include <cstdlib>
#include <fstream>
#include <mutex>

#include "base/log.h"
#include "codegen/kernel_key.h"
#include "codegen/kernel_spec.h"

namespace metajit {
namespace {

namespace fs = std::filesystem;

// Below this much free space the cache counts as full: a compile there would fail half-way.
constexpr uint64_t kMinFreeBytes = uint64_t(8) << 20;

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

}  // namespace

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
MissExplanation explain_disk_miss(const CacheStore& store, const Pending& p,
                                  const Backend& backend) {
  KeyParts now = backend.parts;
  now.key = p.key;
  std::optional<KeyParts> before;
  if (std::optional<nlohmann::json> record = store.read_ir_record(p.ir_digest))
    before = key_parts_from_json(*record);
  if (before && before->backend != now.backend) before.reset();
  return explain_miss(before ? &*before : nullptr, now);
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

}  // namespace metajit
