#include "runtime/pending_kernel.h"

#include <algorithm>
#include <unordered_map>

#include "codegen/kernel_key.h"

namespace metajit {

std::vector<Pending> group_by_key(const std::vector<const KernelIR*>& irs,
                                  const std::vector<std::string>& texts,
                                  const std::vector<size_t>& which, const Backend& backend) {
  std::vector<Pending> pending;
  std::unordered_map<std::string, size_t> by_key;
  for (size_t i : which) {
    std::string key = kernel_key(backend.name, texts[i], backend.identity);
    auto [it, fresh] = by_key.emplace(key, pending.size());
    if (fresh) {
      Pending p;
      p.key = key;
      p.ir_digest = ir_digest(backend.name, texts[i]);
      p.ir = irs[i];
      p.ir_text = texts[i];
      pending.push_back(std::move(p));
    }
    pending[it->second].positions.push_back(i);
  }
  std::sort(pending.begin(), pending.end(),
            [](const Pending& a, const Pending& b) { return a.key < b.key; });
  return pending;
}

}  // namespace metajit
