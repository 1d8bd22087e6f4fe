// The remote tier of the kernel library (runtime/kernel_library.h): the Redis cache shared by a
// fleet (remote_cache/remote_store.h) as the library uses it: a verified entry installed in the
// disk cache under the local key, the fleet-wide lease on compiling a miss, the wait for another
// machine's upload, the upload of what this process compiled, and the counters.
#pragma once
#include <filesystem>
#include <optional>
#include <string>

#include "cache/cache_store.h"
#include "remote_cache/remote_store.h"
#include "runtime/kernel_backend.h"
#include "runtime/pending_kernel.h"

namespace metajit {

// Adds what the remote counters (remote_store.h) gained since the last call to `delta`: they
// go to the cache's statistics with the batch that made them, uploads (a background thread's)
// with a later one or at exit.
void take_remote_counts(CacheCounters& delta);

// The remote cache when one is configured and this process may read or write it.
RemoteStore* usable_remote();

// The portable identity of `backend` (computed once per batch: it hashes compiler binaries);
// "" when it cannot be had, which keeps the remote out of this batch.
std::string portable_of(const Backend& backend);

// Looks `p` (its local lock held) up in the remote cache: a verified hit is installed
// (install_envelope) and its kernel.so returned. On a miss a writer takes the fleet-wide lease
// on compiling it; `leased_by_other` says another machine holds that lease, and the caller
// waits for that machine's upload later (wait_and_install), once its own kernels are built. An
// entry uploaded between the lookup and the lease (Claim::Arrived) is fetched again at once.
std::optional<std::filesystem::path> install_from_remote(RemoteStore& remote, CacheStore& store,
                                                         Pending& p, const Backend& backend,
                                                         CacheCounters& delta,
                                                         bool& leased_by_other);

// Waits (bounded) for the entry of `p` that another machine holds the lease on, and installs it.
std::optional<std::filesystem::path> wait_and_install(RemoteStore& remote, CacheStore& store,
                                                      Pending& p, const Backend& backend,
                                                      CacheCounters& delta);

// The envelope's contents for the entry whose kernel.so is `object`.
UploadJob upload_job(const Pending& p, const std::filesystem::path& object, const Backend& backend,
                     const std::string& portable);

}  // namespace metajit
