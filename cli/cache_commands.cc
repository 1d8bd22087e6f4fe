// `metajit cache ...`: look into and clean the on-disk kernel cache (docs/design.md §6, §9).
#include <metajit/error.h>
#include <metajit/runtime.h>

#include <cstdio>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "base/config.h"
#include "cache/cache_store.h"
#include "cache/manifest.h"
#include "cli/commands.h"
#include "codegen/kernel_spec.h"
#include "runtime/cache_warm.h"
#include "runtime/kernel_library.h"
#include "runtime/miss_cause.h"

namespace metajit::cli {
namespace {

namespace fs = std::filesystem;

fs::path cache_root() {
  std::error_code ec;
  fs::path abs = fs::absolute(config().cache_dir, ec);
  return ec ? config().cache_dir : abs;
}

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

// "5s ago", "3h ago": when an entry was last used.
std::string age_text(int64_t unix_seconds) {
  if (unix_seconds <= 0) return "-";
  int64_t age = int64_t(std::time(nullptr)) - unix_seconds;
  if (age < 0) age = 0;
  if (age < 60) return std::to_string(age) + "s ago";
  if (age < 3600) return std::to_string(age / 60) + "m ago";
  if (age < 86400) return std::to_string(age / 3600) + "h ago";
  return std::to_string(age / 86400) + "d ago";
}

std::string join(const std::vector<std::string>& items, const std::string& sep) {
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "" : sep) + s;
  return out;
}

// A command that must write refuses a cache it cannot write, naming the path and why (exit 2),
// instead of reporting work it did not do (issue 26: `cache clear` printed "removed 0" and
// `cache warm` "84 compiled" on a read-only mount, both exiting 0).
void require_writable(const CacheStore& store, const char* command) {
  if (std::optional<std::string> why = store.unwritable_reason())
    throw CacheError(std::string("cache ") + command + ": " + store.root().string() +
                     " cannot be written: " + *why + "; nothing was changed");
}

int cmd_path() {
  std::cout << cache_root().string() << "\n";
  return 0;
}

int cmd_stats(bool json) {
  CacheStore store(cache_root());
  std::vector<CacheEntryInfo> entries = store.list();
  uint64_t bytes = 0;
  for (const CacheEntryInfo& e : entries) bytes += e.bytes;
  CacheCounters c = store.read_counters();
  if (json) {
    nlohmann::json j = {{"cache_dir", store.root().string()},
                        {"entries", entries.size()},
                        {"bytes", bytes},
                        {"max_bytes", config().cache_max_size},
                        {"compile_seconds", c.compile_seconds}};
    for (const CacheCounterField& f : kCacheCounterFields) j[f.field] = c.*f.member;
    nlohmann::json causes = nlohmann::json::object();
    for (const CacheCounterField& f : kMissCauseFields) causes[f.field] = c.*f.member;
    j["misses_by_cause"] = std::move(causes);
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  auto row = [](const char* name, const std::string& value) {
    std::printf("%-16s %s\n", name, value.c_str());
  };
  row("cache directory", store.root().string());
  row("entries", std::to_string(entries.size()));
  row("size", human_bytes(bytes) + " (" + std::to_string(bytes) + " bytes)");
  row("size limit", human_bytes(config().cache_max_size));
  for (const CacheCounterField& f : kCacheCounterFields) {
    row(f.label, std::to_string(c.*f.member));
    if (f.member == &CacheCounters::misses) row("misses by cause", miss_causes_text(c));
    if (f.member == &CacheCounters::compiles)
      row("compile time", fixed(c.compile_seconds, 2) + " s");
  }
  return 0;
}

int cmd_list(bool json) {
  CacheStore store(cache_root());
  std::vector<CacheEntryInfo> entries = store.list();
  if (json) {
    nlohmann::json arr = nlohmann::json::array();
    for (const CacheEntryInfo& e : entries)
      arr.push_back({{"key", e.key},
                     {"ops", e.ops},
                     {"backend", e.backend},
                     {"bytes", e.bytes},
                     {"compile_seconds", e.compile_seconds},
                     {"created", e.created},
                     {"last_used", e.last_used},
                     {"dir", e.dir.string()}});
    std::cout << arr.dump(2) << "\n";
    return 0;
  }
  if (entries.empty()) {
    std::printf("no kernels cached in %s\n", store.root().string().c_str());
    return 0;
  }
  std::printf("%-32s  %-40s  %-7s  %10s  %8s  %s\n", "KEY", "OPS", "BACKEND", "SIZE", "COMPILE",
              "LAST USED");
  for (const CacheEntryInfo& e : entries) {
    std::string ops = join(e.ops, ",");
    if (ops.size() > 40) ops = ops.substr(0, 37) + "...";
    std::printf("%-32s  %-40s  %-7s  %10s  %8s  %s\n", e.key.c_str(), ops.c_str(),
                e.backend.empty() ? "?" : e.backend.c_str(), human_bytes(e.bytes).c_str(),
                (fixed(e.compile_seconds, 2) + "s").c_str(), age_text(e.last_used).c_str());
  }
  return 0;
}

std::string resolve_key(const CacheStore& store, const std::string& prefix) {
  try {
    return store.resolve_prefix(prefix);
  } catch (const CacheError& e) {
    throw UsageError(e.what());  // a key that is malformed, unknown or ambiguous: user error
  }
}

int cmd_show(const std::string& prefix, bool meta) {
  CacheStore store(cache_root());
  std::string key = resolve_key(store, prefix);
  if (meta) {
    std::cout << store.read_meta(key).dump(2) << "\n";
  } else {
    std::string source = store.read_source(key);
    std::cout << source;
    if (!source.empty() && source.back() != '\n') std::cout << "\n";
  }
  return 0;
}

int cmd_clear(const std::string& older_than) {
  double seconds = -1;
  if (!older_than.empty() && !parse_duration(older_than, seconds))
    throw UsageError("cache clear: --older-than '" + older_than +
                     "' is not a duration; expected e.g. 7d, 12h, 30m, 45s");
  CacheStore store(cache_root());
  if (fs::exists(store.version_dir())) require_writable(store, "clear");
  uint64_t removed = store.clear(seconds);
  store.sweep_stale_staging();
  std::printf("removed %llu cache entr%s from %s\n", static_cast<unsigned long long>(removed),
              removed == 1 ? "y" : "ies", store.root().string().c_str());
  return 0;
}

int cmd_prune(const std::string& max_size) {
  uint64_t limit = config().cache_max_size;
  if (!max_size.empty() && !parse_size(max_size, limit))
    throw UsageError("cache prune: --max-size '" + max_size +
                     "' is not a size; expected e.g. 2G, 500M, 64k, 1048576");
  CacheStore store(cache_root());
  if (!fs::exists(store.version_dir())) {
    std::printf("nothing to prune: no cache in %s\n", store.root().string().c_str());
    return 0;
  }
  require_writable(store, "prune");
  uint64_t swept = store.sweep_stale_staging();
  EvictionResult r = store.evict(limit, /*wait=*/true);
  std::printf("evicted %llu entr%s (%s); %llu left, %s of %s limit",
              static_cast<unsigned long long>(r.removed), r.removed == 1 ? "y" : "ies",
              human_bytes(r.bytes_removed).c_str(), static_cast<unsigned long long>(r.entries_left),
              human_bytes(r.bytes_left).c_str(), human_bytes(limit).c_str());
  if (swept)
    std::printf("; removed %llu leftover%s of dead processes",
                static_cast<unsigned long long>(swept), swept == 1 ? "" : "s");
  std::printf("\n");
  return 0;
}

// The device whose backend wrote an entry ("cpu", or "cuda" / "cuda-emu"), or nullopt.
std::optional<Device> entry_device(const std::string& backend) {
  if (backend == "cpu") return Device::CPU;
  if (backend == "cuda" || backend == "cuda-emu") return Device::CUDA;
  return std::nullopt;
}

struct Rebuildable {
  KernelIR ir;
  Device device;
};

// The kernel IR recorded in an entry's meta.json, or nullopt when it is unreadable or not this
// toolchain's (its key would differ: rebuilding it here would make another entry).
std::optional<Rebuildable> rebuildable_spec(const CacheStore& store, const std::string& key) {
  try {
    nlohmann::json meta = store.read_meta(key);
    if (!meta.contains("backend") || !meta["backend"].is_string() || !meta.contains("spec"))
      return std::nullopt;
    std::optional<Device> device = entry_device(meta["backend"].get<std::string>());
    if (!device) return std::nullopt;
    KernelIR ir = kernel_spec_from_json(meta["spec"]);
    if (key_of(ir, *device) != key) return std::nullopt;
    return Rebuildable{std::move(ir), *device};
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// warm_kernels() per device, summed; a device whose toolchain is missing counts its kernels as
// failed with the toolchain's error.
WarmSummary warm_by_device(const std::vector<KernelIR>& cpu, const std::vector<KernelIR>& cuda,
                           int jobs, bool push) {
  WarmSummary total;
  for (Device d : {Device::CPU, Device::CUDA}) {
    const std::vector<KernelIR>& irs = d == Device::CPU ? cpu : cuda;
    if (irs.empty() && d == Device::CUDA) continue;  // the CPU pass checks the cache even empty
    WarmSummary w;
    try {
      w = warm_kernels(irs, jobs, d, push);
    } catch (const CompileError& e) {
      w.total = w.failed = irs.size();
      w.first_failure = std::string(device_name(d)) + " kernels: " + e.what();
    }
    total.total += w.total;
    total.cached += w.cached;
    total.compiled += w.compiled;
    total.failed += w.failed;
    total.fetched += w.fetched;
    total.pushed += w.pushed;
    total.push_failed += w.push_failed;
    total.seconds += w.seconds;
    total.failed_keys.insert(total.failed_keys.end(), w.failed_keys.begin(), w.failed_keys.end());
    if (total.first_failure.empty()) total.first_failure = w.first_failure;
  }
  return total;
}

int cmd_verify(bool fix) {
  CacheStore store(cache_root());
  std::vector<CacheProblem> problems = store.verify();
  size_t entries = store.list().size();
  if (problems.empty()) {
    std::printf("%zu entr%s checked in %s: all good\n", entries, entries == 1 ? "y" : "ies",
                store.root().string().c_str());
    return 0;
  }
  for (const CacheProblem& p : problems)
    std::printf("%s  %s: %s\n", p.key.empty() ? "debris" : "bad   ",
                p.key.empty() ? p.path.string().c_str() : p.key.c_str(), p.what.c_str());
  if (!fix) {
    std::printf("%zu problem%s in %s (run `metajit cache verify --fix` to repair)\n",
                problems.size(), problems.size() == 1 ? "" : "s", store.root().string().c_str());
    return 1;
  }
  require_writable(store, "verify --fix");
  // Repairs: bad entries are rebuilt from their spec when meta.json still describes this
  // toolchain's kernel, else removed; debris is removed.
  std::vector<KernelIR> rebuild[2];  // per device
  size_t removed = 0, cleaned = 0;
  for (const CacheProblem& p : problems) {
    if (p.key.empty()) continue;
    if (std::optional<Rebuildable> r = rebuildable_spec(store, p.key))
      rebuild[r->device == Device::CUDA].push_back(std::move(r->ir));
    if (store.remove_entry(p.key)) ++removed;
  }
  cleaned = store.sweep_stale_staging(0);
  for (const CacheProblem& p : problems) {
    if (!p.key.empty() || p.what != "not a cache entry") continue;
    std::error_code ec;
    if (fs::remove_all(p.path, ec) > 0) ++cleaned;
  }
  size_t rebuilt = 0;
  if (!rebuild[0].empty() || !rebuild[1].empty()) {
    WarmSummary w = warm_by_device(rebuild[0], rebuild[1], config().jobs, /*push=*/false);
    rebuilt = w.compiled + w.cached;
    if (w.failed) std::fprintf(stderr, "metajit: %s\n", w.first_failure.c_str());
  }
  std::vector<CacheProblem> left = store.verify();
  std::printf("fixed: %zu bad entr%s removed (%zu rebuilt), %zu leftover%s removed; %s\n", removed,
              removed == 1 ? "y" : "ies", rebuilt, cleaned, cleaned == 1 ? "" : "s",
              left.empty() ? "the cache is clean now"
                           : (std::to_string(left.size()) + " problem(s) remain").c_str());
  return left.empty() ? 0 : 2;
}

int cmd_export(const std::string& output) {
  CacheStore store(cache_root());
  std::vector<ManifestEntry> kernels;
  size_t skipped = 0;
  for (const CacheEntryInfo& e : store.list()) {
    try {
      nlohmann::json meta = store.read_meta(e.key);
      if (!meta.contains("spec") || !meta["spec"].is_object()) throw CacheError("no spec");
      kernel_spec_from_json(meta["spec"]);  // only specs that a warm can use
      // A manifest names the device; the warming machine picks its own CUDA toolchain.
      kernels.push_back({e.key, e.backend == "cuda-emu" ? "cuda" : e.backend, e.ops, meta["spec"]});
    } catch (const std::exception& ex) {
      ++skipped;
      std::fprintf(stderr, "metajit: skipping %s: %s\n", e.key.c_str(), ex.what());
    }
  }
  if (output.empty() || output == "-") {
    std::cout << manifest_to_json(kernels).dump(1) << "\n";
  } else {
    try {
      write_manifest(output, kernels);
    } catch (const CacheError& ex) {
      throw UsageError(std::string("cache export: ") + ex.what());
    }
  }
  std::fprintf(
      stderr, "metajit: exported %zu kernel%s%s%s\n", kernels.size(),
      kernels.size() == 1 ? "" : "s",
      output.empty() || output == "-" ? "" : (" to " + output).c_str(),
      skipped ? (" (" + std::to_string(skipped) + " unreadable entries skipped)").c_str() : "");
  return 0;
}

int cmd_warm(const std::string& manifest_path, int jobs, bool push) {
  std::vector<ManifestEntry> entries;
  try {
    entries = read_manifest(manifest_path);
  } catch (const CacheError& e) {
    throw UsageError(std::string("cache warm: ") + e.what());
  }
  std::vector<KernelIR> irs[2];  // per device
  for (size_t i = 0; i < entries.size(); ++i) {
    try {
      irs[entries[i].backend == "cuda"].push_back(kernel_spec_from_json(entries[i].spec));
    } catch (const Error& e) {
      throw UsageError("cache warm: manifest " + manifest_path + ": kernels[" + std::to_string(i) +
                       "]: " + e.what());
    }
  }
  require_writable(CacheStore(cache_root()), "warm");
  WarmSummary w;
  try {
    w = warm_by_device(irs[0], irs[1], jobs > 0 ? jobs : config().jobs, push);
  } catch (const CacheError& e) {
    if (push && std::string(e.what()).find("--push") != std::string::npos)
      throw UsageError(e.what());
    throw;
  }
  std::printf("warmed %s: %zu kernel%s in %.1f s: %zu compiled, %zu already cached, %zu failed",
              cache_root().string().c_str(), w.total, w.total == 1 ? "" : "s", w.seconds,
              w.compiled, w.cached, w.failed);
  if (!irs[1].empty()) std::printf(" (%zu CUDA)", irs[1].size());
  if (w.fetched) std::printf("; %zu fetched from the remote cache", w.fetched);
  if (push) std::printf("; %zu pushed to the remote cache, %zu not", w.pushed, w.push_failed);
  std::printf("\n");
  if (push && w.push_failed) {
    std::fflush(stdout);
    std::fprintf(stderr, "metajit: cache warm --push: %zu kernel%s could not be uploaded\n",
                 w.push_failed, w.push_failed == 1 ? "" : "s");
    return 2;
  }
  if (w.failed) {
    std::fflush(stdout);
    std::fprintf(stderr, "metajit: %s\n", w.first_failure.c_str());
    return 2;
  }
  return 0;
}

// `cache push KEY... | --all`: uploads local entries to the remote cache.
int cmd_push(const std::vector<std::string>& prefixes, bool all) {
  if (all == !prefixes.empty())
    throw UsageError("cache push: name KEYs or --all (not both, not neither)");
  CacheStore store(cache_root());
  std::vector<std::string> keys;
  if (all) {
    for (const CacheEntryInfo& e : store.list()) keys.push_back(e.key);
  } else {
    for (const std::string& prefix : prefixes) {
      try {
        keys.push_back(store.resolve_prefix(prefix));
      } catch (const CacheError& e) {
        throw UsageError(std::string("cache push: ") + e.what());
      }
    }
  }
  std::vector<PushResult> results;
  try {
    results = push_kernels(keys);
  } catch (const CacheError& e) {
    throw UsageError(e.what());
  }
  size_t pushed = 0;
  for (const PushResult& r : results) {
    if (r.pushed) {
      ++pushed;
    } else {
      std::fprintf(stderr, "metajit: not pushed %s: %s\n", r.key.c_str(), r.why.c_str());
    }
  }
  std::printf("pushed %zu of %zu kernel%s to %s\n", pushed, results.size(),
              results.size() == 1 ? "" : "s", config().remote_url.c_str());
  return pushed == results.size() ? 0 : 2;
}

// Values of every `cache` subcommand's options; shared by the callbacks.
struct CacheArgs {
  bool json = false;
  std::string key;
  bool meta = false;
  std::string older_than;
  std::string max_size;
  bool fix = false;
  std::string output;
  std::string manifest;
  int jobs = 0;
  bool push = false, all = false;
  std::vector<std::string> keys;
};

}  // namespace

std::string human_bytes(uint64_t bytes) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = double(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) v /= 1024, ++u;
  return u == 0 ? std::to_string(bytes) + " B" : fixed(v, 1) + " " + units[u];
}

void register_cache_commands(CLI::App& app, Action& action) {
  auto args = std::make_shared<CacheArgs>();
  CLI::App* cache = app.add_subcommand("cache", "Inspect and clean the on-disk kernel cache");
  cache->require_subcommand(1);

  cache->add_subcommand("path", "Print the cache directory")->callback([&action] {
    action = cmd_path;
  });

  CLI::App* stats =
      cache->add_subcommand("stats", "Hits, misses (by cause), compiles, entries and size");
  stats->add_flag("--json", args->json, "Print a JSON object");
  stats->callback([&action, args] { action = [args] { return cmd_stats(args->json); }; });

  CLI::App* list = cache->add_subcommand("list", "One line per cached kernel");
  list->add_flag("--json", args->json, "Print a JSON array");
  list->callback([&action, args] { action = [args] { return cmd_list(args->json); }; });

  CLI::App* show = cache->add_subcommand("show", "Print a cached kernel's source");
  show->add_option("KEY", args->key, "Key or unique key prefix (hex)")->required();
  show->add_flag("--meta", args->meta, "Print meta.json instead of the source");
  show->callback([&action, args] { action = [args] { return cmd_show(args->key, args->meta); }; });

  CLI::App* clear = cache->add_subcommand("clear", "Remove cache entries");
  clear->add_option("--older-than", args->older_than,
                    "Only entries not used for this long (e.g. 7d, 12h, 30m)");
  clear->callback([&action, args] { action = [args] { return cmd_clear(args->older_than); }; });

  CLI::App* prune = cache->add_subcommand("prune", "Evict least recently used entries");
  prune->add_option("--max-size", args->max_size, "Size to shrink to (e.g. 2G, 500M)");
  prune->callback([&action, args] { action = [args] { return cmd_prune(args->max_size); }; });

  CLI::App* verify = cache->add_subcommand("verify", "Check every entry's checksums");
  verify->add_flag("--fix", args->fix, "Rebuild or remove bad entries, remove leftovers");
  verify->callback([&action, args] { action = [args] { return cmd_verify(args->fix); }; });

  CLI::App* exp = cache->add_subcommand("export", "Write a manifest of the cached kernels");
  exp->add_option("-o,--output", args->output, "Manifest file (default: stdout)");
  exp->callback([&action, args] { action = [args] { return cmd_export(args->output); }; });

  CLI::App* warm = cache->add_subcommand("warm", "Compile every kernel a manifest lists");
  warm->add_option("MANIFEST", args->manifest, "Manifest (JSON)")->required();
  CLI::Option* jobs =
      warm->add_option("-j,--jobs", args->jobs, "Parallel compiles (default: METAJIT_JOBS)");
  warm->callback([&action, args, jobs] {
    action = [args, jobs] {
      if (jobs->count() > 0 && args->jobs < 1)
        throw UsageError("cache warm: -j " + std::to_string(args->jobs) +
                         " is not valid; expected a positive number of jobs");
      return cmd_warm(args->manifest, args->jobs, args->push);
    };
  });
  warm->add_flag("--push", args->push,
                 "Then upload every kernel of the manifest to the remote cache (METAJIT_REMOTE)");

  CLI::App* push = cache->add_subcommand("push", "Upload cached kernels to the remote cache");
  push->add_option("KEY", args->keys, "Keys or unique key prefixes (hex)");
  push->add_flag("--all", args->all, "Every kernel in the local cache");
  push->callback([&action, args] { action = [args] { return cmd_push(args->keys, args->all); }; });
}

}  // namespace metajit::cli
