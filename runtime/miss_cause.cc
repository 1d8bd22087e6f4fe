#include "runtime/miss_cause.h"

#include <cctype>
#include <filesystem>
#include <iterator>
#include <nlohmann/json.hpp>
#include <set>

#include "base/checksum.h"

namespace metajit {
namespace {

// A list of words, shortened for one log line.
std::string joined(const std::vector<std::string>& words) {
  constexpr size_t kMaxChars = 160;
  std::string out;
  for (const std::string& w : words) {
    if (!out.empty() && out.size() + 1 + w.size() > kMaxChars) return out + " ...";
    out += (out.empty() ? "" : " ") + w;
  }
  return out;
}

// "A -> B", "added B", "removed A" for the words only one side has, in order.
std::string difference(const std::vector<std::string>& gone, const std::vector<std::string>& come) {
  if (gone.empty() && come.empty()) return "";
  if (gone.empty()) return "added " + joined(come);
  if (come.empty()) return "removed " + joined(gone);
  return joined(gone) + " -> " + joined(come);
}

// What differs between two flag lists: the middle after the common prefix and suffix (flags are
// ordered: the defaults, then the user's).
std::string flags_difference(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  size_t pre = 0;
  while (pre < a.size() && pre < b.size() && a[pre] == b[pre]) ++pre;
  size_t suf = 0;
  while (suf < a.size() - pre && suf < b.size() - pre &&
         a[a.size() - 1 - suf] == b[b.size() - 1 - suf])
    ++suf;
  return difference(std::vector<std::string>(a.begin() + pre, a.end() - suf),
                    std::vector<std::string>(b.begin() + pre, b.end() - suf));
}

std::vector<std::string> words(const std::string& text) {
  std::vector<std::string> out;
  std::string w;
  for (char c : text + " ") {
    if (std::isspace(static_cast<unsigned char>(c))) {
      if (!w.empty()) out.push_back(w);
      w.clear();
    } else {
      w += c;
    }
  }
  return out;
}

// What differs between two resolved targets (sets of options: order does not matter).
std::string target_difference(const std::string& a, const std::string& b) {
  std::vector<std::string> wa = words(a), wb = words(b);
  std::set<std::string> sa(wa.begin(), wa.end()), sb(wb.begin(), wb.end());
  std::vector<std::string> gone, come;
  for (const std::string& w : wa)
    if (!sb.count(w)) gone.push_back(w);
  for (const std::string& w : wb)
    if (!sa.count(w)) come.push_back(w);
  return difference(gone, come);
}

// The last word of a version line that looks like a version number ("12.2.0" of
// "g++ (Debian 12.2.0-14) 12.2.0"), or "".
std::string version_number(const std::string& line) {
  std::string found;
  for (std::string w : words(line)) {
    while (!w.empty() && (w.back() == ',' || w.back() == ')' || w.back() == ';')) w.pop_back();
    bool ok = !w.empty() && std::isdigit(static_cast<unsigned char>(w[0])) &&
              w.find('.') != std::string::npos;
    for (char c : w) ok = ok && (std::isdigit(static_cast<unsigned char>(c)) || c == '.');
    if (ok) found = w;
  }
  return found;
}

std::string compiler_difference(const KeyParts& a, const KeyParts& b) {
  if (a.compiler_version != b.compiler_version) {
    const std::string name_a = std::filesystem::path(a.compiler).filename().string();
    const std::string name_b = std::filesystem::path(b.compiler).filename().string();
    const std::string va = version_number(a.compiler_version);
    const std::string vb = version_number(b.compiler_version);
    if (!va.empty() && !vb.empty() && (va != vb || name_a != name_b))
      return name_a == name_b ? name_a + " " + va + " -> " + vb
                              : name_a + " " + va + " -> " + name_b + " " + vb;
    return a.compiler_version + " -> " + b.compiler_version;
  }
  if (a.compiler != b.compiler) return a.compiler + " -> " + b.compiler;
  return b.compiler + " was replaced: same version, another binary";
}

bool is_string(const nlohmann::json& j, const char* field) {
  auto it = j.find(field);
  return it != j.end() && it->is_string();
}

}  // namespace

const char* miss_cause_name(MissCause cause) {
  return kMissCauseFields[static_cast<size_t>(cause)].field;
}

uint64_t CacheCounters::*miss_cause_counter(MissCause cause) {
  return kMissCauseFields[static_cast<size_t>(cause)].member;
}

static_assert(std::size(kMissCauseFields) == size_t(MissCause::Removed) + 1,
              "one statistics field per MissCause, in the same order");

nlohmann::json key_parts_to_json(const KeyParts& p) {
  return {{"key", p.key},
          {"backend", p.backend},
          {"codegen", p.codegen},
          {"compiler", p.compiler},
          {"compiler_version", p.compiler_version},
          {"compiler_id", p.compiler_id},
          {"target", p.target},
          {"isa", p.isa},
          {"flags", p.flags}};
}

std::optional<KeyParts> key_parts_from_json(const nlohmann::json& j) {
  if (!j.is_object()) return std::nullopt;
  for (const char* f : {"key", "backend", "codegen", "compiler", "compiler_version", "compiler_id",
                        "target", "isa"})
    if (!is_string(j, f)) return std::nullopt;
  auto flags = j.find("flags");
  if (flags == j.end() || !flags->is_array()) return std::nullopt;
  KeyParts p;
  p.key = j["key"].get<std::string>();
  p.backend = j["backend"].get<std::string>();
  p.codegen = j["codegen"].get<std::string>();
  p.compiler = j["compiler"].get<std::string>();
  p.compiler_version = j["compiler_version"].get<std::string>();
  p.compiler_id = j["compiler_id"].get<std::string>();
  p.target = j["target"].get<std::string>();
  p.isa = j["isa"].get<std::string>();
  for (const nlohmann::json& f : *flags) {
    if (!f.is_string()) return std::nullopt;
    p.flags.push_back(f.get<std::string>());
  }
  return p;
}

std::string ir_digest(const std::string& backend, const std::string& ir_text) {
  std::string bytes;
  append_field(bytes, "backend", backend);
  append_field(bytes, "ir", ir_text);
  return xxh3_128_hex(bytes);
}

MissExplanation explain_miss(const KeyParts* before, const KeyParts& now) {
  if (!before) return {MissCause::New, ""};
  if (before->key == now.key)
    return {MissCause::Removed, "its cache entry had been removed (evicted, cleared or damaged)"};
  if (before->compiler_id != now.compiler_id || before->compiler != now.compiler ||
      before->compiler_version != now.compiler_version)
    return {MissCause::Compiler,
            "the compiler changed (" + compiler_difference(*before, now) + ")"};
  if (before->isa != now.isa || before->target != now.target) {
    std::string what = before->isa != now.isa ? before->isa + " -> " + now.isa
                                              : target_difference(before->target, now.target);
    // A target chosen by flags (-march=x86-64-v3), or flags that follow the target
    // (-mprefer-vector-width=512 on AVX-512): both are part of the story.
    if (before->flags != now.flags)
      what += "; flags: " + flags_difference(before->flags, now.flags);
    return {MissCause::Target, "the target changed (" + what + ")"};
  }
  if (before->flags != now.flags)
    return {MissCause::Flags,
            "the compiler flags changed (" + flags_difference(before->flags, now.flags) + ")"};
  if (before->codegen != now.codegen)
    return {MissCause::Codegen,
            "the code generator changed (" + before->codegen + " -> " + now.codegen + ")"};
  // Every recorded part is the same but the key is not: something the parts do not show.
  return {MissCause::Compiler, "the toolchain changed"};
}

std::string recompile_summary(uint64_t count, const std::string& reason) {
  return std::to_string(count) + (count == 1 ? " kernel" : " kernels") +
         " compiled again: " + reason;
}

std::string miss_causes_text(const CacheCounters& c) {
  std::string out;
  for (const CacheCounterField& f : kMissCauseFields)
    out += (out.empty() ? "" : ", ") + std::string(f.label) + " " + std::to_string(c.*f.member);
  return out;
}

}  // namespace metajit
