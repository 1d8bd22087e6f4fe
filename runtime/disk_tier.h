// The disk tier of the kernel library (runtime/kernel_library.h): the on-disk cache
// (cache/cache_store.h) as the library uses it: finding an entry or waiting for the process that
// builds it, staging a source to build (in a private temporary cache when the configured one
// cannot be written or is full), what an entry's meta.json records, and the kernel-IR index that
// explains a later miss (miss_cause.h).
#pragma once
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "cache/cache_store.h"
#include "runtime/kernel_backend.h"
#include "runtime/miss_cause.h"
#include "runtime/pending_kernel.h"

namespace metajit {

// Leftovers of dead processes (staging directories, lock files, temp files) go the first time a
// process reaches the disk cache: a few directory reads, once.
void sweep_once(CacheStore& store);

// Looks `p` up on disk; on a miss waits for the key's lock (another process may be compiling
// it) and looks again. Returns the verified kernel.so, or nullopt with the lock held.
std::optional<std::filesystem::path> find_or_lock(CacheStore& store, Pending& p);

// False when the cache cannot be written or its file system has less than kMinFreeBytes
// available.
bool has_room(const CacheStore& store, std::string& why);

// Writes `src` to `dir`/`file` (CacheError when it cannot).
void write_source(const std::filesystem::path& dir, const std::string& file,
                  const std::string& src);

// Puts `p`'s source into a staging directory of `store`, or of the private fallback cache when
// `store` cannot be written or is full (one warning per process).
void stage(Pending& p, CacheStore& store, const Backend& backend);

// What every meta.json of `backend` records about `p`, however the entry was made.
nlohmann::json entry_meta(const Pending& p, const Backend& backend);

// Points the kernel-IR index at `p`'s new entry. Only a hint: a cache that cannot take it
// loses the explanation of a later miss, nothing else.
void record_parts(CacheStore& store, const Pending& p, const Backend& backend);

// Why `p` misses: the kernel-IR index's record of the same IR against the current parts.
MissExplanation explain_disk_miss(const CacheStore& store, const Pending& p,
                                  const Backend& backend);

}  // namespace metajit
