#include "api/program_cache.h"

#include <cstring>
#include <deque>
#include <mutex>
#include <unordered_map>

#include "base/config.h"

namespace metajit {
namespace {

constexpr size_t kMaxPrograms = 4096;

template <class T>
void put(std::string& s, const T& v) {
  s.append(reinterpret_cast<const char*>(&v), sizeof v);
}

struct Table {
  std::mutex mu;
  std::unordered_map<std::string, std::shared_ptr<const CachedProgram>> by_fingerprint;
  std::deque<std::string> order;  // insertion order, for dropping the oldest
};

Table& table() {
  static Table* t = new Table;  // never destroyed: used from atexit handlers' threads too
  return *t;
}

}  // namespace

void evaluation_fingerprint(const std::vector<NodePtr>& outputs, Device device, std::string& s,
                            std::vector<NodePtr>& leaves) {
  node_fingerprint(outputs, s, leaves);
  // reload_config() makes a new Config (the old one is kept): its address names the settings
  // (compiler, flags, opt level, shape specialisation) the programs were planned under.
  put(s, reinterpret_cast<uintptr_t>(&config()));
  put(s, uint8_t(device));
}

std::shared_ptr<const CachedProgram> find_program(const std::string& fingerprint) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  auto it = t.by_fingerprint.find(fingerprint);
  return it == t.by_fingerprint.end() ? nullptr : it->second;
}

void remember_program(const std::string& fingerprint,
                      std::shared_ptr<const CachedProgram> program) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  if (!t.by_fingerprint.emplace(fingerprint, std::move(program)).second) return;
  t.order.push_back(fingerprint);
  while (t.order.size() > kMaxPrograms) {
    t.by_fingerprint.erase(t.order.front());
    t.order.pop_front();
  }
}

}  // namespace metajit
