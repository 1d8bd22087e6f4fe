#include "runtime/kernel_recorder.h"

#include <mutex>
#include <set>
#include <vector>

#include "base/config.h"
#include "base/log.h"
#include "cache/manifest.h"
#include "codegen/kernel_spec.h"

namespace metajit {
namespace {

class KernelRecorder {
 public:
  void record(const std::string& key, const KernelIR& ir, const char* backend) {
    const std::string& path = config().record_path;
    if (path.empty()) return;
    std::lock_guard<std::mutex> lock(mu_);
    if (!keys_.insert(key).second) return;
    entries_.push_back({key, backend, ir.ops, kernel_spec_to_json(ir)});
    try {
      write_manifest(path, entries_);
    } catch (const std::exception& e) {
      warn_once("record:" + path, std::string("METAJIT_RECORD: ") + e.what());
    }
  }

 private:
  std::mutex mu_;
  std::set<std::string> keys_;
  std::vector<ManifestEntry> entries_;
};
KernelRecorder& recorder() {
  static KernelRecorder* r = new KernelRecorder;
  return *r;
}

}  // namespace

void record_kernel_use(const std::string& key, const KernelIR& ir, const char* backend) {
  recorder().record(key, ir, backend);
}

}  // namespace metajit
