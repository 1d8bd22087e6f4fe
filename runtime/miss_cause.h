// "Why did it compile?": when a kernel misses the disk cache although the same kernel IR was
// compiled here before under another key, which part of the key changed. Each install records
// the parts of its key (KeyParts) in the cache's kernel-IR index (CacheStore::read_ir_record);
// a miss compares the recorded parts with the current ones in a fixed order: compiler, target,
// flags, code generator. The kernel library counts the causes per evaluation and logs one
// info line per cause ("27 kernels compiled again: the compiler changed (g++ 12.2.0 ->
// 12.3.0)"); the cache's statistics count them across processes (`metajit cache stats`).
#pragma once
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cache/cache_store.h"

namespace metajit {

// Ordered as kMissCauseFields (cache/cache_store.h), whose counter each one increments.
enum class MissCause : uint8_t {
  New,       // no record of this kernel IR: never compiled with this cache (or cleared since)
  Compiler,  // the compiler's path, version or binary
  Target,    // what -march=native resolves to (the CPU), the vector ISA of the flags, or the
             // CUDA architecture
  Flags,     // the compile flags (METAJIT_CXXFLAGS / METAJIT_NVCCFLAGS, or derived ones)
  Codegen,   // the code generator's version (the same IR is written as other source)
  Removed,   // the same key as before: its entry was evicted, cleared or found damaged
};

// "new", "compiler", "target", "flags", "codegen", "removed": the stats field.
const char* miss_cause_name(MissCause cause);
// The CacheCounters member that counts `cause`.
uint64_t CacheCounters::*miss_cause_counter(MissCause cause);

// What one kernel key was made of, apart from the kernel IR itself.
struct KeyParts {
  std::string key;                 // the key these parts gave
  std::string backend;             // "cpu" | "cuda" | "cuda-emu"
  std::string codegen;             // e.g. "cpp-14"
  std::string compiler;            // resolved path
  std::string compiler_version;    // first line of `--version` (nvcc: its release line)
  std::string compiler_id;         // digest of everything that identifies the compiler binary
  std::string target;              // what -march=native resolves to; the CUDA architecture
  std::string isa;                 // the vector ISA the whole flag list enables ("" for CUDA)
  std::vector<std::string> flags;  // the full flag list
};

nlohmann::json key_parts_to_json(const KeyParts& parts);
// nullopt unless `j` holds every field with the right type (the index is untrusted input).
std::optional<KeyParts> key_parts_from_json(const nlohmann::json& j);

// The index name of a kernel IR: XXH3-128 of the backend and the canonical IR text, nothing
// of the toolchain, flags, target or code generator (32 hex digits).
std::string ir_digest(const std::string& backend, const std::string& ir_text);

struct MissExplanation {
  MissCause cause = MissCause::New;
  // e.g. "the compiler changed (g++ 12.2.0 -> 12.3.0)"; empty for New.
  std::string reason;
};

// Why a kernel whose key is now `now.key` compiles, given the parts recorded when the same IR
// was last installed (`before`, nullptr when there is no record). The first part that differs
// in the order compiler, target, flags, codegen names the cause; a target change that came
// with flags (METAJIT_CXXFLAGS=-march=...) says both.
MissExplanation explain_miss(const KeyParts* before, const KeyParts& now);

// "1 kernel compiled again: <reason>", "27 kernels compiled again: <reason>".
std::string recompile_summary(uint64_t count, const std::string& reason);

// "new 120, compiler 27, target 0, flags 3, codegen 0, removed 0"
std::string miss_causes_text(const CacheCounters& counters);

}  // namespace metajit
