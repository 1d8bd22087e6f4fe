#include "runtime/runtime_stats.h"

#include <metajit/runtime.h>

#include <mutex>

#include "base/buffer.h"
#include "meta_ops/node.h"
#include "remote_cache/remote_store.h"

namespace metajit {

namespace {

// The remote counters never go back (the cache's statistics take their increase); reset_stats()
// moves the point stats() counts them from.
struct RemoteBaseline {
  uint64_t hits = 0, misses = 0, rejected = 0, errors = 0, timeouts = 0, uploads = 0;
};
std::mutex baseline_mu;
RemoteBaseline remote_baseline;

}  // namespace

RuntimeCounters& runtime_counters() {
  static RuntimeCounters c;
  return c;
}

Stats stats() {
  RuntimeCounters& c = runtime_counters();
  AllocatorStats a = allocator_stats();
  Stats s;
  s.kernels_launched = c.kernels_launched.load();
  s.kernels_compiled = c.kernels_compiled.load();
  s.memory_hits = c.memory_hits.load();
  s.disk_hits = c.disk_hits.load();
  s.compile_seconds = double(c.compile_micros.load()) * 1e-6;
  s.bytes_in_use = a.bytes_in_use;
  s.peak_bytes = a.peak_bytes;
  AllocatorStats g = allocator_stats(Device::CUDA);
  s.cuda_bytes_in_use = g.bytes_in_use;
  s.cuda_peak_bytes = g.peak_bytes;
  s.cuda_kernels_launched = c.cuda_kernels_launched.load();
  s.collectives_run = c.collectives_run.load();
  s.kernels_during_collectives = c.kernels_during_collectives.load();
  RemoteCounters& r = remote_counters();
  RemoteBaseline base;
  {
    std::lock_guard<std::mutex> lock(baseline_mu);
    base = remote_baseline;
  }
  const RemoteBaseline* b = &base;
  s.remote_hits = r.hits.load() - b->hits;
  s.remote_misses = r.misses.load() - b->misses;
  s.remote_rejected = r.rejected.load() - b->rejected;
  s.remote_errors = r.errors.load() - b->errors;
  s.remote_timeouts = r.timeouts.load() - b->timeouts;
  s.remote_uploads = r.uploads.load() - b->uploads;
  const GraphCounts graph = graph_counts();
  s.live_vars = graph.live_vars;
  s.pending_nodes = graph.pending_nodes;
  s.realized_nodes = graph.realized_nodes;
  return s;
}

void reset_stats() {
  RuntimeCounters& c = runtime_counters();
  c.kernels_launched = 0;
  c.cuda_kernels_launched = 0;
  c.kernels_compiled = 0;
  c.memory_hits = 0;
  c.disk_hits = 0;
  c.compile_micros = 0;
  c.collectives_run = 0;
  c.kernels_during_collectives = 0;
  RemoteCounters& r = remote_counters();
  {
    std::lock_guard<std::mutex> lock(baseline_mu);
    remote_baseline = {r.hits.load(),   r.misses.load(),   r.rejected.load(),
                       r.errors.load(), r.timeouts.load(), r.uploads.load()};
  }
  reset_allocator_peak();
}

}  // namespace metajit
