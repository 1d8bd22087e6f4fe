// jit functions with list parameters (std::vector<Var>): one JitCore per list layout
// (include/metajit/jit.h JitCoresByLayout), and how their flat arguments are named.
#include <metajit/error.h>
#include <metajit/jit.h>

#include <mutex>
#include <utility>

#include "base/config.h"
#include "base/log.h"

namespace metajit::detail {

struct JitCoresByLayout::Impl {
  mutable std::mutex mu;
  std::vector<std::pair<std::vector<size_t>, std::shared_ptr<JitCore>>> cores;
  bool warned = false;
};

JitCoresByLayout::JitCoresByLayout(Factory factory, std::string name)
    : factory_(std::move(factory)), name_(std::move(name)), impl_(std::make_shared<Impl>()) {}

JitCore& JitCoresByLayout::core_for(const std::vector<size_t>& layout) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  for (const auto& [l, core] : impl_->cores)
    if (l == layout) return *core;
  impl_->cores.emplace_back(layout, factory_(layout));
  JitCore& core = *impl_->cores.back().second;
  if (name_.empty()) name_ = jit_name(core);
  // Each layout counts its own traces (jit_function.cc note_trace); lengths that change every
  // call would retrace every call without that warning, so the layouts are counted here.
  const int limit = config().retrace_warn;
  if (limit > 0 && impl_->cores.size() > size_t(limit) && !impl_->warned) {
    impl_->warned = true;
    std::string lengths;
    for (size_t n : layout) lengths += (lengths.empty() ? "" : ", ") + std::to_string(n);
    log_message(LogLevel::Warn,
                "jit function '" + name_ + "' was traced for " +
                    std::to_string(impl_->cores.size()) +
                    " different lengths of its list arguments (METAJIT_RETRACE_WARN=" +
                    std::to_string(limit) + "), the last one " + lengths +
                    ". Each length is a new signature that traces again; keep the lists' "
                    "lengths fixed, or raise METAJIT_RETRACE_WARN to silence this");
  }
  return core;
}

uint64_t JitCoresByLayout::traces() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  uint64_t n = 0;
  for (const auto& entry : impl_->cores) n += jit_traces(*entry.second);
  return n;
}

const std::string& JitCoresByLayout::name() const {
  std::lock_guard<std::mutex> lock(impl_->mu);  // set once, by the first trace of an unnamed fn
  return name_;
}

void check_static_args(const std::vector<int>& static_args, size_t num_params) {
  for (int i : static_args)
    if (i < 0 || size_t(i) >= num_params)
      throw Error("jit: static_args holds " + std::to_string(i) +
                  ", out of range for a function of " + std::to_string(num_params) +
                  " parameter(s) (valid: 0.." +
                  std::to_string(num_params == 0 ? 0 : num_params - 1) + ")");
}

std::vector<std::string> flat_argument_labels(const std::vector<bool>& is_list,
                                              const std::vector<size_t>& layout) {
  std::vector<std::string> labels;
  size_t next_list = 0;
  for (size_t p = 0; p < is_list.size(); ++p) {
    const std::string name = "argument " + std::to_string(p);
    if (!is_list[p]) {
      labels.push_back(name);
      continue;
    }
    for (size_t k = 0; k < layout.at(next_list); ++k)
      labels.push_back(name + "[" + std::to_string(k) + "]");
    ++next_list;
  }
  return labels;
}

std::vector<int> flat_static_args(const std::vector<int>& static_args,
                                  const std::vector<bool>& is_list,
                                  const std::vector<size_t>& layout) {
  std::vector<size_t> first(is_list.size()), count(is_list.size());
  size_t at = 0, next_list = 0;
  for (size_t p = 0; p < is_list.size(); ++p) {
    first[p] = at;
    count[p] = is_list[p] ? layout.at(next_list++) : 1;
    at += count[p];
  }
  std::vector<int> flat;
  for (int i : static_args)
    for (size_t k = 0; k < count[size_t(i)]; ++k) flat.push_back(int(first[size_t(i)] + k));
  return flat;
}

}  // namespace metajit::detail
