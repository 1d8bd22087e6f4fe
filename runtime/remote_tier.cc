#include "runtime/remote_tier.h"

#include <metajit/error.h>

#include <fstream>
#include <iterator>
#include <mutex>
#include <nlohmann/json.hpp>

#include "base/checksum.h"
#include "base/log.h"
#include "runtime/disk_tier.h"

namespace metajit {
namespace {

namespace fs = std::filesystem;

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

}  // namespace

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

}  // namespace metajit
