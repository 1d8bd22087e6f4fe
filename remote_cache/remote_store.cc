#include "remote_cache/remote_store.h"

#include <metajit/error.h>
#include <pthread.h>
#include <sodium.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <ctime>
#include <deque>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>
#include <utility>

#include "base/config.h"
#include "base/log.h"
#include "remote_cache/redis_endpoint.h"

namespace metajit {
namespace {

using Clock = std::chrono::steady_clock;

constexpr double kFirstBackoffSeconds = 5;
constexpr double kMaxBackoffSeconds = 300;
constexpr double kMaxConnectSeconds = 1;  // "a short connect timeout"
constexpr size_t kUploadQueueLimit = 256;
constexpr double kLeasePollSeconds = 0.05;
constexpr double kExitFlushSeconds = 5;

std::string read_password(const std::string& file, std::string& why) {
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    why = "METAJIT_REMOTE_PASSWORD_FILE: cannot read " + file;
    return "";
  }
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  return text;
}

std::string random_token() {
  ensure_sodium();
  unsigned char bytes[16];
  randombytes_buf(bytes, sizeof bytes);
  std::string out;
  for (unsigned char b : bytes) {
    static const char* hex = "0123456789abcdef";
    out += hex[b >> 4];
    out += hex[b & 15];
  }
  return out;
}

std::string host_name() {
  char buf[256] = {0};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

// Uploads still queued at exit get a moment to finish (stores are never destroyed). A child of
// fork() inherits the registration but not the upload threads: it skips its parent's stores.
// The same stores are held still across fork(): the upload in flight finishes (each command has
// its deadline) and no other starts until fork() returns, so the child never inherits an upload
// half done on a thread that does not exist there (its buffers, its connection's state).
std::mutex uploaders_mu;
std::vector<std::pair<RemoteStore*, pid_t>>* uploaders =
    new std::vector<std::pair<RemoteStore*, pid_t>>;

void flush_at_exit(RemoteStore* store) {
  std::lock_guard<std::mutex> lock(uploaders_mu);
  if (uploaders->empty()) {
    std::atexit([] {
      std::vector<std::pair<RemoteStore*, pid_t>> all;
      {
        std::lock_guard<std::mutex> lock(uploaders_mu);
        all = *uploaders;
      }
      for (auto& [s, pid] : all)
        if (pid == ::getpid()) s->flush(kExitFlushSeconds);
    });
    ::pthread_atfork(
        [] {
          uploaders_mu.lock();
          for (auto& [s, pid] : *uploaders)
            if (pid == ::getpid()) s->hold_uploads();
        },
        [] {
          for (auto& [s, pid] : *uploaders)
            if (pid == ::getpid()) s->resume_uploads();
          uploaders_mu.unlock();
        },
        [] {
          // The child: its parent's (held) stores are not its own; their locks are released
          // so nothing waits on them, and it makes stores of its own (current()).
          for (auto& [s, pid] : *uploaders) s->resume_uploads();
          uploaders_mu.unlock();
        });
  }
  uploaders->emplace_back(store, ::getpid());
}

}  // namespace

RemoteCounters& remote_counters() {
  static RemoteCounters* c = new RemoteCounters;
  return *c;
}

nlohmann::json remote_producer() {
  std::time_t now = std::time(nullptr);
  char when[32];
  std::tm tm{};
  gmtime_r(&now, &tm);
  std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return {{"host", host_name()}, {"pid", int64_t(::getpid())}, {"created", when}};
}

struct RemoteStore::Impl {
  RedisEndpoint endpoint;
  std::string password;
  double op_timeout = 2, wait_seconds = 60;
  std::string prefix;  // metajit:<namespace>:
  EnvelopeTrust trust;
  std::unique_ptr<SecretKey> signer;

  // Foreground operations share one connection; the uploader has its own. Each remembers how
  // many failures there had been when it was made (see run()).
  std::mutex fg_mu;
  std::unique_ptr<RedisConnection> fg;
  uint64_t fg_made_after = 0, up_made_after = 0;
  std::atomic<uint64_t> failures{0};

  // Back-off after a failure, shared by both connections.
  std::mutex backoff_mu;
  Clock::time_point down_until{};
  double backoff = kFirstBackoffSeconds;

  // Uploads.
  std::mutex up_mu;
  std::condition_variable up_cv, idle_cv;
  std::deque<UploadJob> queue;
  bool uploading = false, stopping = false;
  bool held = false;          // fork() in progress: hold_uploads()
  std::once_flag registered;  // with flush_at_exit()
  std::thread worker;
  std::unique_ptr<RedisConnection> up;

  bool in_backoff() {
    std::lock_guard<std::mutex> lock(backoff_mu);
    return Clock::now() < down_until;
  }

  void failed(const RedisFailure& f) {
    failures++;
    RemoteCounters& c = remote_counters();
    c.errors++;
    if (f.kind == RemoteFailure::Timeout) c.timeouts++;
    double wait;
    {
      std::lock_guard<std::mutex> lock(backoff_mu);
      wait = backoff;
      down_until = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(backoff));
      backoff = std::min(backoff * 2, kMaxBackoffSeconds);
    }
    warn_once(std::string("remote:") + remote_failure_name(f.kind),
              std::string("remote cache (") + remote_failure_name(f.kind) + "): " + f.what() +
                  "; kernels are compiled locally (the remote is tried again in " +
                  std::to_string(int(wait)) + " s)");
    log_message(LogLevel::Debug, std::string("remote cache: ") + f.what());
  }

  void succeeded() {
    std::lock_guard<std::mutex> lock(backoff_mu);
    backoff = kFirstBackoffSeconds;
  }

  // Runs `fn` on `conn` (connecting first when needed). False (counted, warned) on failure or
  // while backing off. A connection made before the latest failure, of either connection, is
  // made afresh: the server went away or restarted meanwhile, and the idle one would fail on
  // its first write to the old server (after a restart, the uploads would be lost).
  bool run(std::unique_ptr<RedisConnection>& conn, uint64_t& made_after,
           const std::function<void(RedisConnection&)>& fn) {
    if (in_backoff()) return false;
    try {
      if (!conn || conn->broken() || made_after != failures.load()) {
        conn.reset();
        made_after = failures.load();
        conn = std::make_unique<RedisConnection>(
            endpoint, password, std::min(op_timeout, kMaxConnectSeconds), op_timeout);
      }
      fn(*conn);
      succeeded();
      return true;
    } catch (const RedisFailure& f) {
      if (conn && conn->broken()) conn.reset();  // an error reply leaves it working
      failed(f);
      return false;
    }
  }
  bool run_fg(const std::function<void(RedisConnection&)>& fn) {
    std::lock_guard<std::mutex> lock(fg_mu);
    return run(fg, fg_made_after, fn);
  }

  static RedisReply checked(RedisConnection& c, const std::vector<std::string>& args,
                            size_t max_bytes = 1 << 20) {
    RedisReply r = c.command(args, max_bytes);
    if (r.kind == RedisReply::Kind::Error)
      throw RedisFailure(classify_error_reply(r.str), args[0] + ": " + r.str);
    return r;
  }

  bool put(RedisConnection& c, const UploadJob& job) {
    std::string value = seal_envelope(job.remote_key, job.info, job.files, signer.get());
    checked(c, {"SET", prefix + "kernel:" + job.remote_key, value});
    remote_counters().uploads++;
    log_message(LogLevel::Info, "remote: uploaded " + job.remote_key + " (" +
                                    std::to_string(value.size()) + " bytes)");
    return true;
  }

  void release(RedisConnection& c, const std::string& remote_key, const std::string& token) {
    // Deletes the lease only while it is still ours (it may have expired and been retaken).
    static const char* script =
        "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end "
        "return 0";
    checked(c, {"EVAL", script, "1", prefix + "lease:" + remote_key, token});
  }

  // The uploader's connection after the server refused an upload with an error reply (out of
  // memory, not allowed...): it still works, and gives back the leases of that upload and of the
  // ones dropped while backing off. A lease promises an entry; left behind, it would make every
  // other machine wait for that entry until the lease expires (METAJIT_REMOTE_WAIT).
  std::unique_ptr<RedisConnection> refused;

  void give_back(const UploadJob& job) {
    if (job.lease_token.empty() || !refused || refused->broken()) return;
    try {
      release(*refused, job.remote_key, job.lease_token);
    } catch (const RedisFailure&) {
      // Best effort: the lease expires in the end anyway.
    }
  }

  void work() {
    std::unique_lock<std::mutex> lock(up_mu);
    for (;;) {
      up_cv.wait(lock, [this] { return stopping || (!queue.empty() && !held); });
      if (queue.empty()) return;
      UploadJob job = std::move(queue.front());
      queue.pop_front();
      uploading = true;
      lock.unlock();
      const bool skipped = in_backoff();
      const bool done = run(up, up_made_after, [&](RedisConnection& c) {
        try {
          put(c, job);
        } catch (const CacheError& e) {
          log_message(LogLevel::Warn, std::string("remote upload: ") + e.what());
        }
        if (!job.lease_token.empty()) release(c, job.remote_key, job.lease_token);
      });
      if (done) {
        refused.reset();
      } else {
        if (!skipped) refused = up && !up->broken() ? std::move(up) : nullptr;
        give_back(job);
      }
      lock.lock();
      uploading = false;
      idle_cv.notify_all();
    }
  }
};

RemoteStore::RemoteStore(const Config& c) : impl_(std::make_unique<Impl>()), url_(c.remote_url) {
  if (c.remote_mode == "off" || c.remote_url.empty()) return;
  Impl& m = *impl_;
  std::string why;
  std::optional<RedisEndpoint> endpoint = parse_redis_url(c.remote_url, why);
  if (!endpoint) {
    warn_once("remote-config", why + "; the remote cache is off");
    return;
  }
  m.endpoint = *endpoint;
  if (!c.remote_password_file.empty()) {
    m.password = read_password(c.remote_password_file, why);
    if (!why.empty()) {
      warn_once("remote-config", why + "; the remote cache is off");
      return;
    }
  }
  m.op_timeout = c.remote_timeout_seconds;
  m.wait_seconds = c.remote_wait_seconds;
  m.prefix = "metajit:" + c.remote_namespace + ":";
  m.trust.allow_unsigned = c.remote_trust_unsigned;
  if (c.remote_trust_unsigned)
    log_message(LogLevel::Warn,
                "METAJIT_REMOTE_TRUST=unsigned: kernels from " + c.remote_url +
                    " are loaded without checking signatures; anyone who can write to that "
                    "server can run code in this process");
  readable_ = c.remote_trust_unsigned;
  if (!c.remote_trusted_keys.empty()) {
    try {
      m.trust.keys = load_public_keys(c.remote_trusted_keys);
      if (!m.trust.keys.empty())
        readable_ = true;
      else if (!c.remote_trust_unsigned)
        warn_once("remote-trust", "METAJIT_REMOTE_TRUSTED_KEYS: " + c.remote_trusted_keys +
                                      " holds no keys; remote reads are off");
    } catch (const CacheError& e) {
      warn_once("remote-trust", std::string(e.what()) + "; remote reads are off");
    }
  } else if (!c.remote_trust_unsigned) {
    warn_once("remote-trust",
              "METAJIT_REMOTE is set but METAJIT_REMOTE_TRUSTED_KEYS is not: remote reads are off "
              "(name a file of trusted public keys, or set METAJIT_REMOTE_TRUST=unsigned)");
  }
  if (c.remote_mode == "readwrite") {
    if (!c.remote_signing_key.empty()) {
      try {
        m.signer = std::make_unique<SecretKey>(load_secret_key(c.remote_signing_key));
        writable_ = true;
      } catch (const CacheError& e) {
        warn_once("remote-sign", std::string(e.what()) + "; remote writes are off");
      }
    } else if (c.remote_trust_unsigned) {
      writable_ = true;  // unsigned entries, for a fleet that opted out of signatures
    } else {
      warn_once("remote-sign",
                "METAJIT_REMOTE_MODE=readwrite needs METAJIT_REMOTE_SIGNING_KEY (make one with "
                "`metajit remote keygen NAME -o FILE`); remote writes are off");
    }
  }
}

RemoteStore::~RemoteStore() {
  if (!impl_) return;
  {
    std::lock_guard<std::mutex> lock(impl_->up_mu);
    impl_->stopping = true;
  }
  impl_->up_cv.notify_all();
  if (impl_->worker.joinable()) impl_->worker.join();
}

std::string RemoteStore::kernel_key_name(const std::string& remote_key) const {
  return impl_->prefix + "kernel:" + remote_key;
}
std::string RemoteStore::lease_key_name(const std::string& remote_key) const {
  return impl_->prefix + "lease:" + remote_key;
}

RemoteStore::Lookup RemoteStore::fetch(const std::string& remote_key, OpenedEnvelope& out,
                                       std::string& why) {
  if (!readable_) return Lookup::Unavailable;
  Impl& m = *impl_;
  const EnvelopeLimits limits;
  std::string value;
  bool found = false;
  bool ok = m.run_fg([&](RedisConnection& c) {
    // GETRANGE bounds what the server sends: one byte past the limit says "too large".
    RedisReply r = Impl::checked(
        c,
        {"GETRANGE", kernel_key_name(remote_key), "0", std::to_string(limits.max_envelope_bytes)},
        limits.max_envelope_bytes + 1);
    found = r.kind == RedisReply::Kind::String && !r.str.empty();
    value = std::move(r.str);
  });
  if (!ok) return Lookup::Unavailable;
  RemoteCounters& counters = remote_counters();
  if (!found) {
    counters.misses++;
    return Lookup::Miss;
  }
  std::optional<OpenedEnvelope> opened = open_envelope(value, remote_key, m.trust, why, limits);
  if (!opened) {
    counters.rejected++;
    warn_once("remote-rejected", "remote cache: rejected an entry (" + why +
                                     "); it is compiled locally (METAJIT_LOG=info lists each)");
    log_message(LogLevel::Info, "remote: rejected " + remote_key + ": " + why);
    return Lookup::Rejected;
  }
  out = std::move(*opened);
  return Lookup::Hit;  // counted by the caller once the kernel is installed
}

void RemoteStore::reject(const std::string& remote_key, const std::string& why) {
  remote_counters().rejected++;
  warn_once("remote-rejected", "remote cache: rejected an entry (" + why +
                                   "); it is compiled locally (METAJIT_LOG=info lists each)");
  log_message(LogLevel::Info, "remote: rejected " + remote_key + ": " + why);
}

RemoteStore::Claim RemoteStore::claim(const std::string& remote_key, std::string& token) {
  token.clear();
  if (!readable_ && !writable_) return Claim::Free;
  Impl& m = *impl_;
  const std::string mine = writable_ ? random_token() : std::string();
  // The lease outlives a compile by a margin; a holder that dies frees it when it expires.
  const long long ttl_ms = (long long)(std::max(m.wait_seconds, 1.0) * 1000);
  bool taken = false, held = false, arrived = false;
  bool ok = m.run_fg([&](RedisConnection& c) {
    if (writable_)
      held = !(taken = Impl::checked(c, {"SET", lease_key_name(remote_key), mine, "NX", "PX",
                                         std::to_string(ttl_ms)})
                           .kind == RedisReply::Kind::Status);
    else
      held = Impl::checked(c, {"EXISTS", lease_key_name(remote_key)}).integer > 0;
    // Looked for after the lease: an entry written before its uploader released the lease is
    // seen here. A writer looks also when another holds the lease (its upload may be done).
    if (readable_ && (writable_ || !held))
      arrived = Impl::checked(c, {"EXISTS", kernel_key_name(remote_key)}).integer > 0;
  });
  // Not usable: nobody waits. A lease taken although its reply was lost expires in the end.
  if (!ok) return Claim::Free;
  if (arrived) {
    if (taken) release_lease(remote_key, mine);
    return Claim::Arrived;
  }
  if (taken) {
    token = mine;
    return Claim::Mine;
  }
  return held && readable_ ? Claim::Others : Claim::Free;
}

RemoteStore::Lookup RemoteStore::wait_for_entry(const std::string& remote_key, OpenedEnvelope& out,
                                                std::string& why) {
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(impl_->wait_seconds));
  log_message(LogLevel::Info, "remote: waiting for another machine to compile " + remote_key);
  while (Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::duration<double>(kLeasePollSeconds));
    bool exists = false, lease = false;
    bool ok = impl_->run_fg([&](RedisConnection& c) {
      exists = Impl::checked(c, {"EXISTS", kernel_key_name(remote_key)}).integer > 0;
      if (!exists) lease = Impl::checked(c, {"EXISTS", lease_key_name(remote_key)}).integer > 0;
      // The upload may have ended between the two: its entry is written before its lease ends.
      if (!exists && !lease)
        exists = Impl::checked(c, {"EXISTS", kernel_key_name(remote_key)}).integer > 0;
    });
    if (!ok) return Lookup::Unavailable;
    if (exists) return fetch(remote_key, out, why);
    if (!lease) break;
  }
  // The holder finished without an entry, died, or is slower than the wait: compile here. Not
  // counted again: the lookup before the wait (fetch) counted its miss.
  return Lookup::Miss;
}

void RemoteStore::release_lease(const std::string& remote_key, const std::string& token) {
  if (token.empty()) return;
  impl_->run_fg([&](RedisConnection& c) { impl_->release(c, remote_key, token); });
}

void RemoteStore::upload_later(UploadJob job) {
  if (!writable_) return;
  Impl& m = *impl_;
  // Registered before the first job, outside up_mu: the fork handlers take the registry's
  // lock, then up_mu.
  std::call_once(m.registered, [this] { flush_at_exit(this); });
  {
    std::lock_guard<std::mutex> lock(m.up_mu);
    if (m.queue.size() < kUploadQueueLimit) {
      if (!m.worker.joinable()) m.worker = std::thread([&m] { m.work(); });
      m.queue.push_back(std::move(job));
      m.up_cv.notify_one();
      return;
    }
  }
  warn_once("remote-queue", "remote cache: the upload queue is full; some kernels are not shared");
  release_lease(job.remote_key, job.lease_token);
}

bool RemoteStore::upload_now(const UploadJob& job, std::string& why) {
  if (!writable_) {
    why = "remote writes are off (METAJIT_REMOTE_MODE=readwrite and a signing key are needed)";
    return false;
  }
  bool ok = impl_->run_fg([&](RedisConnection& c) { impl_->put(c, job); });
  if (!ok) why = impl_->in_backoff() ? "the remote cache is unavailable" : "upload failed";
  return ok;
}

void RemoteStore::hold_uploads() {
  Impl& m = *impl_;
  std::unique_lock<std::mutex> lock(m.up_mu);
  m.held = true;
  // Bounded: an upload is a SET and a lease release, each within the operation timeout.
  m.idle_cv.wait_for(lock, std::chrono::duration<double>(2 * m.op_timeout + kMaxConnectSeconds),
                     [&m] { return !m.uploading; });
  lock.release();  // up_mu stays locked until resume_uploads(), in the parent and the child
}

void RemoteStore::resume_uploads() {
  Impl& m = *impl_;
  m.held = false;
  m.up_mu.unlock();
  m.up_cv.notify_all();
}

void RemoteStore::flush(double seconds) {
  Impl& m = *impl_;
  std::unique_lock<std::mutex> lock(m.up_mu);
  m.idle_cv.wait_for(lock, std::chrono::duration<double>(seconds),
                     [&m] { return m.queue.empty() && !m.uploading; });
}

RemoteStatus RemoteStore::status() {
  const Config& c = config();
  RemoteStatus s;
  s.url = c.remote_url;
  s.mode = c.remote_mode;
  s.name_space = c.remote_namespace;
  s.readable = readable_;
  s.writable = writable_;
  s.trust_unsigned = impl_->trust.allow_unsigned;
  if (impl_->signer) s.signing_key = impl_->signer->name;
  for (const PublicKey& k : impl_->trust.keys) s.trusted_keys.push_back(k.name);
  if (c.remote_mode == "off" || c.remote_url.empty()) return s;
  std::string why;
  if (!parse_redis_url(c.remote_url, why)) {
    s.error = why;
    return s;
  }
  Impl& m = *impl_;
  std::unique_ptr<RedisConnection> conn;
  try {
    auto start = Clock::now();
    conn = std::make_unique<RedisConnection>(
        m.endpoint, m.password, std::min(m.op_timeout, kMaxConnectSeconds), m.op_timeout);
    RedisReply pong = Impl::checked(*conn, {"PING"});
    s.ping_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    s.reachable = pong.kind == RedisReply::Kind::Status;
    // INFO may be refused to a reader's ACL user: then the policy stays unknown.
    RedisReply info = conn->command({"INFO", "all"}, 1 << 20);
    if (info.kind == RedisReply::Kind::String) {
      std::istringstream lines(info.str);
      for (std::string line; std::getline(lines, line);) {
        if (!line.empty() && line.back() == '\r') line.pop_back();
        auto value = [&line](const char* field) -> std::optional<std::string> {
          std::string f = std::string(field) + ":";
          if (line.rfind(f, 0) != 0) return std::nullopt;
          return line.substr(f.size());
        };
        if (auto v = value("redis_version")) s.server_version = *v;
        if (auto v = value("maxmemory_policy")) s.maxmemory_policy = *v;
        if (auto v = value("used_memory")) s.used_memory = std::stoull(*v);
        if (auto v = value("maxmemory")) s.maxmemory = std::stoull(*v);
      }
    }
    // Counting entries walks the namespace with SCAN (bounded: a few seconds at most).
    int64_t entries = 0;
    std::string cursor = "0";
    const auto stop = Clock::now() + std::chrono::seconds(5);
    do {
      RedisReply r =
          conn->command({"SCAN", cursor, "MATCH", m.prefix + "kernel:*", "COUNT", "1000"}, 1 << 22);
      if (r.kind != RedisReply::Kind::Array || r.elements.size() != 2) {
        entries = -1;
        break;
      }
      cursor = r.elements[0].str;
      entries += int64_t(r.elements[1].elements.size());
    } while (cursor != "0" && Clock::now() < stop);
    s.entries = cursor == "0" ? entries : -1;
  } catch (const RedisFailure& f) {
    s.error = std::string(remote_failure_name(f.kind)) + ": " + f.what();
  } catch (const std::exception& e) {
    s.error = e.what();
  }
  return s;
}

RemoteStore* RemoteStore::current() {
  static std::mutex mu;
  static std::map<std::string, RemoteStore*>* stores = new std::map<std::string, RemoteStore*>;
  static pid_t owner = ::getpid();
  const Config& c = config();
  if (c.remote_mode == "off" || c.remote_url.empty()) return nullptr;
  std::lock_guard<std::mutex> lock(mu);
  if (::getpid() != owner) {
    // A child of fork(): the parent's connections and upload thread are not ours. Close our
    // copies of the sockets and start afresh (the old stores are left, never used again).
    for (auto& [setting, store] : *stores) {
      store->impl_->fg.reset();
      store->impl_->up.reset();
      store->impl_->refused.reset();
    }
    static auto* retired = new std::vector<std::map<std::string, RemoteStore*>*>;
    retired->push_back(stores);  // reachable still: their memory is the parent's to free
    stores = new std::map<std::string, RemoteStore*>;
    owner = ::getpid();
  }
  std::string setting;
  for (const std::string* f :
       {&c.remote_url, &c.remote_mode, &c.remote_namespace, &c.remote_password_file,
        &c.remote_signing_key, &c.remote_trusted_keys})
    setting += *f + '\n';
  setting += std::to_string(c.remote_timeout_seconds) + "\n" +
             std::to_string(c.remote_wait_seconds) + "\n" + (c.remote_trust_unsigned ? "u" : "s");
  auto it = stores->find(setting);
  if (it != stores->end()) return it->second;
  RemoteStore* store = new RemoteStore(c);  // never destroyed: uploads may run during exit
  stores->emplace(setting, store);
  return store;
}

}  // namespace metajit
