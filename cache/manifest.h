// Cache manifests (docs/design.md §6): a JSON list of kernel specs. `metajit cache export` writes
// one from a cache, METAJIT_RECORD=FILE makes a program write the kernels it used, and
// `metajit cache warm MANIFEST` compiles every kernel missing from the local cache. A manifest
// carries specs (the fused group's IR), not source or binaries: the warming machine regenerates
// and compiles each kernel with its own toolchain, so its keys are its own.
#pragma once
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace metajit {

inline constexpr const char* kManifestFormat = "metajit-manifest";
inline constexpr int kManifestVersion = 1;

struct ManifestEntry {
  std::string key;      // the key where the manifest was written (informational elsewhere)
  std::string backend;  // "cpu" | "cuda"
  std::vector<std::string> ops;
  nlohmann::json spec;  // kernel_spec_to_json(ir)
};

// {"format": "metajit-manifest", "version": 1, "kernels": [{key, backend, ops, spec}, ...]}
nlohmann::json manifest_to_json(const std::vector<ManifestEntry>& entries);
// Throws CacheError naming `source` and the offending kernels[i] field when `j` is not a
// manifest. Specs are checked for shape only here; kernel_spec_from_json() checks them fully.
std::vector<ManifestEntry> manifest_from_json(const nlohmann::json& j, const std::string& source);

// Reads and checks a manifest file (CacheError naming the path when unreadable or invalid).
std::vector<ManifestEntry> read_manifest(const std::filesystem::path& path);
// Writes a manifest file atomically (a reader sees the old file or the new one).
void write_manifest(const std::filesystem::path& path, const std::vector<ManifestEntry>& entries);

}  // namespace metajit
