#include "cache/manifest.h"

#include <metajit/error.h>

#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "cache/cache_store.h"
#include "cache/untrusted_json.h"

namespace metajit {
namespace {

// Manifests come from other machines and users: bound what one may make us do.
constexpr size_t kMaxManifestBytes = size_t(256) << 20;

[[noreturn]] void bad(const std::string& source, const std::string& where,
                      const std::string& what) {
  throw CacheError("manifest " + source + ": " + where + ": " + what);
}

std::string string_field(const nlohmann::json& obj, const char* name, const std::string& source,
                         const std::string& where) {
  auto it = obj.find(name);
  if (it == obj.end() || !it->is_string())
    bad(source, where + "." + name, "missing or not a string");
  return it->get<std::string>();
}

}  // namespace

nlohmann::json manifest_to_json(const std::vector<ManifestEntry>& entries) {
  nlohmann::json kernels = nlohmann::json::array();
  for (const ManifestEntry& e : entries)
    kernels.push_back({{"key", e.key}, {"backend", e.backend}, {"ops", e.ops}, {"spec", e.spec}});
  return {{"format", kManifestFormat}, {"version", kManifestVersion}, {"kernels", kernels}};
}

std::vector<ManifestEntry> manifest_from_json(const nlohmann::json& j, const std::string& source) {
  if (!j.is_object()) bad(source, "top level", "not a JSON object (expected a metajit manifest)");
  auto format = j.find("format");
  if (format == j.end() || *format != kManifestFormat)
    bad(source, "format",
        std::string("not a metajit manifest (expected \"") + kManifestFormat + "\")");
  auto version = j.find("version");
  if (version == j.end() || !version->is_number_integer() || *version != kManifestVersion)
    bad(source, "version",
        "unsupported (this metajit reads version " + std::to_string(kManifestVersion) + ")");
  auto kernels = j.find("kernels");
  if (kernels == j.end() || !kernels->is_array()) bad(source, "kernels", "missing or not a list");
  std::vector<ManifestEntry> out;
  for (size_t i = 0; i < kernels->size(); ++i) {
    const nlohmann::json& k = (*kernels)[i];
    const std::string where = "kernels[" + std::to_string(i) + "]";
    if (!k.is_object()) bad(source, where, "not an object");
    ManifestEntry e;
    e.key = string_field(k, "key", source, where);
    e.backend = string_field(k, "backend", source, where);
    if (e.backend != "cpu" && e.backend != "cuda")
      bad(source, where + ".backend", "'" + e.backend + "' is not a backend (cpu or cuda)");
    if (auto ops = k.find("ops"); ops != k.end() && ops->is_array())
      for (const auto& op : *ops)
        if (op.is_string()) e.ops.push_back(op.get<std::string>());
    auto spec = k.find("spec");
    if (spec == k.end() || !spec->is_object())
      bad(source, where + ".spec", "missing or not an object");
    e.spec = *spec;
    out.push_back(std::move(e));
  }
  return out;
}

std::vector<ManifestEntry> read_manifest(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw CacheError("manifest " + path.string() + ": cannot be read");
  std::string text;
  char buf[65536];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    text.append(buf, size_t(in.gcount()));
    if (text.size() > kMaxManifestBytes)
      throw CacheError("manifest " + path.string() + ": larger than 256 MiB");
  }
  nlohmann::json j = parse_untrusted_json(text);
  if (j.is_discarded())
    throw CacheError("manifest " + path.string() + ": not valid JSON, or nested deeper than " +
                     std::to_string(kMaxJsonDepth) + " levels");
  return manifest_from_json(j, path.string());
}

void write_manifest(const std::filesystem::path& path, const std::vector<ManifestEntry>& entries) {
  write_file_atomically(path, manifest_to_json(entries).dump(1) + "\n");
}

}  // namespace metajit
