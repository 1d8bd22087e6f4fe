// The on-disk kernel cache (docs/design.md §6). Every write is a temp file or staging directory
// renamed into place, every removal renames the entry aside first, and nothing inside the
// cache is reached through a symbolic link: any process may die at any instruction, and
// another user must not be able to slip a shared object under us.
#include "cache/cache_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <metajit/error.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>

#include "base/checksum.h"
#include "base/log.h"
#include "cache/untrusted_json.h"

namespace metajit {
namespace {

namespace fs = std::filesystem;

constexpr const char* kVersionDir = "v1";
constexpr const char* kStagingDir = "tmp";
constexpr const char* kLocksDir = "locks";
constexpr const char* kMetaFile = "meta.json";
constexpr const char* kObjectFile = "kernel.so";
constexpr const char* kUsedFile = ".used";
constexpr const char* kStatsFile = "stats.json";
constexpr const char* kStatsLock = "stats.lock";
constexpr const char* kEvictLock = "evict.lock";
constexpr const char* kBytesField = "bytes";
constexpr const char* kMissCausesField = "misses_by_cause";
constexpr const char* kIrIndexDir = "by-ir";
// Refreshing .used at most this often keeps a hit to a stat() in the common case.
constexpr int64_t kTouchIntervalSeconds = 60;

std::string quote(const fs::path& p) {
  std::string out(1, '\'');  // built up piecewise: GCC 12 warns (-Wrestrict) on "'" + s
  out += p.string();
  out += '\'';
  return out;
}
std::string errno_text(int e) {
  return std::strerror(e);
}

// Closes a descriptor on every path out of a scope.
struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  Fd(Fd&& other) noexcept : fd(other.release()) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  int release() {
    int f = fd;
    fd = -1;
    return f;
  }
};

// Opens (creating, mode 0600, never through a symlink) the lock file `path` and flocks it with
// `op` (LOCK_EX or LOCK_SH, maybe | LOCK_NB), retrying when a signal interrupts the wait.
// Returns the held descriptor, or fd < 0 with errno saying why (EWOULDBLOCK: held elsewhere).
Fd lock_file(const fs::path& path, int op) {
  Fd f(::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (f.fd < 0) return f;
  int r;
  while ((r = ::flock(f.fd, op)) != 0 && errno == EINTR) {
  }
  if (r != 0) {
    int saved = errno;
    ::close(f.release());
    errno = saved;
  }
  return f;
}

const std::string& host_name() {
  static const std::string name = [] {
    char buf[256] = {};
    if (::gethostname(buf, sizeof buf - 1) != 0 || !buf[0]) return std::string("localhost");
    std::string n = buf;
    for (char& c : n)  // keeps names in the cache to [A-Za-z0-9._-]
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-') c = '_';
    return n;
  }();
  return name;
}

// A name no other process or thread picks: pid, random bits, a per-process counter and the
// host, "<pid>-<random>-<n>@<host>", so that a sweep can tell a dead process's leftovers.
std::string unique_name(const std::string& prefix) {
  static std::atomic<uint64_t> counter{0};
  thread_local std::mt19937_64 rng{std::random_device{}()};
  char buf[96];
  std::snprintf(buf, sizeof buf, "%s%ld-%016llx-%llu@", prefix.c_str(), long(::getpid()),
                static_cast<unsigned long long>(rng()),
                static_cast<unsigned long long>(counter.fetch_add(1)));
  return buf + host_name();
}

// True when `name` (after its prefix) was made by unique_name() in a process of this host
// that no longer runs. Names from other hosts, or not of that form, are never "dead": only
// their age can make them stale.
bool made_by_dead_process(const std::string& name);

// A directory in v1/tmp that nobody will finish: a half-removed entry, one made by a process
// of this host that no longer runs, or one older than `max_age_seconds` (whoever made it).
bool is_stale_staging(const fs::path& dir, int64_t now, double max_age_seconds);

bool made_by_dead_process(const std::string& name) {
  size_t at = name.rfind('@');
  if (at == std::string::npos || name.compare(at + 1, std::string::npos, host_name()) != 0)
    return false;
  size_t digits = 0;
  while (digits < name.size() && std::isdigit(static_cast<unsigned char>(name[digits]))) ++digits;
  if (digits == 0 || digits > 9 || digits >= name.size() || name[digits] != '-') return false;
  long pid = std::strtol(name.substr(0, digits).c_str(), nullptr, 10);
  if (pid <= 0) return false;
  return ::kill(pid_t(pid), 0) != 0 && errno == ESRCH;
}

std::string iso8601_utc_now() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// Whole contents of a regular file, never through a symlink. `why` says what went wrong.
std::optional<std::string> read_file_nofollow(const fs::path& path, std::string* why = nullptr) {
  Fd f(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (f.fd < 0) {
    if (why) *why = errno == ELOOP ? "is a symbolic link" : errno_text(errno);
    return std::nullopt;
  }
  struct stat st;
  if (::fstat(f.fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    if (why) *why = "is not a regular file";
    return std::nullopt;
  }
  std::string data;
  data.resize(size_t(st.st_size));
  size_t got = 0;
  for (;;) {
    if (got == data.size()) data.resize(std::max<size_t>(data.size() * 2, 4096));
    ssize_t n = ::read(f.fd, data.data() + got, data.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      if (why) *why = errno_text(errno);
      return std::nullopt;
    }
    if (n == 0) break;
    got += size_t(n);
  }
  data.resize(got);
  return data;
}

void fsync_path(const fs::path& path, int flags) {
  Fd f(::open(path.c_str(), flags | O_RDONLY | O_CLOEXEC));
  if (f.fd >= 0) ::fsync(f.fd);
}

// Why `dir` may not be trusted (another owner, group/other-writable, a symlink), or "".
std::string unsafe_reason(const fs::path& dir, bool follow_symlink) {
  struct stat st;
  int r = follow_symlink ? ::stat(dir.c_str(), &st) : ::lstat(dir.c_str(), &st);
  if (r != 0) return errno_text(errno);
  if (S_ISLNK(st.st_mode)) return "is a symbolic link";
  if (!S_ISDIR(st.st_mode)) return "is not a directory";
  if (st.st_uid != ::geteuid())
    return "is owned by uid " + std::to_string(st.st_uid) + ", not by the current user";
  if (st.st_mode & 022) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", unsigned(st.st_mode & 07777));
    return std::string("is writable by group or others (mode ") + mode + ")";
  }
  return "";
}

// mkdir with mode 0700 whatever the umask; an existing real directory is fine.
void make_private_dir(const fs::path& dir) {
  if (::mkdir(dir.c_str(), 0700) == 0) {
    ::chmod(dir.c_str(), 0700);
    return;
  }
  int e = errno;
  struct stat st;
  if (e == EEXIST && ::lstat(dir.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return;
    throw CacheError("cache: " + quote(dir) +
                     (S_ISLNK(st.st_mode) ? " is a symbolic link" : " is not a directory"));
  }
  throw CacheError("cache: cannot create directory " + quote(dir) + ": " + errno_text(e));
}

// The root and its missing parents (each created 0700). The root itself may be a symlink to a
// directory: that is the user's choice, made outside the cache.
void make_root(const fs::path& root) {
  struct stat st;
  if (::stat(root.c_str(), &st) == 0) {
    if (!S_ISDIR(st.st_mode)) throw CacheError("cache: " + quote(root) + " is not a directory");
    return;
  }
  if (errno != ENOENT)
    throw CacheError("cache: cannot use " + quote(root) + ": " + errno_text(errno));
  fs::path parent = root.parent_path();
  if (!parent.empty() && parent != root) make_root(parent);
  if (::mkdir(root.c_str(), 0700) == 0) {
    ::chmod(root.c_str(), 0700);
  } else if (errno != EEXIST) {
    throw CacheError("cache: cannot create directory " + quote(root) + ": " + errno_text(errno));
  }
}

void require_safe(const fs::path& dir, bool follow_symlink) {
  std::string why = unsafe_reason(dir, follow_symlink);
  if (!why.empty())
    throw CacheError("cache: refusing to use " + quote(dir) + ": it " + why +
                     " (fix: make it a directory of yours with mode 0700, or set "
                     "METAJIT_CACHE_DIR to one)");
}

// What is wrong with the installed entry `dir` for `key`, or "" when it is complete and its
// files match the checksums in meta.json.
std::string verify_entry(const fs::path& dir, const std::string& key) {
  std::string why = unsafe_reason(dir, false);
  if (!why.empty()) return "the entry directory " + why;
  std::optional<std::string> text = read_file_nofollow(dir / kMetaFile, &why);
  if (!text) return "meta.json: " + why;
  nlohmann::json meta = parse_untrusted_json(*text);
  if (!meta.is_object()) return "meta.json is not valid JSON";
  auto str = [&meta](const char* k) {
    auto it = meta.find(k);
    return it != meta.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  if (str("key") != key) return "meta.json names another key";
  auto bytes_it = meta.find("so_bytes");
  if (str("so_checksum").empty() || str("source_checksum").empty() || bytes_it == meta.end() ||
      !bytes_it->is_number_unsigned())
    return "meta.json lacks the checksums";
  std::string source_file = str("source_file").empty() ? "kernel.cc" : str("source_file");
  if (source_file != "kernel.cc" && source_file != "kernel.cu")
    return "meta.json names an unexpected source file";

  std::optional<std::string> so = read_file_nofollow(dir / kObjectFile, &why);
  if (!so) return "kernel.so: " + why;
  uint64_t expected = bytes_it->get<uint64_t>();
  if (so->size() != expected)
    return "kernel.so is " + std::to_string(so->size()) + " bytes, meta.json says " +
           std::to_string(expected);
  if (xxh3_128_hex(*so) != str("so_checksum")) return "kernel.so does not match its checksum";
  std::optional<std::string> src = read_file_nofollow(dir / source_file, &why);
  if (!src) return source_file + ": " + why;
  if (xxh3_128_hex(*src) != str("source_checksum"))
    return source_file + " does not match its checksum";
  return "";
}

// Moves `dir` into the staging area and deletes it there, so that a reader finds either the
// whole entry or none of it. False when it could not be moved (it may already be gone).
bool remove_atomically(const fs::path& version_dir, const fs::path& dir) {
  fs::path staging = version_dir / kStagingDir;
  try {
    make_private_dir(staging);
  } catch (const CacheError&) {
    return false;
  }
  fs::path aside = staging / unique_name("rm-");
  if (::rename(dir.c_str(), aside.c_str()) != 0) return false;
  std::error_code ec;
  fs::remove_all(aside, ec);
  return true;
}

int64_t mtime_of(const fs::path& p) {
  struct stat st;
  return ::lstat(p.c_str(), &st) == 0 ? int64_t(st.st_mtime) : 0;
}

bool is_stale_staging(const fs::path& dir, int64_t now, double max_age_seconds) {
  const std::string name = dir.filename().string();
  return name.rfind("rm-", 0) == 0 || made_by_dead_process(name) ||
         double(now - mtime_of(dir)) > max_age_seconds;
}

// Entry directories below root/v1: <2 hex>/<key>, real directories only.
std::vector<std::pair<std::string, fs::path>> scan_entries(const fs::path& version_dir,
                                                           const std::string& prefix) {
  std::vector<std::pair<std::string, fs::path>> out;
  struct stat st;
  if (::lstat(version_dir.c_str(), &st) != 0) {
    if (errno == ENOENT) return out;
    throw CacheError("cache: cannot read " + quote(version_dir) + ": " + errno_text(errno));
  }
  if (!S_ISDIR(st.st_mode))
    throw CacheError("cache: " + quote(version_dir) + " is not a directory");
  std::error_code ec;
  fs::directory_iterator shards(version_dir, ec);
  if (ec) throw CacheError("cache: cannot read " + quote(version_dir) + ": " + ec.message());
  for (const fs::directory_entry& shard : shards) {
    std::string sname = shard.path().filename().string();
    // Skips tmp/, locks/, toolchains/ and the stats files.
    if (sname.size() != 2 || !is_key_hex(sname)) continue;
    const size_t k = std::min<size_t>(2, prefix.size());  // the shard holds the first 2 digits
    if (sname.compare(0, k, prefix, 0, k) != 0) continue;
    if (::lstat(shard.path().c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) continue;
    fs::directory_iterator keys(shard.path(), ec);
    if (ec) continue;
    for (const fs::directory_entry& entry : keys) {
      std::string key = entry.path().filename().string();
      if (!is_key_hex(key) || key.compare(0, 2, sname) != 0 || key.rfind(prefix, 0) != 0) continue;
      if (::lstat(entry.path().c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) continue;
      out.emplace_back(key, entry.path());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

// `with_meta` false: only what stat() tells (size, last use), for eviction scans.
CacheEntryInfo entry_info(const std::string& key, const fs::path& dir, bool with_meta = true) {
  CacheEntryInfo info;
  info.key = key;
  info.dir = dir;
  std::optional<std::string> text;
  if (with_meta) text = read_file_nofollow(dir / kMetaFile);
  if (text) {
    nlohmann::json meta = parse_untrusted_json(*text);
    if (meta.is_object()) {
      if (meta.contains("backend") && meta["backend"].is_string())
        info.backend = meta["backend"].get<std::string>();
      if (meta.contains("ops") && meta["ops"].is_array())
        for (const auto& op : meta["ops"])
          if (op.is_string()) info.ops.push_back(op.get<std::string>());
      if (meta.contains("compile_seconds") && meta["compile_seconds"].is_number())
        info.compile_seconds = meta["compile_seconds"].get<double>();
      if (meta.contains("created") && meta["created"].is_string())
        info.created = meta["created"].get<std::string>();
    }
  }
  std::error_code ec;
  for (const fs::directory_entry& f : fs::directory_iterator(dir, ec)) {
    struct stat st;
    if (::lstat(f.path().c_str(), &st) == 0 && S_ISREG(st.st_mode))
      info.bytes += uint64_t(st.st_size);
  }
  info.last_used = mtime_of(dir / kUsedFile);
  if (!info.last_used) info.last_used = mtime_of(dir / kMetaFile);
  if (!info.last_used) info.last_used = mtime_of(dir);
  return info;
}

// root/v1 with the root's missing parents, checked to be ours and private.
fs::path ensure_version_dir(const fs::path& root) {
  make_root(root);
  require_safe(root, true);
  const fs::path v1 = root / kVersionDir;
  make_private_dir(v1);
  require_safe(v1, false);
  return v1;
}

bool valid_key(const std::string& key) {
  return key.size() >= 2 && is_key_hex(key);
}

// Shown in messages: a user's argument may hold anything, a message stays on one line.
std::string printable(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += char(c);
    }
  }
  return out;
}

uint64_t json_count(const nlohmann::json& j, const char* name) {
  auto it = j.find(name);
  return it != j.end() && it->is_number_unsigned() ? it->get<uint64_t>() : 0;
}

}  // namespace

void write_file_atomically(const fs::path& path, const std::string& contents, bool durable) {
  fs::path tmp = path.parent_path() / unique_name("." + path.filename().string() + ".tmp-");
  {
    Fd f(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (f.fd < 0) throw CacheError("cache: cannot write " + quote(path) + ": " + errno_text(errno));
    size_t done = 0;
    while (done < contents.size()) {
      ssize_t n = ::write(f.fd, contents.data() + done, contents.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        int e = errno;
        ::unlink(tmp.c_str());
        throw CacheError("cache: cannot write " + quote(path) + ": " + errno_text(e));
      }
      done += size_t(n);
    }
    if (durable && ::fsync(f.fd) != 0) {
      int e = errno;
      ::unlink(tmp.c_str());
      throw CacheError("cache: cannot write " + quote(path) + ": " + errno_text(e));
    }
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    throw CacheError("cache: cannot write " + quote(path) + ": " + errno_text(e));
  }
  if (durable) fsync_path(path.parent_path(), O_DIRECTORY);
}

CacheKeyLock& CacheKeyLock::operator=(CacheKeyLock&& other) noexcept {
  if (this != &other) {
    release();
    fd_ = other.fd_;
    path_ = std::move(other.path_);
    other.fd_ = -1;
  }
  return *this;
}

void CacheKeyLock::release() noexcept {
  if (fd_ < 0) return;
  // Unlinked while still held: a waiter wakes on a file no longer in the directory, sees it
  // and opens the path anew (lock_key), so removing the file never lets two holders in.
  if (!path_.empty()) ::unlink(path_.c_str());
  ::close(fd_);  // closing the descriptor releases the flock
  fd_ = -1;
}

CacheKeyLock::~CacheKeyLock() {
  release();
}

CacheStore::CacheStore(fs::path root) : root_(std::move(root)) {}

fs::path CacheStore::version_dir() const {
  return root_ / kVersionDir;
}

fs::path CacheStore::entry_dir(const std::string& key) const {
  return version_dir() / key.substr(0, 2) / key;
}

std::optional<fs::path> CacheStore::find(const std::string& key) {
  if (!valid_key(key)) return std::nullopt;
  const fs::path dir = entry_dir(key);
  struct stat st;
  if (::lstat(dir.c_str(), &st) != 0) return std::nullopt;  // the common miss: one syscall
  for (auto [path, follow] : {std::pair{root_, true}, std::pair{version_dir(), false},
                              std::pair{dir.parent_path(), false}}) {
    std::string why = unsafe_reason(path, follow);
    if (!why.empty()) {
      warn_once("cache-unsafe:" + path.string(),
                "not using the kernel cache " + quote(path) + ": it " + why +
                    " (fix: make it a directory of yours with mode 0700, or set "
                    "METAJIT_CACHE_DIR to one)");
      return std::nullopt;
    }
  }
  std::string why = verify_entry(dir, key);
  if (!why.empty()) {
    bool removed = remove_atomically(version_dir(), dir);
    warn_once("cache-bad:" + dir.string() + ":" + why,
              "cache entry " + key + " is bad (" + why + "); " +
                  (removed ? "removed, it will be rebuilt" : "could not remove it"));
    return std::nullopt;
  }
  touch(key);
  return dir / kObjectFile;
}

fs::path CacheStore::make_staging_dir() {
  fs::path staging = private_dir(kStagingDir);
  fs::path dir = staging / unique_name("");
  if (::mkdir(dir.c_str(), 0700) != 0)
    throw CacheError("cache: cannot create staging directory " + quote(dir) + ": " +
                     errno_text(errno));
  ::chmod(dir.c_str(), 0700);
  return dir;
}

fs::path CacheStore::install(const std::string& key, const fs::path& staging, nlohmann::json meta,
                             uint64_t* installed_bytes) {
  if (installed_bytes) *installed_bytes = 0;
  if (!valid_key(key))
    throw CacheError("cache: cannot install '" + printable(key) + "': not a hexadecimal key");
  std::string why = unsafe_reason(staging, false);
  if (!why.empty()) throw CacheError("cache: staging directory " + quote(staging) + " " + why);
  std::string source_file;
  for (const char* name : {"kernel.cc", "kernel.cu"}) {
    struct stat st;
    if (::lstat((staging / name).c_str(), &st) == 0) source_file = name;
  }
  if (source_file.empty())
    throw CacheError("cache: staging directory " + quote(staging) +
                     " holds no kernel.cc or kernel.cu");
  std::optional<std::string> so = read_file_nofollow(staging / kObjectFile, &why);
  if (!so) throw CacheError("cache: cannot read " + quote(staging / kObjectFile) + ": " + why);
  std::optional<std::string> src = read_file_nofollow(staging / source_file, &why);
  if (!src) throw CacheError("cache: cannot read " + quote(staging / source_file) + ": " + why);
  // The files must be on disk before the rename publishes them.
  fsync_path(staging / kObjectFile, O_NOFOLLOW);
  fsync_path(staging / source_file, O_NOFOLLOW);

  if (!meta.is_object()) meta = nlohmann::json::object({{"meta", std::move(meta)}});
  meta["key"] = key;
  meta["so_checksum"] = xxh3_128_hex(*so);
  meta["source_checksum"] = xxh3_128_hex(*src);
  meta["so_bytes"] = uint64_t(so->size());
  meta["source_file"] = source_file;
  meta["created"] = iso8601_utc_now();
  const std::string meta_text = meta.dump(2) + "\n";
  write_file_atomically(staging / kMetaFile, meta_text);
  fsync_path(staging, O_DIRECTORY);
  const uint64_t bytes = so->size() + src->size() + meta_text.size();

  const fs::path shard = version_dir() / key.substr(0, 2);
  const fs::path final_dir = entry_dir(key);
  try {
    make_private_dir(shard);
    require_safe(shard, false);
  } catch (...) {
    discard(staging);
    throw;
  }
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (::rename(staging.c_str(), final_dir.c_str()) == 0) {
      fsync_path(shard, O_DIRECTORY);
      if (installed_bytes) *installed_bytes = bytes;
      return final_dir / kObjectFile;
    }
    int e = errno;
    if (e != EEXIST && e != ENOTEMPTY && e != ENOTDIR) {
      discard(staging);
      throw CacheError("cache: cannot install " + key + " into " + quote(final_dir) + ": " +
                       errno_text(e));
    }
    // Someone installed this key first: theirs is as good as ours, if it verifies.
    std::string bad = verify_entry(final_dir, key);
    if (bad.empty()) {
      discard(staging);
      touch(key);
      return final_dir / kObjectFile;
    }
    if (attempt == 0) {
      log_message(LogLevel::Warn, "cache entry " + key + " is bad (" + bad + "); replacing it");
      remove_atomically(version_dir(), final_dir);
    }
  }
  discard(staging);
  throw CacheError("cache: cannot install " + key + " into " + quote(final_dir) +
                   ": a bad entry is in the way and could not be replaced");
}

void CacheStore::discard(const fs::path& staging) noexcept {
  // Only ever deletes below our staging area, whatever a caller passes.
  fs::path parent = staging.lexically_normal().parent_path();
  if (staging.empty() || parent != (version_dir() / kStagingDir).lexically_normal()) return;
  std::error_code ec;
  fs::remove_all(staging, ec);
}

std::vector<CacheEntryInfo> CacheStore::list() const {
  std::vector<CacheEntryInfo> out;
  for (const auto& [key, dir] : scan_entries(version_dir(), ""))
    out.push_back(entry_info(key, dir));
  return out;
}

std::string CacheStore::resolve_prefix(const std::string& prefix) const {
  std::string p = prefix;
  std::transform(p.begin(), p.end(), p.begin(),
                 [](unsigned char c) { return char(c >= 'A' && c <= 'F' ? c - 'A' + 'a' : c); });
  if (!is_key_hex(p))
    throw CacheError("cache: key '" + printable(prefix) +
                     "' is not hexadecimal (a key or key prefix is 1 to 32 digits 0-9, a-f)");
  std::vector<std::pair<std::string, fs::path>> matches = scan_entries(version_dir(), p);
  for (const auto& m : matches)
    if (m.first == p) return p;
  if (matches.empty())
    throw CacheError("cache: no cache entry matches '" + p + "' in " + quote(root_));
  if (matches.size() > 1) {
    std::string list;
    for (size_t i = 0; i < matches.size() && i < 5; ++i) list += (i ? ", " : "") + matches[i].first;
    if (matches.size() > 5) list += " and " + std::to_string(matches.size() - 5) + " more";
    throw CacheError("cache: key prefix '" + p + "' is ambiguous: it matches " + list +
                     "; give more digits");
  }
  return matches.front().first;
}

nlohmann::json CacheStore::read_meta(const std::string& key) const {
  if (!valid_key(key)) throw CacheError("cache: '" + printable(key) + "' is not a hexadecimal key");
  const fs::path path = entry_dir(key) / kMetaFile;
  std::string why;
  std::optional<std::string> text = read_file_nofollow(path, &why);
  if (!text) throw CacheError("cache: cannot read " + quote(path) + ": " + why);
  nlohmann::json meta = parse_untrusted_json(*text);
  if (meta.is_discarded()) throw CacheError("cache: " + quote(path) + " is not valid JSON");
  return meta;
}

std::string CacheStore::read_source(const std::string& key) const {
  if (!valid_key(key)) throw CacheError("cache: '" + printable(key) + "' is not a hexadecimal key");
  const fs::path dir = entry_dir(key);
  std::string why = "no kernel.cc or kernel.cu";
  for (const char* name : {"kernel.cc", "kernel.cu"}) {
    std::string file_why;
    if (std::optional<std::string> src = read_file_nofollow(dir / name, &file_why)) return *src;
    if (file_why != errno_text(ENOENT)) why = std::string(name) + " " + file_why;
  }
  throw CacheError("cache: cannot read the source of " + key + " in " + quote(dir) + ": " + why);
}

uint64_t CacheStore::clear(double older_than_seconds) {
  struct stat st;
  if (::lstat(version_dir().c_str(), &st) != 0) return 0;  // no cache: nothing to clear
  ensure_version_dir(root_);  // refuses a root or v1 that is not ours alone
  const int64_t now = int64_t(std::time(nullptr));
  uint64_t removed = 0, left = 0;
  for (const CacheEntryInfo& e : list()) {
    if (older_than_seconds >= 0 && double(now - e.last_used) < older_than_seconds) {
      left += e.bytes;
      continue;
    }
    if (remove_atomically(version_dir(), e.dir)) ++removed;
  }
  // The index names kernels that are gone now: a later compile is a new kernel, not one
  // compiled again. (Clearing some entries keeps it: their misses count as "removed".)
  struct stat index_st;
  if (older_than_seconds < 0 && ::lstat((version_dir() / kIrIndexDir).c_str(), &index_st) == 0)
    remove_atomically(version_dir(), version_dir() / kIrIndexDir);
  if (removed) set_size_estimate(left);
  return removed;
}

bool CacheStore::remove_entry(const std::string& key) {
  if (!valid_key(key)) return false;
  return remove_atomically(version_dir(), entry_dir(key));
}

uint64_t CacheStore::sweep_stale_staging(double older_than_seconds) {
  const int64_t now = int64_t(std::time(nullptr));
  uint64_t removed = 0;
  std::error_code ec;
  // Staging directories of dead (or long gone) processes, and half-removed entries.
  for (const fs::directory_entry& e : fs::directory_iterator(version_dir() / kStagingDir, ec)) {
    std::string name = e.path().filename().string();
    if (is_stale_staging(e.path(), now, older_than_seconds)) {
      std::error_code rm;
      if (fs::remove_all(e.path(), rm) > 0) ++removed;
    }
  }
  // Temp files of interrupted write_file_atomically() calls.
  for (const fs::path& dir :
       {version_dir(), version_dir() / "toolchains", version_dir() / kIrIndexDir}) {
    for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
      std::string name = e.path().filename().string();
      size_t tmp = name.find(".tmp-");
      if (name.size() > 1 && name[0] == '.' && tmp != std::string::npos &&
          (double(now - mtime_of(e.path())) > older_than_seconds ||
           made_by_dead_process(name.substr(tmp + 5))) &&
          ::unlink(e.path().c_str()) == 0)
        ++removed;
    }
  }
  // Lock files nobody holds (their holder died before unlinking them). Taking the lock first
  // keeps this safe against a live holder; lock_key() copes with the file vanishing.
  for (const fs::directory_entry& e : fs::directory_iterator(version_dir() / kLocksDir, ec)) {
    Fd f(::open(e.path().c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC));
    if (f.fd < 0 || ::flock(f.fd, LOCK_EX | LOCK_NB) != 0) continue;
    struct stat held, now_st;
    if (::fstat(f.fd, &held) == 0 && ::lstat(e.path().c_str(), &now_st) == 0 &&
        held.st_ino == now_st.st_ino && ::unlink(e.path().c_str()) == 0)
      ++removed;
  }
  return removed;
}

EvictionResult CacheStore::evict(uint64_t max_bytes, bool wait) {
  EvictionResult result;
  const fs::path v1 = ensure_version_dir(root_);
  Fd lock = lock_file(v1 / kEvictLock, LOCK_EX | (wait ? 0 : LOCK_NB));
  if (lock.fd < 0) {
    if (errno == EWOULDBLOCK) return result;  // someone else is evicting right now
    throw CacheError("cache: cannot lock " + quote(v1 / kEvictLock) + ": " + errno_text(errno));
  }
  result.ran = true;
  std::vector<CacheEntryInfo> entries;
  uint64_t total = 0;
  for (const auto& [key, dir] : scan_entries(v1, "")) {
    entries.push_back(entry_info(key, dir, /*with_meta=*/false));
    total += entries.back().bytes;
  }
  // Least recently used first; the key breaks ties so that the order is reproducible.
  std::sort(entries.begin(), entries.end(), [](const CacheEntryInfo& a, const CacheEntryInfo& b) {
    return a.last_used != b.last_used ? a.last_used < b.last_used : a.key < b.key;
  });
  for (const CacheEntryInfo& e : entries) {
    if (total <= max_bytes) break;
    if (!remove_atomically(v1, e.dir)) continue;
    total -= std::min(total, e.bytes);
    result.removed++;
    result.bytes_removed += e.bytes;
    log_message(LogLevel::Debug, "evicted " + e.key + " (" + std::to_string(e.bytes) + " bytes)");
  }
  result.entries_left = entries.size() - result.removed;
  result.bytes_left = total;
  set_size_estimate(total);
  if (result.removed) {
    CacheCounters delta;
    delta.evictions = result.removed;
    add_counters(delta);
  }
  return result;
}

void CacheStore::maintain(uint64_t max_bytes) {
  try {
    if (!has_size_estimate() || uint64_t(std::max<int64_t>(0, read_counters().bytes)) > max_bytes)
      evict(max_bytes, /*wait=*/false);
  } catch (const std::exception& e) {
    warn_once("cache-unwritable:" + root_.string(),
              std::string("cannot keep the cache within its size limit: ") + e.what());
  }
}

std::vector<CacheProblem> CacheStore::verify(double debris_age_seconds) const {
  std::vector<CacheProblem> problems;
  for (auto [path, follow] : {std::pair{root_, true}, std::pair{version_dir(), false}}) {
    struct stat st;
    if (::lstat(path.c_str(), &st) != 0 && errno == ENOENT) return problems;  // empty cache
    std::string why = unsafe_reason(path, follow);
    if (!why.empty()) {
      problems.push_back({"", path, "it " + why});
      return problems;  // nothing below an unsafe directory can be trusted or judged
    }
  }
  for (const auto& [key, dir] : scan_entries(version_dir(), "")) {
    std::string why = unsafe_reason(dir.parent_path(), false);
    if (!why.empty()) why = "its shard directory " + why;
    if (why.empty()) why = verify_entry(dir, key);
    if (!why.empty()) problems.push_back({key, dir, why});
  }
  // Anything else in a shard directory is not an entry and should not be there.
  std::error_code ec;
  for (const fs::directory_entry& shard : fs::directory_iterator(version_dir(), ec)) {
    std::string sname = shard.path().filename().string();
    if (sname.size() != 2 || !is_key_hex(sname)) continue;
    std::error_code ec2;
    for (const fs::directory_entry& e : fs::directory_iterator(shard.path(), ec2)) {
      std::string name = e.path().filename().string();
      struct stat st;
      bool is_entry = is_key_hex(name) && name.compare(0, 2, sname) == 0 &&
                      ::lstat(e.path().c_str(), &st) == 0 && S_ISDIR(st.st_mode);
      if (!is_entry) problems.push_back({"", e.path(), "not a cache entry"});
    }
  }
  const int64_t now = int64_t(std::time(nullptr));
  for (const fs::directory_entry& e : fs::directory_iterator(version_dir() / kStagingDir, ec)) {
    if (is_stale_staging(e.path(), now, debris_age_seconds))
      problems.push_back({"", e.path(), "staging directory left by a dead process"});
  }
  for (const fs::directory_entry& e : fs::directory_iterator(version_dir() / kLocksDir, ec)) {
    Fd f(::open(e.path().c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
    if (f.fd >= 0 && ::flock(f.fd, LOCK_SH | LOCK_NB) == 0)
      problems.push_back({"", e.path(), "lock file left by a dead process"});
  }
  return problems;
}

void CacheStore::touch(const std::string& key) {
  if (!valid_key(key)) return;
  const fs::path used = entry_dir(key) / kUsedFile;
  struct stat st;
  if (::lstat(used.c_str(), &st) == 0) {
    if (!S_ISREG(st.st_mode)) return;
    if (int64_t(std::time(nullptr)) - int64_t(st.st_mtime) < kTouchIntervalSeconds) return;
    ::utimensat(AT_FDCWD, used.c_str(), nullptr, AT_SYMLINK_NOFOLLOW);
  } else if (errno == ENOENT) {
    // An empty marker: creating it is atomic, there is no content to tear.
    int fd = ::open(used.c_str(), O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd >= 0) ::close(fd);
  }
}

std::optional<std::string> CacheStore::unwritable_reason() const {
  // Leaked on purpose: the statistics are flushed from an atexit handler, after static
  // destructors of objects constructed later would have run.
  static std::mutex* mu = new std::mutex;
  static auto* decided = new std::map<std::string, std::optional<std::string>>;
  std::lock_guard<std::mutex> lock(*mu);
  auto it = decided->find(root_.string());
  if (it != decided->end()) return it->second;
  std::optional<std::string> why;
  fs::path probe = root_;
  struct stat st;
  while (::stat(probe.c_str(), &st) != 0 && probe.has_parent_path() && probe != probe.parent_path())
    probe = probe.parent_path();
  struct statvfs vfs;
  if (::statvfs(probe.c_str(), &vfs) == 0 && (vfs.f_flag & ST_RDONLY))
    why = "read-only file system";
  else if (::access(probe.c_str(), W_OK | X_OK) != 0)
    why = "not writable by this user (" + quote(probe) + ": " + errno_text(errno) + ")";
  decided->emplace(root_.string(), why);
  return why;
}

void CacheStore::add_counters(const CacheCounters& d) {
  bool any = d.compile_seconds != 0 || d.bytes != 0;
  for (const CacheCounterField& f : kCacheCounterFields) any = any || d.*f.member != 0;
  for (const CacheCounterField& f : kMissCauseFields) any = any || d.*f.member != 0;
  if (!any) return;
  if (std::optional<std::string> why = unwritable_reason()) {
    // A read-only warm cache (the deployment README "Cache" recommends): the counters stay
    // with this process (stats()), said once at info level, not warned about by every process.
    static std::once_flag said;
    std::call_once(said, [&] {
      log_message(LogLevel::Info, "cache: " + root_.string() + " is read-only (" + *why +
                                      "): this process keeps its cache statistics in memory");
    });
    return;
  }
  try {
    const fs::path v1 = ensure_version_dir(root_);
    Fd lock = lock_file(v1 / kStatsLock, LOCK_EX);
    if (lock.fd < 0)
      throw CacheError("cache: cannot lock " + quote(v1 / kStatsLock) + ": " + errno_text(errno));
    CacheCounters c = read_counters();
    nlohmann::json j = nlohmann::json::object();
    for (const CacheCounterField& f : kCacheCounterFields) j[f.field] = c.*f.member + d.*f.member;
    nlohmann::json causes = nlohmann::json::object();
    for (const CacheCounterField& f : kMissCauseFields) causes[f.field] = c.*f.member + d.*f.member;
    j[kMissCausesField] = std::move(causes);
    j["compile_seconds"] = c.compile_seconds + d.compile_seconds;
    // An unknown size stays unknown: a delta on top of nothing would look like a measurement.
    if (has_size_estimate()) j[kBytesField] = std::max<int64_t>(0, c.bytes + d.bytes);
    // Statistics are not worth an fsync per kernel; a torn file after a crash reads as zeros.
    write_file_atomically(v1 / kStatsFile, j.dump(2) + "\n", /*durable=*/false);
  } catch (const std::exception& e) {
    warn_once("cache-unwritable:" + root_.string(),
              std::string("cannot update the cache statistics: ") + e.what());
  }
}

void CacheStore::set_size_estimate(uint64_t bytes) {
  try {
    const fs::path v1 = ensure_version_dir(root_);
    Fd lock = lock_file(v1 / kStatsLock, LOCK_EX);
    if (lock.fd < 0) return;
    nlohmann::json j = nlohmann::json::object();
    if (std::optional<std::string> text = read_file_nofollow(v1 / kStatsFile)) {
      j = parse_untrusted_json(*text);
      if (!j.is_object()) j = nlohmann::json::object();
    }
    j[kBytesField] = bytes;
    write_file_atomically(v1 / kStatsFile, j.dump(2) + "\n", /*durable=*/false);
  } catch (const std::exception&) {
    // The estimate only decides when to scan; the next eviction measures again.
  }
}

bool CacheStore::has_size_estimate() const {
  std::optional<std::string> text = read_file_nofollow(version_dir() / kStatsFile);
  if (!text) return false;
  nlohmann::json j = parse_untrusted_json(*text);
  return j.is_object() && j.contains(kBytesField) && j[kBytesField].is_number_unsigned();
}

CacheCounters CacheStore::read_counters() const {
  CacheCounters c;
  std::optional<std::string> text = read_file_nofollow(version_dir() / kStatsFile);
  if (!text) return c;
  nlohmann::json j = parse_untrusted_json(*text);
  if (!j.is_object()) return c;
  for (const CacheCounterField& f : kCacheCounterFields) c.*f.member = json_count(j, f.field);
  // Files written before misses had causes have no such object: every cause reads as 0.
  if (auto causes = j.find(kMissCausesField); causes != j.end() && causes->is_object())
    for (const CacheCounterField& f : kMissCauseFields) c.*f.member = json_count(*causes, f.field);
  c.bytes = int64_t(json_count(j, kBytesField));
  auto it = j.find("compile_seconds");
  if (it != j.end() && it->is_number() && it->get<double>() >= 0)
    c.compile_seconds = it->get<double>();
  return c;
}

std::optional<nlohmann::json> CacheStore::read_ir_record(const std::string& ir_digest) const {
  if (ir_digest.size() != 32 || !is_key_hex(ir_digest)) return std::nullopt;
  const fs::path dir = version_dir() / kIrIndexDir;
  // Written by us only: a directory of someone else's could say anything.
  if (!unsafe_reason(dir, false).empty()) return std::nullopt;
  std::optional<std::string> text = read_file_nofollow(dir / (ir_digest + ".json"));
  if (!text) return std::nullopt;
  nlohmann::json j = parse_untrusted_json(*text);
  if (!j.is_object()) return std::nullopt;
  return j;
}

void CacheStore::write_ir_record(const std::string& ir_digest, const nlohmann::json& record) {
  if (ir_digest.size() != 32 || !is_key_hex(ir_digest))
    throw CacheError("cache: '" + printable(ir_digest) + "' is not a kernel IR digest");
  const fs::path dir = private_dir(kIrIndexDir);
  // Only a hint for messages and statistics: not worth an fsync per kernel. A record torn by a
  // crash reads as garbled (no record); the rename still makes it all or nothing for readers.
  write_file_atomically(dir / (ir_digest + ".json"), record.dump() + "\n", /*durable=*/false);
}

CacheKeyLock CacheStore::lock_key(const std::string& key) {
  if (!valid_key(key)) return CacheKeyLock();
  try {
    const fs::path path = private_dir(kLocksDir) / (key + ".lock");
    for (;;) {
      Fd f = lock_file(path, LOCK_EX);
      if (f.fd < 0) return CacheKeyLock();
      // The previous holder may have unlinked the file we waited on: then the lock is on an
      // orphan and a newcomer may already hold the path's new file. Try again.
      struct stat held, now;
      if (::fstat(f.fd, &held) == 0 && ::lstat(path.c_str(), &now) == 0 &&
          held.st_ino == now.st_ino && held.st_dev == now.st_dev)
        return CacheKeyLock(f.release(), path);
      // not ours to unlink: Fd closes it
    }
  } catch (const CacheError&) {
    return CacheKeyLock();
  }
}

fs::path CacheStore::private_dir(const std::string& name) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos ||
      (is_key_hex(name) && name.size() == 2))  // two hex digits name an entry shard
    throw CacheError("cache: bad directory name '" + printable(name) + "'");
  fs::path dir = ensure_version_dir(root_) / name;
  make_private_dir(dir);
  require_safe(dir, false);
  return dir;
}

}  // namespace metajit
