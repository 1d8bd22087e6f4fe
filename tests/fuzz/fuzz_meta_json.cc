// libFuzzer target: the readers of an entry's meta.json (cache/cache_store.cc: find's
// verification, list, verify, read_meta). A cache directory can be written by another process
// of the same user, or damaged: any meta.json gives a hit, a miss (the entry removed) or a
// CacheError, never a crash, and a hit's files match the checksums it names.
#include <metajit/error.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "cache/cache_store.h"

using namespace metajit;
namespace fs = std::filesystem;

namespace {

constexpr const char* kKey = "ab0123456789abcdef0123456789abcd";

void write(const fs::path& p, const std::string& text) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << text;
}

// A cache of this process with the entry kKey installed through the store's own path (its
// kernel.cc is "int x;", its kernel.so "ELF": what the seed corpus's meta.json checksums).
CacheStore& store_with_entry() {
  static CacheStore store(fs::temp_directory_path() /
                          ("metajit-fuzz-meta-" + std::to_string(::getpid())));
  if (!fs::exists(store.entry_dir(kKey))) {
    const fs::path staging = store.make_staging_dir();
    write(staging / "kernel.cc", "int x;");
    write(staging / "kernel.so", "ELF");
    store.install(kKey, staging, nlohmann::json{{"backend", "cpu"}, {"ops", {"add"}}});
  }
  return store;
}

}  // namespace

// Bad entries are warned about once per reason; millions of inputs would only fill stderr.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  ::setenv("METAJIT_LOG", "quiet", 1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  CacheStore& store = store_with_entry();
  write(store.entry_dir(kKey) / "meta.json",
        std::string(reinterpret_cast<const char*>(data), size));
  for (const CacheEntryInfo& e : store.list())
    if (e.key != kKey) std::abort();
  store.verify();
  try {
    store.read_meta(kKey);
  } catch (const CacheError&) {
  }
  // Last: a bad entry is removed here (and installed again for the next input).
  if (std::optional<fs::path> so = store.find(kKey)) {
    std::ifstream in(*so, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (bytes != "ELF") std::abort();
  }
  return 0;
}
