// The on-disk kernel cache of docs/design.md §6:
//   <root>/v1/<k[0:2]>/<key>/{kernel.cc|kernel.cu, kernel.so, meta.json}
// Entries are built in <root>/v1/tmp/<unique>/ and renamed into place, so a reader never sees
// a partial entry; kernel.so is checked against the XXH3 checksum in meta.json before it is
// handed out for dlopen. Every method assumes another process may die at any instruction.
#pragma once
#include <cstdint>
#include <filesystem>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

namespace metajit {

struct CacheEntryInfo {
  std::string key;
  std::filesystem::path dir;
  std::string backend;           // "cpu" | "cuda" (from meta.json)
  std::vector<std::string> ops;  // from meta.json
  uint64_t bytes = 0;            // all files of the entry
  double compile_seconds = 0;
  std::string created;    // ISO-8601 UTC, from meta.json
  int64_t last_used = 0;  // unix seconds
};

// Counters that persist across processes (root/v1/stats.json, updated under a lock).
struct CacheCounters {
  uint64_t memory_hits = 0, disk_hits = 0, misses = 0, compiles = 0, errors = 0, evictions = 0;
  double compile_seconds = 0;
  // Bytes of all entries as installs and evictions have counted them (a delta in
  // add_counters). An estimate: a process killed between an install and its update leaves it
  // low; every eviction scan sets it to the measured total again.
  int64_t bytes = 0;
  // Misses by cause (runtime/miss_cause.h): a kernel never compiled here, or compiled again
  // because the compiler, the target, the flags or the code generator changed, or because its
  // entry had been removed. Their sum is `misses` (for files written since they were counted).
  uint64_t misses_new = 0, misses_compiler = 0, misses_target = 0, misses_flags = 0,
           misses_codegen = 0, misses_removed = 0;
  // The remote tier (remote_cache/): kernels installed from it, lookups that found nothing,
  // entries refused (unsigned, foreign, corrupt...), failed operations and of those the
  // timeouts, kernels uploaded.
  uint64_t remote_hits = 0, remote_misses = 0, remote_rejected = 0, remote_errors = 0,
           remote_timeouts = 0, remote_uploads = 0;
};

// The whole-number counters of CacheCounters, each once: its stats.json field, its label in
// `metajit cache stats`, and its member. Every reader, writer and printer walks this list.
struct CacheCounterField {
  const char* field;
  const char* label;
  uint64_t CacheCounters::*member;
};
inline constexpr CacheCounterField kCacheCounterFields[] = {
    {"memory_hits", "memory hits", &CacheCounters::memory_hits},
    {"disk_hits", "disk hits", &CacheCounters::disk_hits},
    {"misses", "misses", &CacheCounters::misses},
    {"compiles", "compiles", &CacheCounters::compiles},
    {"errors", "errors", &CacheCounters::errors},
    {"evictions", "evictions", &CacheCounters::evictions},
    {"remote_hits", "remote hits", &CacheCounters::remote_hits},
    {"remote_misses", "remote misses", &CacheCounters::remote_misses},
    {"remote_rejected", "remote rejected", &CacheCounters::remote_rejected},
    {"remote_errors", "remote errors", &CacheCounters::remote_errors},
    {"remote_timeouts", "remote timeouts", &CacheCounters::remote_timeouts},
    {"remote_uploads", "remote uploads", &CacheCounters::remote_uploads},
};
// The misses by cause: stats.json's "misses_by_cause" object (a missing field reads as 0), the
// same object in `metajit cache stats --json`, one "misses by cause" row in its text.
inline constexpr CacheCounterField kMissCauseFields[] = {
    {"new", "new", &CacheCounters::misses_new},
    {"compiler", "compiler", &CacheCounters::misses_compiler},
    {"target", "target", &CacheCounters::misses_target},
    {"flags", "flags", &CacheCounters::misses_flags},
    {"codegen", "codegen", &CacheCounters::misses_codegen},
    {"removed", "removed", &CacheCounters::misses_removed},
};

// One thing `verify()` found wrong: a bad entry, or debris a dead process left behind.
struct CacheProblem {
  std::string key;             // the entry's key; empty for debris
  std::filesystem::path path;  // the entry directory or the debris
  std::string what;            // e.g. "kernel.so does not match its checksum"
};

struct EvictionResult {
  bool ran = false;  // false: another process was already evicting (non-blocking call)
  uint64_t removed = 0, bytes_removed = 0;
  uint64_t entries_left = 0, bytes_left = 0;
};

// Holds an exclusive flock on <root>/v1/locks/<key>.lock until destroyed (docs/design.md §6: N
// processes needing one kernel compile it once). The holder unlinks the lock file before
// releasing it and a waiter that wakes on an unlinked file tries again, so lock files never
// pile up. Move-only; unlocked when default-constructed.
class CacheKeyLock {
 public:
  CacheKeyLock() = default;
  CacheKeyLock(int fd, std::filesystem::path path) : fd_(fd), path_(std::move(path)) {}
  CacheKeyLock(CacheKeyLock&& other) noexcept : fd_(other.fd_), path_(std::move(other.path_)) {
    other.fd_ = -1;
  }
  CacheKeyLock& operator=(CacheKeyLock&& other) noexcept;
  CacheKeyLock(const CacheKeyLock&) = delete;
  CacheKeyLock& operator=(const CacheKeyLock&) = delete;
  ~CacheKeyLock();
  bool locked() const { return fd_ >= 0; }
  void release() noexcept;

 private:
  int fd_ = -1;
  std::filesystem::path path_;
};

class CacheStore {
 public:
  // Creates root/v1 (mode 0700) on first write, not here: constructing never touches disk.
  explicit CacheStore(std::filesystem::path root);

  const std::filesystem::path& root() const { return root_; }
  std::filesystem::path version_dir() const;  // root/v1

  // Why nothing can be written under root ("read-only file system", "not writable by this
  // user"), from the nearest existing directory of root; nullopt when it can be. Decided once
  // per process and root: a read-only warm cache is a deployment, not a fault (README "Cache").
  std::optional<std::string> unwritable_reason() const;
  std::filesystem::path entry_dir(const std::string& key) const;  // root/v1/<k[0:2]>/<key>

  // The verified kernel.so of `key`, or nullopt. An entry that is present but bad (a file
  // missing, checksum mismatch, unreadable meta.json) is logged, removed and reported as a miss.
  std::optional<std::filesystem::path> find(const std::string& key);

  // A new empty directory under root/v1/tmp/ (mode 0700) to build an entry in. Throws
  // CacheError when the cache cannot be written.
  std::filesystem::path make_staging_dir();
  // `staging` holds the source (kernel.cc or kernel.cu) and kernel.so. Writes meta.json =
  // `meta` plus key, so_checksum, source_checksum, so_bytes, created; then renames the directory
  // into place. If another process installed `key` first, `staging` is discarded and theirs is
  // used. Returns the installed kernel.so path. `installed_bytes` (if given) is set to the
  // size of the entry this call added (0 when another process's entry was kept).
  std::filesystem::path install(const std::string& key, const std::filesystem::path& staging,
                                nlohmann::json meta, uint64_t* installed_bytes = nullptr);
  void discard(const std::filesystem::path& staging) noexcept;

  std::vector<CacheEntryInfo> list() const;
  // The full key for a unique hex prefix; CacheError if not hex, unknown or ambiguous.
  std::string resolve_prefix(const std::string& prefix) const;
  nlohmann::json read_meta(const std::string& key) const;  // CacheError if unreadable
  // Removes entries (all, or those not used for `older_than_seconds`); returns how many.
  // Clearing all also removes the kernel-IR index (below).
  uint64_t clear(double older_than_seconds = -1);
  // Removes one entry (atomically); false if it was not there.
  bool remove_entry(const std::string& key);
  // Removes debris of dead processes: staging directories of processes that no longer run on
  // this host, or older than `older_than_seconds` (whoever made them), half-removed entries,
  // interrupted temp files and unheld lock files. Returns how many things it removed.
  uint64_t sweep_stale_staging(double older_than_seconds = 3600);

  // Evicts least recently used entries until the entries take at most `max_bytes`. With
  // `wait` false it returns at once (ran == false) when another process is evicting.
  EvictionResult evict(uint64_t max_bytes, bool wait);
  // After installs: evicts when the recorded size estimate is over `max_bytes` (or unknown),
  // never waiting for another evicting process. Never throws (one warning instead).
  void maintain(uint64_t max_bytes);

  // Every bad entry (the checks find() makes) and debris older than `debris_age_seconds`.
  std::vector<CacheProblem> verify(double debris_age_seconds = 3600) const;
  // The kernel-IR index, root/v1/by-ir/<digest>.json: for each kernel IR (a 32-hex digest that
  // does not depend on the toolchain), a small JSON record of the key it was last installed
  // under and what that key was made of, so that a miss can tell why it compiles again without
  // reading every meta.json. A record is replaced atomically; a missing, foreign or garbled
  // one reads as nullopt (an index is a hint, never trusted for anything but a message).
  std::optional<nlohmann::json> read_ir_record(const std::string& ir_digest) const;
  // Throws CacheError when the cache cannot be written.
  void write_ir_record(const std::string& ir_digest, const nlohmann::json& record);

  // Marks an entry used now (cheap: refreshes root/v1/<k[0:2]>/<key>/.used at most once a minute).
  void touch(const std::string& key);

  void add_counters(const CacheCounters& delta);
  CacheCounters read_counters() const;
  // True when stats.json records a size estimate (written by installs and evictions).
  bool has_size_estimate() const;

  // Blocks until this process holds the per-key lock; re-check find() after it returns. When
  // the lock file cannot be created (read-only cache) the returned lock is not locked().
  CacheKeyLock lock_key(const std::string& key);
  // root/v1/<name> (e.g. "toolchains"), created mode 0700 with the same ownership checks as
  // entries. Throws CacheError when the cache cannot be written or is not safe to use.
  std::filesystem::path private_dir(const std::string& name);
  // The entry's kernel.cc / kernel.cu text; CacheError if missing or unreadable.
  std::string read_source(const std::string& key) const;

 private:
  void set_size_estimate(uint64_t bytes);

  std::filesystem::path root_;
};

// Writes `contents` to a temporary file next to `path` (mode 0600, fsync'd when `durable`) and
// renames it over `path`, so a reader sees the old file or the new one, never a partial one.
// Throws CacheError naming the path.
void write_file_atomically(const std::filesystem::path& path, const std::string& contents,
                           bool durable = true);

}  // namespace metajit
