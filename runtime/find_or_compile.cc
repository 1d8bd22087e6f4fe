#include "runtime/find_or_compile.h"

#include "base/config.h"
#include "base/log.h"
#include "runtime/compile_tier.h"
#include "runtime/disk_tier.h"
#include "runtime/remote_tier.h"

namespace metajit {

namespace fs = std::filesystem;

std::optional<CompileError> find_or_compile(
    std::vector<Pending>& pending, const Backend& backend, int jobs, bool always_show_progress,
    bool require_writable,
    const std::function<bool(Pending&, const fs::path&, KernelOrigin)>& use_cached,
    const std::function<void(Pending&)>& use_compiled, CacheCounters& delta) {
  CacheStore store(config().cache_dir);
  sweep_once(store);
  if (require_writable) store.private_dir("tmp");
  RemoteStore* remote = usable_remote();
  std::string portable;  // the remote keys' toolchain identity, once per batch
  std::vector<Pending*> compiled, waiting, late;
  // A miss: counted, explained and staged, to be compiled with `round`.
  auto miss = [&](Pending& p, std::vector<Pending*>& round) {
    delta.misses++;
    p.why = explain_disk_miss(store, p, backend);
    delta.*miss_cause_counter(p.why.cause) += 1;
    if (log_enabled(LogLevel::Debug))
      log_message(LogLevel::Debug,
                  "miss " + p.key + " (" + std::to_string(p.ir->ops.size()) +
                      " ops: " + (p.ir->ops.empty() ? "" : p.ir->ops.front()) +
                      (p.ir->ops.size() > 1 ? ", ..." : "") +
                      "): " + (p.why.cause == MissCause::New ? "a new kernel" : p.why.reason));
    stage(p, store, backend);
    round.push_back(&p);
  };
  // Compiles and installs `round`, hands each kernel over and queues its upload (which ends its
  // lease). Returns the round's first compile failure.
  auto build = [&](std::vector<Pending*>& round) {
    log_miss_causes(round);
    std::optional<CompileError> failure;
    if (round.empty()) return failure;
    failure = compile_and_install(round, store, backend, jobs, always_show_progress, delta);
    for (Pending* p : round) use_compiled(*p);
    if (remote)
      for (Pending* p : round) {
        if (!p->object.empty() && remote->writable()) {
          try {
            remote->upload_later(upload_job(*p, p->object, backend, portable));
            continue;
          } catch (const CacheError& e) {
            log_message(LogLevel::Debug, "not uploading " + p->key + ": " + e.what());
          }
        }
        remote->release_lease(p->remote_key, p->lease_token);
      }
    return failure;
  };
  for (Pending& p : pending) {
    if (std::optional<fs::path> so = find_or_lock(store, p)) {
      if (use_cached(p, *so, KernelOrigin::Disk)) continue;
      p.lock = store.lock_key(p.key);
    }
    if (remote && portable.empty() && (portable = portable_of(backend)).empty()) remote = nullptr;
    if (remote) {
      p.remote_key = remote_key_of(backend, p.ir_text, portable);
      bool leased_by_other = false;
      if (std::optional<fs::path> so =
              install_from_remote(*remote, store, p, backend, delta, leased_by_other)) {
        p.lock.release();
        if (use_cached(p, *so, KernelOrigin::Remote)) continue;
        p.lock = store.lock_key(p.key);
      } else if (leased_by_other) {
        waiting.push_back(&p);
        continue;
      }
    }
    miss(p, compiled);
  }
  // The kernels other machines hold leases on are waited for only after this process has built
  // (and queued the uploads of) the ones it holds leases on: waiting while holding leases would
  // wait for machines that wait for us. Two machines whose local keys order the kernels
  // differently (another compiler path or mtime, same content: the same remote keys) each
  // waited out METAJIT_REMOTE_WAIT, then both compiled everything.
  std::optional<CompileError> failure = build(compiled);
  for (Pending* p : waiting) {
    if (std::optional<fs::path> so = wait_and_install(*remote, store, *p, backend, delta)) {
      p->lock.release();
      if (use_cached(*p, *so, KernelOrigin::Remote)) continue;
      p->lock = store.lock_key(p->key);
    }
    miss(*p, late);
  }
  std::optional<CompileError> late_failure = build(late);
  if (!failure) failure = late_failure;
  take_remote_counts(delta);
  store.add_counters(delta);
  if (!compiled.empty() || !late.empty()) store.maintain(config().cache_max_size);
  return failure;
}

}  // namespace metajit
