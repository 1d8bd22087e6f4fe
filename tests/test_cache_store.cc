// The on-disk cache (cache/cache_store.h, docs/design.md §6): atomic install, verification on find,
// removal of bad entries, concurrent installs, staging sweep, key prefixes, counters, eviction
// by age, permissions and symlinks. Entries hold a real shared object built by the host compiler.
#include <dlfcn.h>
#include <fcntl.h>
#include <metajit/error.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "base/checksum.h"
#include "cache/cache_store.h"
#include "runtime/compiler_driver.h"
#include "runtime/toolchain.h"
#include "support/exceptions.h"
#include "support/files.h"
#include "support/shared_object.h"
#include "support/threads.h"

using namespace metajit;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;
using metajit_test::count_entries;
using metajit_test::read_file;
using metajit_test::write_file;

namespace {

const char* kSource = "extern \"C\" int metajit_test_fn() { return 42; }\n";

// kernel.so built once per test process from kSource.
const fs::path& built_object() {
  return metajit_test::built_object(kSource);
}

// A staging directory holding what a compile leaves there: the source and the object.
fs::path stage(CacheStore& store) {
  fs::path staging = store.make_staging_dir();
  fs::copy_file(built_object(), staging / "kernel.so");
  std::ofstream(staging / "kernel.cc") << kSource;
  return staging;
}

nlohmann::json test_meta() {
  return {{"backend", "cpu"}, {"ops", {"exp", "mul"}}, {"compile_seconds", 0.25}};
}

std::string key_of(const std::string& name) {
  return xxh3_128_hex(name);
}

unsigned mode_of(const fs::path& p) {
  struct stat st;
  REQUIRE(::lstat(p.c_str(), &st) == 0);
  return unsigned(st.st_mode & 07777);
}

// Sets p's modification time `seconds` before now; returns the time set.
int64_t set_mtime_ago(const fs::path& p, int64_t seconds) {
  struct timespec times[2];
  times[0].tv_sec = times[1].tv_sec = std::time(nullptr) - seconds;
  times[0].tv_nsec = times[1].tv_nsec = 0;
  REQUIRE(::utimensat(AT_FDCWD, p.c_str(), times, AT_SYMLINK_NOFOLLOW) == 0);
  return int64_t(times[0].tv_sec);
}

int64_t mtime_of(const fs::path& p) {
  struct stat st;
  REQUIRE(::lstat(p.c_str(), &st) == 0);
  return int64_t(st.st_mtime);
}

template <class F>
std::string cache_error_of(F&& fn) {
  return metajit_test::message_of<CacheError>(fn);
}

}  // namespace

TEST_CASE("install then find returns a verified, loadable kernel.so", "[cache]") {
  metajit_test::TempDir tmp;
  const fs::path root = tmp.path() / "root";
  CacheStore store(root);
  CHECK_FALSE(fs::exists(root));  // constructing touches nothing

  const std::string key = key_of("install-then-find");
  fs::path staging = stage(store);
  CHECK(staging.parent_path() == store.version_dir() / "tmp");
  CHECK(mode_of(staging) == 0700);

  fs::path so = store.install(key, staging, test_meta());
  CHECK(so == store.entry_dir(key) / "kernel.so");
  CHECK(store.entry_dir(key) == root / "v1" / key.substr(0, 2) / key);
  CHECK_FALSE(fs::exists(staging));
  for (const fs::path& dir :
       {root, root / "v1", store.entry_dir(key).parent_path(), store.entry_dir(key)})
    CHECK(mode_of(dir) == 0700);

  nlohmann::json meta = store.read_meta(key);
  CHECK(meta["key"] == key);
  CHECK(meta["backend"] == "cpu");
  CHECK(meta["so_checksum"] == *xxh3_128_file_hex(so));
  CHECK(meta["source_checksum"] == xxh3_128_hex(std::string(kSource)));
  CHECK(meta["so_bytes"].get<uint64_t>() == fs::file_size(so));
  std::string created = meta["created"].get<std::string>();
  CHECK(created.size() == 20);
  CHECK(created.back() == 'Z');
  CHECK(store.read_source(key) == kSource);

  std::optional<fs::path> found = store.find(key);
  REQUIRE(found);
  CHECK(*found == so);
  CHECK(fs::exists(store.entry_dir(key) / ".used"));

  void* lib = ::dlopen(found->c_str(), RTLD_NOW | RTLD_LOCAL);
  REQUIRE(lib);
  auto fn = reinterpret_cast<int (*)()>(::dlsym(lib, "metajit_test_fn"));
  REQUIRE(fn);
  CHECK(fn() == 42);

  std::vector<CacheEntryInfo> entries = store.list();
  REQUIRE(entries.size() == 1);
  CHECK(entries[0].key == key);
  CHECK(entries[0].dir == store.entry_dir(key));
  CHECK(entries[0].backend == "cpu");
  CHECK(entries[0].ops == std::vector<std::string>{"exp", "mul"});
  CHECK(entries[0].compile_seconds == Approx(0.25));
  CHECK(entries[0].created == created);
  CHECK(entries[0].bytes == fs::file_size(so) + fs::file_size(store.entry_dir(key) / "meta.json") +
                                std::string(kSource).size());
  CHECK(entries[0].last_used == mtime_of(store.entry_dir(key) / ".used"));  // find() marked it

  CHECK_FALSE(store.find(key_of("never installed")));
  CHECK_FALSE(store.find("../../etc"));
  CHECK_FALSE(store.find(""));
  // A second object on the same root sees the same entry.
  CHECK(CacheStore(root).find(key) == so);
}

TEST_CASE("a bad entry is a miss and is removed", "[cache]") {
  metajit_test::TempDir tmp;
  CacheStore store(tmp.path());
  const std::string key = key_of("bad-entry");
  fs::path so = store.install(key, stage(store), test_meta());
  const fs::path dir = store.entry_dir(key);

  SECTION("truncated kernel.so") {
    fs::resize_file(so, fs::file_size(so) / 2);
  }
  SECTION("one flipped byte in kernel.so") {
    std::string bytes = read_file(so);
    bytes[bytes.size() / 2] ^= 0x01;
    write_file(so, bytes);
  }
  SECTION("kernel.so missing") {
    fs::remove(so);
  }
  SECTION("kernel.so is a symlink to an identical copy") {
    fs::copy_file(so, tmp.path() / "elsewhere.so");
    fs::remove(so);
    fs::create_symlink(tmp.path() / "elsewhere.so", so);
  }
  SECTION("garbled meta.json") {
    write_file(dir / "meta.json", "{\"key\": \"" + key + "\", ");
  }
  SECTION("meta.json is empty") {
    write_file(dir / "meta.json", "");
  }
  SECTION("meta.json names another key") {
    nlohmann::json meta = store.read_meta(key);
    meta["key"] = key_of("another");
    write_file(dir / "meta.json", meta.dump());
  }
  SECTION("source missing") {
    fs::remove(dir / "kernel.cc");
  }
  SECTION("source changed") {
    write_file(dir / "kernel.cc", "int changed;\n");
  }
  SECTION("entry directory writable by others") {
    fs::permissions(dir, fs::perms::all);
  }

  CHECK_FALSE(store.find(key));
  CHECK_FALSE(fs::exists(dir));
  CHECK(store.list().empty());
  // The entry was moved aside and deleted: nothing is left in the staging area.
  CHECK(count_entries(store.version_dir() / "tmp") == 0);
  // And the key can be installed again.
  CHECK(store.install(key, stage(store), test_meta()) == so);
  CHECK(store.find(key) == so);
}

TEST_CASE("a symlinked entry directory is never followed", "[cache]") {
  metajit_test::TempDir tmp;
  CacheStore store(tmp.path() / "a");
  CacheStore other(tmp.path() / "b");
  const std::string key = key_of("symlinked-entry");
  other.install(key, stage(other), test_meta());
  REQUIRE(other.find(key));
  fs::create_directories(store.entry_dir(key).parent_path());
  for (const fs::path& d :
       {tmp.path() / "a", tmp.path() / "a" / "v1", store.entry_dir(key).parent_path()})
    fs::permissions(d, fs::perms::owner_all);  // private, whatever the umask
  fs::create_directory_symlink(other.entry_dir(key), store.entry_dir(key));

  CHECK_FALSE(store.find(key));
  CHECK_FALSE(fs::is_symlink(store.entry_dir(key)));
  CHECK(other.find(key));  // the target was not touched
}

TEST_CASE("concurrent installs of one key leave one good entry", "[cache][concurrency]") {
  metajit_test::TempDir tmp;
  const std::string key = key_of("concurrent");
  constexpr int kThreads = 4;
  std::vector<fs::path> staged(kThreads), results(kThreads);
  std::vector<std::unique_ptr<CacheStore>> stores;
  for (int i = 0; i < kThreads; ++i) {
    stores.push_back(std::make_unique<CacheStore>(tmp.path()));
    staged[i] = stage(*stores[i]);
  }
  const std::vector<std::string> thrown = metajit_test::run_threads(
      kThreads, [&](int i) { results[i] = stores[i]->install(key, staged[i], test_meta()); });
  CHECK(thrown == std::vector<std::string>(kThreads));
  for (int i = 0; i < kThreads; ++i) {
    CHECK(results[i] == stores[0]->entry_dir(key) / "kernel.so");
    CHECK_FALSE(fs::exists(staged[i]));
  }
  CacheStore store(tmp.path());
  CHECK(store.list().size() == 1);
  CHECK(store.find(key));
  CHECK(count_entries(store.version_dir() / "tmp") == 0);
}

TEST_CASE("install replaces a bad entry that is in the way", "[cache]") {
  metajit_test::TempDir tmp;
  CacheStore store(tmp.path());
  const std::string key = key_of("replace-bad");
  fs::path so = store.install(key, stage(store), test_meta());
  fs::resize_file(so, 10);
  CHECK(store.install(key, stage(store), test_meta()) == so);
  CHECK(store.find(key) == so);
  CHECK(fs::file_size(so) == fs::file_size(built_object()));
}

TEST_CASE("install rejects bad keys and incomplete staging directories", "[cache]") {
  metajit_test::TempDir tmp;
  CacheStore store(tmp.path());
  CHECK_THAT(cache_error_of([&] { store.install("../evil", stage(store), test_meta()); }),
             Contains("not a hexadecimal key"));
  fs::path no_object = store.make_staging_dir();
  std::ofstream(no_object / "kernel.cc") << kSource;
  CHECK_THAT(cache_error_of([&] { store.install(key_of("x"), no_object, test_meta()); }),
             Contains("kernel.so"));
  fs::path no_source = store.make_staging_dir();
  fs::copy_file(built_object(), no_source / "kernel.so");
  CHECK_THAT(cache_error_of([&] { store.install(key_of("y"), no_source, test_meta()); }),
             Contains("kernel.cc"));
  CHECK(store.list().empty());
}

TEST_CASE("a CUDA entry keeps kernel.cu", "[cache]") {
  metajit_test::TempDir tmp;
  CacheStore store(tmp.path());
  fs::path staging = store.make_staging_dir();
  fs::copy_file(built_object(), staging / "kernel.so");
  std::ofstream(staging / "kernel.cu") << "__global__ void k() {}\n";
  const std::string key = key_of("cuda");
  store.install(key, staging, {{"backend", "cuda"}, {"ops", {"add"}}});
  CHECK(store.find(key));
  CHECK(store.read_source(key) == "__global__ void k() {}\n");
  CHECK(store.read_meta(key)["source_file"] == "kernel.cu");
  CHECK(store.list().at(0).backend == "cuda");
}

TEST_CASE("stale staging directories are swept, fresh ones kept", "[cache]") {
  metajit_test::TempDir tmp;
  CacheStore store(tmp.path());
  fs::path old_dir = store.make_staging_dir();
  fs::path fresh = store.make_staging_dir();
  CHECK(old_dir != fresh);
  std::ofstream(old_dir / "kernel.cc") << kSource;
  set_mtime_ago(old_dir, 7200);
  store.sweep_stale_staging(3600);
  CHECK_FALSE(fs::exists(old_dir));
  CHECK(fs::exists(fresh));

  store.discard(fresh);
  CHECK_FALSE(fs::exists(fresh));
  // discard() only ever deletes inside the staging area.
  fs::path outside = tmp.path() / "not-staging";
  fs::create_directory(outside);
  store.discard(outside);
  CHECK(fs::exists(outside));
  store.sweep_stale_staging(3600);  // a missing or empty staging area is fine
}

TEST_CASE("resolve_prefix: unique prefixes, and clear errors otherwise", "[cache]") {
  metajit_test::TempDir tmp;
  CacheStore store(tmp.path());
  const std::string a = "ab" + key_of("a").substr(2), b = "ab" + key_of("b").substr(2);
  const std::string c = "cd" + key_of("c").substr(2);
  REQUIRE(a.substr(0, 3) != b.substr(0, 3));
  for (const std::string& k : {a, b, c}) store.install(k, stage(store), test_meta());

  CHECK(store.resolve_prefix(a) == a);
  CHECK(store.resolve_prefix(a.substr(0, 3)) == a);
  CHECK(store.resolve_prefix("c") == c);
  CHECK(store.resolve_prefix("CD") == c);  // upper-case hex is accepted

  for (const std::string& bad : {std::string("../etc/passwd"), std::string("xyz"), std::string(""),
                                 std::string("ab/"), std::string(33, 'a'), std::string("a\nb")}) {
    std::string m = cache_error_of([&] { store.resolve_prefix(bad); });
    CHECK_THAT(m, Contains("not hexadecimal"));
    CHECK(m.find('\n') == std::string::npos);
  }
  CHECK_THAT(cache_error_of([&] { store.resolve_prefix("ef"); }),
             Contains("no cache entry matches 'ef'"));
  std::string ambiguous = cache_error_of([&] { store.resolve_prefix("ab"); });
  CHECK_THAT(ambiguous, Contains("ambiguous") && Contains(a) && Contains(b));
  CHECK_THAT(ambiguous, !Contains(c));
  CHECK_THAT(cache_error_of([&] { CacheStore(tmp.path() / "empty").resolve_prefix("ab"); }),
             Contains("no cache entry"));
}

TEST_CASE("an ambiguous prefix lists at most five candidates", "[cache]") {
  metajit_test::TempDir tmp;
  CacheStore store(tmp.path());
  for (int i = 0; i < 7; ++i)
    store.install("ee" + key_of(std::to_string(i)).substr(2), stage(store), test_meta());
  std::string m = cache_error_of([&] { store.resolve_prefix("ee"); });
  CHECK_THAT(m, Contains("and 2 more"));
}

TEST_CASE("counters persist across CacheStore objects", "[cache][stats]") {
  metajit_test::TempDir tmp;
  CHECK(CacheStore(tmp.path()).read_counters().compiles == 0);  // no file: zeros
  {
    CacheStore a(tmp.path());
    CacheCounters d;
    d.disk_hits = 2;
    d.compiles = 1;
    d.compile_seconds = 0.5;
    a.add_counters(d);
  }
  {
    CacheStore b(tmp.path());
    CacheCounters d;
    d.misses = 3;
    d.compiles = 1;
    d.errors = 1;
    d.evictions = 4;
    d.memory_hits = 5;
    b.add_counters(d);
  }
  CacheCounters c = CacheStore(tmp.path()).read_counters();
  CHECK(c.disk_hits == 2);
  CHECK(c.compiles == 2);
  CHECK(c.misses == 3);
  CHECK(c.errors == 1);
  CHECK(c.evictions == 4);
  CHECK(c.memory_hits == 5);
  CHECK(c.compile_seconds == Approx(0.5));
  CHECK(mode_of(tmp.path() / "v1" / "stats.json") == 0600);
}

TEST_CASE("concurrent counter updates are not lost", "[cache][stats][concurrency]") {
  metajit_test::TempDir tmp;
  const std::vector<std::string> thrown = metajit_test::run_threads(4, [&](int) {
    CacheStore store(tmp.path());
    CacheCounters d;
    d.compiles = 1;
    for (int i = 0; i < 25; ++i) store.add_counters(d);
  });
  CHECK(thrown == std::vector<std::string>(4));
  CHECK(CacheStore(tmp.path()).read_counters().compiles == 100);
}

TEST_CASE("garbled or unwritable statistics read as zeros and never throw", "[cache][stats]") {
  metajit_test::TempDir tmp;
  CacheStore store(tmp.path());
  CacheCounters one;
  one.misses = 1;
  store.add_counters(one);
  write_file(tmp.path() / "v1" / "stats.json", "{\"misses\": 7,");
  CHECK(store.read_counters().misses == 0);
  store.add_counters(one);
  CHECK(store.read_counters().misses == 1);
  write_file(tmp.path() / "v1" / "stats.json", "{\"misses\": -4, \"compiles\": \"x\"}");
  CHECK(store.read_counters().misses == 0);
  CHECK(store.read_counters().compiles == 0);

  // A root below a regular file can never be created.
  write_file(tmp.path() / "file", "x");
  CacheStore broken(tmp.path() / "file" / "cache");
  CHECK_NOTHROW(broken.add_counters(one));
  CHECK(broken.read_counters().misses == 0);
}

TEST_CASE("clear removes entries by last use", "[cache]") {
  metajit_test::TempDir tmp;
  CacheStore store(tmp.path());
  const std::string old_key = key_of("old"), new1 = key_of("new1"), new2 = key_of("new2");
  for (const std::string& k : {old_key, new1, new2}) {
    store.install(k, stage(store), test_meta());
    REQUIRE(store.find(k));  // creates .used
  }
  const int64_t old_use = set_mtime_ago(store.entry_dir(old_key) / ".used", 3 * 86400);
  std::vector<CacheEntryInfo> before = store.list();
  REQUIRE(before.size() == 3);
  for (const CacheEntryInfo& e : before)
    if (e.key == old_key) CHECK(e.last_used == old_use);

  CHECK(store.clear(86400) == 1);
  CHECK_FALSE(fs::exists(store.entry_dir(old_key)));
  CHECK(store.list().size() == 2);
  CHECK(store.clear() == 2);
  CHECK(store.list().empty());
  CHECK(count_entries(store.version_dir() / "tmp") == 0);
  CHECK(store.clear() == 0);
}

TEST_CASE("last use falls back to meta.json, and touch refreshes at most once a minute",
          "[cache]") {
  metajit_test::TempDir tmp;
  CacheStore store(tmp.path());
  const std::string key = key_of("touch");
  store.install(key, stage(store), test_meta());
  const fs::path used = store.entry_dir(key) / ".used";
  CHECK_FALSE(fs::exists(used));
  const int64_t installed = set_mtime_ago(store.entry_dir(key) / "meta.json", 1000);
  CHECK(store.list().at(0).last_used == installed);

  int64_t before_touch = std::time(nullptr);
  store.touch(key);
  REQUIRE(fs::exists(used));
  CHECK(store.list().at(0).last_used == mtime_of(used));  // the marker, now
  CHECK(mtime_of(used) >= before_touch);

  const int64_t recent = set_mtime_ago(used, 10);  // recent: left alone
  store.touch(key);
  CHECK(mtime_of(used) == recent);

  const int64_t stale = set_mtime_ago(used, 600);  // stale: refreshed
  before_touch = std::time(nullptr);
  store.touch(key);
  CHECK(mtime_of(used) > stale);
  CHECK(mtime_of(used) >= before_touch);
}

TEST_CASE("list skips everything that is not an entry", "[cache]") {
  metajit_test::TempDir tmp;
  CacheStore store(tmp.path());
  const std::string key = key_of("listed");
  store.install(key, stage(store), test_meta());
  store.make_staging_dir();
  CacheCounters d;
  d.misses = 1;
  store.add_counters(d);
  store.private_dir("toolchains");
  store.lock_key(key);
  fs::create_directories(store.version_dir() / "zz" / "zz1234");
  fs::create_directories(store.version_dir() / "ab" / "not-a-key");
  fs::create_directory_symlink(store.entry_dir(key),
                               store.version_dir() / key.substr(0, 2) / (key.substr(0, 2) + "ff"));
  std::vector<CacheEntryInfo> entries = store.list();
  REQUIRE(entries.size() == 1);
  CHECK(entries[0].key == key);
  CHECK(CacheStore(tmp.path() / "missing").list().empty());
}

TEST_CASE("an unusable or unsafe root is a CacheError and never a crash", "[cache][security]") {
  metajit_test::TempDir tmp;
  write_file(tmp.path() / "file", "x");
  CacheStore under_file(tmp.path() / "file" / "cache");
  CHECK_THAT(cache_error_of([&] { under_file.make_staging_dir(); }), Contains("file"));
  CHECK_FALSE(under_file.find(key_of("anything")));

  CacheStore store(tmp.path() / "root");
  const std::string key = key_of("unsafe-root");
  store.install(key, stage(store), test_meta());
  REQUIRE(store.find(key));
  fs::permissions(tmp.path() / "root", fs::perms::all);  // 0777: anyone could plant an object
  CHECK_FALSE(store.find(key));
  CHECK_THAT(cache_error_of([&] { store.make_staging_dir(); }),
             Contains("writable by group or others"));
  fs::permissions(tmp.path() / "root", fs::perms::owner_all);
  CHECK(store.find(key));  // refused, not deleted

  // v1 must be a real directory, not a symlink to somewhere else.
  CacheStore linked(tmp.path() / "linked");
  fs::create_directory(tmp.path() / "linked");
  fs::permissions(tmp.path() / "linked", fs::perms::owner_all);
  fs::create_directory_symlink(tmp.path() / "root" / "v1", tmp.path() / "linked" / "v1");
  CHECK_FALSE(linked.find(key));
  CHECK_THROWS_AS(linked.make_staging_dir(), CacheError);
}

TEST_CASE("lock_key serializes holders of one key", "[cache][concurrency]") {
  metajit_test::TempDir tmp;
  CacheStore store(tmp.path());
  const std::string key = key_of("locked");
  std::atomic<bool> asking{false}, released{false}, second_got_it{false};
  CacheKeyLock first = store.lock_key(key);
  REQUIRE(first.locked());
  CHECK(fs::exists(tmp.path() / "v1" / "locks" / (key + ".lock")));
  // The second holder records what it saw; the checks run here, after the join.
  bool second_locked = false, released_before_second = false;
  std::string thrown;
  std::thread t([&] {
    asking = true;  // first: the main thread waits for it, whatever happens next
    thrown = metajit_test::thrown_message([&] {
      CacheStore other(tmp.path());
      CacheKeyLock second = other.lock_key(key);
      second_locked = second.locked();
      released_before_second = released;
      second_got_it = true;
    });
  });
  // Give the second holder time to block on the lock (a slow thread makes this check weaker,
  // never wrong: released_before_second below is the real check).
  while (!asking) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  CHECK_FALSE(second_got_it);
  released = true;
  first = CacheKeyLock();
  t.join();
  CHECK(thrown.empty());
  CHECK(second_got_it);
  CHECK(second_locked);
  CHECK(released_before_second);  // only after the first holder let go
  CHECK_FALSE(fs::exists(tmp.path() / "v1" / "locks" / (key + ".lock")));  // no debris
  // Other keys are independent.
  CHECK(store.lock_key(key_of("other")).locked());
  CHECK_FALSE(store.lock_key("not hex").locked());
}

TEST_CASE("write_file_atomically replaces a file whole", "[cache]") {
  metajit_test::TempDir tmp;
  const fs::path p = tmp.path() / "file.json";
  write_file_atomically(p, "first");
  CHECK(read_file(p) == "first");
  write_file_atomically(p, "second", /*durable=*/false);
  CHECK(read_file(p) == "second");
  CHECK(count_entries(tmp.path()) == 1);  // no temp file left behind
  CHECK(mode_of(p) == 0600);
  CHECK_THROWS_AS(write_file_atomically(tmp.path() / "missing" / "x", "y"), CacheError);
}

TEST_CASE("checksums and key syntax", "[cache][checksum]") {
  std::string h = xxh3_128_hex(std::string("metajit"));
  CHECK(h.size() == 32);
  CHECK(is_key_hex(h));
  CHECK(h != xxh3_128_hex(std::string("metajiT")));
  CHECK(xxh3_128_hex(std::string()) == "99aa06d3014798d86001c324468d497f");  // XXH3-128 of ""
  metajit_test::TempDir tmp;
  write_file(tmp.path() / "f", "metajit");
  CHECK(xxh3_128_file_hex(tmp.path() / "f") == h);
  CHECK_FALSE(xxh3_128_file_hex(tmp.path() / "missing"));
  CHECK(is_key_hex("0"));
  CHECK_FALSE(is_key_hex(""));
  CHECK_FALSE(is_key_hex("ABC"));
  CHECK_FALSE(is_key_hex("0g"));
  CHECK_FALSE(is_key_hex(std::string(33, 'a')));
}

TEST_CASE("contended locks exclude each other and leave no lock files", "[cache][concurrency]") {
  metajit_test::TempDir tmp;
  const std::string key = key_of("contended");
  std::atomic<int> inside{0}, max_inside{0}, entered{0}, not_locked{0};
  const std::vector<std::string> thrown = metajit_test::run_threads(8, [&](int) {
    CacheStore store(tmp.path());
    for (int round = 0; round < 25; ++round) {
      CacheKeyLock lock = store.lock_key(key);
      if (!lock.locked()) {
        ++not_locked;
        continue;
      }
      int now = ++inside;
      int seen = max_inside.load();
      while (now > seen && !max_inside.compare_exchange_weak(seen, now)) {
      }
      std::this_thread::yield();
      --inside;
      ++entered;
    }
  });
  CHECK(thrown == std::vector<std::string>(8));
  CHECK(not_locked == 0);
  CHECK(entered == 200);
  CHECK(max_inside == 1);  // holders of one key never overlap, though files come and go
  CHECK(count_entries(tmp.path() / "v1" / "locks") == 0);
}

TEST_CASE("evict removes least recently used entries first, down to the limit", "[cache][evict]") {
  metajit_test::TempDir tmp;
  CacheStore store(tmp.path());
  std::vector<std::string> keys;
  for (int i = 0; i < 5; ++i) {
    keys.push_back(key_of("lru-" + std::to_string(i)));
    store.install(keys.back(), stage(store), test_meta());
  }
  // Entry i was last used 50-10*i minutes ago: entry 0 is the least recently used. Entry 1 is
  // then used again now, which makes it the most recent.
  for (int i = 0; i < 5; ++i) {
    write_file(store.entry_dir(keys[i]) / ".used", "");
    set_mtime_ago(store.entry_dir(keys[i]) / ".used", 3000 - 600 * i);
  }
  write_file(store.entry_dir(keys[1]) / ".used", "");
  set_mtime_ago(store.entry_dir(keys[1]) / ".used", 120);
  store.touch(keys[1]);  // older than a minute: refreshed now
  std::vector<CacheEntryInfo> before = store.list();
  REQUIRE(before.size() == 5);
  const uint64_t one = before[0].bytes;
  uint64_t total = 0;
  for (const CacheEntryInfo& e : before) total += e.bytes;

  EvictionResult r = store.evict(total - 1, /*wait=*/true);  // just over: one must go
  CHECK(r.ran);
  CHECK(r.removed == 1);
  CHECK_FALSE(fs::exists(store.entry_dir(keys[0])));

  r = store.evict(3 * one + one / 2, true);  // room for three
  CHECK(r.removed == 1);
  CHECK(r.entries_left == 3);
  CHECK(r.bytes_left <= 3 * one + one / 2);
  CHECK_FALSE(fs::exists(store.entry_dir(keys[2])));
  for (int i : {1, 3, 4}) CHECK(fs::exists(store.entry_dir(keys[i])));  // 1 was used recently

  CHECK(store.read_counters().evictions == 2);
  CHECK(uint64_t(store.read_counters().bytes) == r.bytes_left);  // the estimate is measured
  CHECK(store.evict(uint64_t(1) << 40, true).removed == 0);
  CHECK(store.evict(0, true).entries_left == 0);
  CHECK(store.list().empty());
  CHECK(count_entries(store.version_dir() / "tmp") == 0);  // removed atomically, fully
}

TEST_CASE("evict does not wait for another evicting process", "[cache][evict]") {
  metajit_test::TempDir tmp;
  CacheStore store(tmp.path());
  store.install(key_of("busy"), stage(store), test_meta());
  int fd = ::open((store.version_dir() / "evict.lock").c_str(), O_RDWR | O_CREAT, 0600);
  REQUIRE(fd >= 0);
  REQUIRE(::flock(fd, LOCK_EX) == 0);
  CHECK_FALSE(store.evict(0, /*wait=*/false).ran);
  CHECK(store.list().size() == 1);
  ::close(fd);
  CHECK(store.evict(0, false).ran);
  CHECK(store.list().empty());
}

TEST_CASE("installs keep a size estimate that maintain() acts on", "[cache][evict]") {
  metajit_test::TempDir tmp;
  CacheStore store(tmp.path());
  CHECK_FALSE(store.has_size_estimate());
  store.maintain(uint64_t(1) << 30);  // unknown: measured (an empty cache)
  CHECK(store.has_size_estimate());
  uint64_t bytes = 0;
  store.install(key_of("sized"), stage(store), test_meta(), &bytes);
  CHECK(bytes == store.list()[0].bytes);
  CacheCounters d;
  d.bytes = int64_t(bytes);
  store.add_counters(d);
  CHECK(uint64_t(store.read_counters().bytes) == bytes);
  store.maintain(bytes);  // at the limit: nothing to do
  CHECK(store.list().size() == 1);
  store.maintain(bytes - 1);
  CHECK(store.list().empty());
  CHECK(store.read_counters().bytes == 0);
}

TEST_CASE("verify reports bad entries and debris, and sweep removes the debris",
          "[cache][verify]") {
  metajit_test::TempDir tmp;
  CacheStore store(tmp.path());
  CHECK(store.verify().empty());  // no cache at all is fine
  const std::string good = key_of("good"), bad = key_of("bad"), gone = key_of("gone-source");
  for (const std::string& k : {good, bad, gone}) store.install(k, stage(store), test_meta());
  CHECK(store.verify().empty());

  fs::resize_file(store.entry_dir(bad) / "kernel.so", 100);
  fs::remove(store.entry_dir(gone) / "kernel.cc");
  // Debris of a dead process: a staging directory named by a pid that does not run, a lock
  // file nobody holds, a stray file in a shard.
  fs::path dead = store.make_staging_dir();
  std::string name = dead.filename().string();
  fs::path dead_name = dead.parent_path() / ("999999999" + name.substr(name.find('-')));
  fs::rename(dead, dead_name);
  fs::path live = store.make_staging_dir();  // ours: alive, young
  CacheKeyLock held = store.lock_key(key_of("held"));
  write_file(store.version_dir() / "locks" / (key_of("orphan") + ".lock"), "");
  write_file(store.entry_dir(good).parent_path() / "stray.txt", "x");

  std::vector<CacheProblem> problems = store.verify();
  std::map<std::string, std::string> by_what;
  for (const CacheProblem& p : problems)
    by_what[p.key.empty() ? p.path.filename().string() : p.key] = p.what;
  CHECK(problems.size() == 5);
  CHECK_THAT(by_what[bad], Contains("kernel.so is 100 bytes"));
  CHECK_THAT(by_what[gone], Contains("kernel.cc"));
  CHECK_THAT(by_what[dead_name.filename().string()], Contains("dead process"));
  CHECK_THAT(by_what[key_of("orphan") + ".lock"], Contains("lock file"));
  CHECK(by_what["stray.txt"] == "not a cache entry");
  CHECK(by_what.count(good) == 0);
  CHECK(by_what.count(live.filename().string()) == 0);

  CHECK(store.sweep_stale_staging() == 2);  // the dead staging dir and the orphan lock
  CHECK_FALSE(fs::exists(dead_name));
  CHECK(fs::exists(live));
  CHECK(fs::exists(store.version_dir() / "locks" / (key_of("held") + ".lock")));
  CHECK(store.verify().size() == 3);
}
