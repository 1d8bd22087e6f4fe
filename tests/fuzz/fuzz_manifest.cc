// libFuzzer target: the manifest reader (cache/manifest.cc), which `metajit cache warm
// MANIFEST` runs on files that may come from another machine. Any file gives entries or a
// CacheError; accepted entries write back to a manifest that reads back the same, and each
// entry's spec gives a KernelIR or an Error (what `cache warm` does next).
#include <metajit/error.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "cache/manifest.h"
#include "codegen/kernel_spec.h"

using namespace metajit;

namespace {

// One file per fuzzing process, rewritten for each input: the reader under test reads files.
const std::filesystem::path& manifest_path() {
  static const std::filesystem::path path =
      std::filesystem::temp_directory_path() /
      ("metajit-fuzz-manifest-" + std::to_string(::getpid()) + ".json");
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  {
    std::ofstream out(manifest_path(), std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), std::streamsize(size));
  }
  std::vector<ManifestEntry> entries;
  try {
    entries = read_manifest(manifest_path());
  } catch (const CacheError&) {
    return 0;
  }
  const nlohmann::json written = manifest_to_json(entries);
  if (manifest_to_json(manifest_from_json(written, "fuzz: written back")) != written) std::abort();
  for (const ManifestEntry& e : entries) {
    try {
      kernel_spec_from_json(e.spec);
    } catch (const Error&) {
    }
  }
  return 0;
}
