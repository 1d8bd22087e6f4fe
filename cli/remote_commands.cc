// `metajit remote keygen NAME -o FILE` and `metajit remote status [--json]` (README "Sharing
// kernels across machines").
#include <metajit/error.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "base/config.h"
#include "cli/commands.h"
#include "remote_cache/remote_store.h"
#include "remote_cache/signing_keys.h"

namespace metajit::cli {
namespace {

int cmd_keygen(const std::string& name, const std::string& file) {
  if (file.empty()) throw UsageError("remote keygen: -o FILE is required");
  PublicKey pk;
  try {
    pk = generate_key_pair(name, file);
  } catch (const CacheError& e) {
    throw UsageError(e.what());
  }
  std::printf("secret key: %s (mode 0600; give it to writers only)\n", file.c_str());
  std::printf("public key: %s.pub\n%s\n", file.c_str(), public_key_line(pk).c_str());
  return 0;
}

nlohmann::json status_json(const RemoteStatus& s) {
  nlohmann::json j = {{"url", s.url},
                      {"mode", s.mode},
                      {"namespace", s.name_space},
                      {"readable", s.readable},
                      {"writable", s.writable},
                      {"signing_key", s.signing_key},
                      {"trusted_keys", s.trusted_keys},
                      {"trust_unsigned", s.trust_unsigned},
                      {"reachable", s.reachable}};
  if (!s.error.empty()) j["error"] = s.error;
  if (s.reachable) {
    j["ping_ms"] = s.ping_ms;
    j["server_version"] = s.server_version;
    j["maxmemory_policy"] = s.maxmemory_policy;
    j["used_memory"] = s.used_memory;
    j["maxmemory"] = s.maxmemory;
    if (s.entries >= 0) j["entries"] = s.entries;
  }
  return j;
}

int cmd_status(bool json) {
  const Config& c = config();
  RemoteStore* store = RemoteStore::current();
  RemoteStatus s;
  if (store) {
    s = store->status();
  } else {
    s.url = c.remote_url;
    s.mode = c.remote_mode;
    s.name_space = c.remote_namespace;
  }
  if (json) {
    std::cout << status_json(s).dump(2) << "\n";
  } else if (!store) {
    std::printf("remote cache: off (%s)\n",
                c.remote_url.empty() ? "METAJIT_REMOTE is not set" : "METAJIT_REMOTE_MODE=off");
  } else {
    std::printf("remote cache: %s\n", s.url.c_str());
    std::printf("  mode:       %s (reads %s, writes %s)\n", s.mode.c_str(),
                s.readable ? "on" : "off", s.writable ? "on" : "off");
    std::printf("  namespace:  %s\n", s.name_space.c_str());
    std::string trusted;
    for (const std::string& k : s.trusted_keys) trusted += (trusted.empty() ? "" : ", ") + k;
    std::printf(
        "  keys:       signing %s; trusted %s%s\n",
        s.signing_key.empty() ? "none" : s.signing_key.c_str(),
        trusted.empty() ? "none" : trusted.c_str(),
        s.trust_unsigned ? " (METAJIT_REMOTE_TRUST=unsigned: signatures not required)" : "");
    if (!s.reachable) {
      std::printf("  reachable:  no (%s)\n", s.error.c_str());
    } else {
      std::printf("  reachable:  yes, Redis %s, %.2f ms\n", s.server_version.c_str(), s.ping_ms);
      std::printf("  memory:     %s used of %s, policy %s%s\n", human_bytes(s.used_memory).c_str(),
                  s.maxmemory ? human_bytes(s.maxmemory).c_str() : "no limit",
                  s.maxmemory_policy.empty() ? "unknown" : s.maxmemory_policy.c_str(),
                  s.maxmemory_policy == "noeviction"
                      ? " (uploads fail once it is full; allkeys-lru is recommended)"
                      : "");
      if (s.entries >= 0)
        std::printf("  entries:    %lld kernel%s\n", (long long)s.entries,
                    s.entries == 1 ? "" : "s");
      else
        std::printf("  entries:    not counted\n");
    }
  }
  std::fflush(stdout);
  return !store || s.reachable ? 0 : 2;
}

struct RemoteArgs {
  std::string name, output;
  bool json = false;
};

}  // namespace

void register_remote_commands(CLI::App& app, Action& action) {
  auto args = std::make_shared<RemoteArgs>();
  CLI::App* remote =
      app.add_subcommand("remote", "The remote kernel cache shared by a fleet (METAJIT_REMOTE)");
  remote->require_subcommand(1);

  CLI::App* keygen = remote->add_subcommand(
      "keygen", "Make an Ed25519 key pair: secret key in FILE (0600), public key in FILE.pub");
  keygen->add_option("NAME", args->name, "Key name (letters, digits, - _ .)")->required();
  keygen->add_option("-o,--output", args->output, "Secret key file")->required();
  keygen->callback(
      [&action, args] { action = [args] { return cmd_keygen(args->name, args->output); }; });

  CLI::App* status =
      remote->add_subcommand("status", "Reachable? Mode, namespace, keys, memory policy, entries");
  status->add_flag("--json", args->json, "Print a JSON object");
  status->callback([&action, args] { action = [args] { return cmd_status(args->json); }; });
}

}  // namespace metajit::cli
