// The remote tier of the kernel cache (README "Sharing kernels across machines"): signed
// envelopes (envelope.h) in a Redis server shared by a fleet, under
//   metajit:<namespace>:kernel:<remote key>   one envelope per kernel
//   metajit:<namespace>:lease:<remote key>    "I am compiling it" (SET NX PX), a token value
// It never fails its caller because of the network: every failure is counted, warned about
// once per cause, and turns into a miss; after one the remote is left alone for a back-off
// (5 s, doubling to 5 min) before it is tried again. Uploads run on a background thread from a
// bounded queue, flushed briefly at exit. A child after fork() gets a fresh store.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "remote_cache/envelope.h"
#include "remote_cache/redis_connection.h"

namespace metajit {

struct Config;

// Process-wide counters of the remote tier (stats(), `metajit cache stats`).
struct RemoteCounters {
  std::atomic<uint64_t> hits{0}, misses{0}, rejected{0}, errors{0}, timeouts{0}, uploads{0};
};
RemoteCounters& remote_counters();

struct UploadJob {
  std::string remote_key;
  nlohmann::json info;  // merged into the envelope's header (backend, toolchain, producer...)
  std::vector<EnvelopeFile> files;
  std::string lease_token;  // released after the upload ("" when none is held)
};

struct RemoteStatus {
  std::string url, mode, name_space;
  bool readable = false, writable = false;  // what this configuration allows
  std::string signing_key;                  // its name, "" when none
  std::vector<std::string> trusted_keys;    // names
  bool trust_unsigned = false;
  std::vector<std::string> problems;  // configuration problems (why reads or writes are off)
  bool reachable = false;
  std::string error;  // why not reachable
  double ping_ms = 0;
  std::string server_version, maxmemory_policy;
  uint64_t used_memory = 0, maxmemory = 0;
  int64_t entries = -1;  // kernels in this namespace (-1: not counted)
};

class RemoteStore {
 public:
  // The store of the current config(), or nullptr when METAJIT_REMOTE_MODE is off (or no
  // METAJIT_REMOTE). Configuration problems are warned about once and switch reading or writing
  // off, never throw.
  static RemoteStore* current();

  explicit RemoteStore(const Config& c);
  ~RemoteStore();
  RemoteStore(const RemoteStore&) = delete;
  RemoteStore& operator=(const RemoteStore&) = delete;

  bool readable() const { return readable_; }
  bool writable() const { return writable_; }
  const std::string& url() const { return url_; }

  enum class Lookup : uint8_t { Hit, Miss, Rejected, Unavailable };
  // Looks `remote_key` up; a Hit's envelope has been verified completely (envelope.h).
  // Rejected: an entry was there but is not trusted or not sound (`why` says which). Misses and
  // rejections are counted here; a hit by the caller, once it has installed the kernel (it may
  // still refuse it: reject()).
  Lookup fetch(const std::string& remote_key, OpenedEnvelope& out, std::string& why);

  // Counts an entry the caller refused after fetch() (e.g. its source is not what this machine
  // generates for the kernel), with the same warning and log line as fetch()'s own refusals.
  void reject(const std::string& remote_key, const std::string& why);

  // What a lookup's miss finds a moment later, in the fleet-wide lease on compiling it.
  enum class Claim : uint8_t {
    Mine,     // this process took the lease (writers only): compile, upload, release
    Others,   // another machine holds it: wait for its entry (wait_for_entry)
    Arrived,  // the entry was uploaded since the lookup: fetch it again
    Free,     // nobody holds it (a reader), or the remote cannot be used: compile here
  };
  // Takes the lease on `remote_key` (writers; its token goes to `token`) or looks at it
  // (readers). The entry is looked for after the lease, and an uploader writes the entry before
  // it releases its lease, so a miss that raced with an upload ends in Arrived, never in a
  // second compile (tests/test_remote_fleet.cc, "... order the kernels differently ...").
  Claim claim(const std::string& remote_key, std::string& token);
  // Waits (METAJIT_REMOTE_WAIT at most) while another machine holds the lease: a Hit when its
  // entry arrives, Miss when the lease ends without one or the wait runs out.
  Lookup wait_for_entry(const std::string& remote_key, OpenedEnvelope& out, std::string& why);
  void release_lease(const std::string& remote_key, const std::string& token);

  // Queues an upload (writable only); a full queue drops it (and releases its lease).
  void upload_later(UploadJob job);
  // Uploads now (`metajit cache push`); false with `why` when it failed.
  bool upload_now(const UploadJob& job, std::string& why);
  // Waits up to `seconds` for the queued uploads to finish.
  void flush(double seconds);
  // Around fork() (pthread_atfork, registered with the first upload): hold_uploads() lets the
  // upload in flight finish (bounded by the timeouts) and starts no other, keeping the queue
  // locked; resume_uploads() unlocks it, in the parent and in the child.
  void hold_uploads();
  void resume_uploads();

  RemoteStatus status();

  std::string kernel_key_name(const std::string& remote_key) const;
  std::string lease_key_name(const std::string& remote_key) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string url_;
  bool readable_ = false, writable_ = false;
};

// "host:pid" and the time: who wrote an entry or holds a lease (messages, `cache show`).
nlohmann::json remote_producer();

}  // namespace metajit
