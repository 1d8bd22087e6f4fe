#include "runtime/collective_runner.h"

#include <atomic>
#include <mutex>

namespace metajit {
namespace {
std::atomic<CollectiveRunner> installed{nullptr};
std::atomic<bool> overlap{false};
CollectiveWorld the_world;  // written once by dist::init, before any collective is built
std::mutex world_mutex;
}  // namespace

void set_collective_runner(CollectiveRunner runner) {
  installed.store(runner);
}

CollectiveRunner collective_runner() {
  return installed.load();
}

void set_collective_overlap(bool on) {
  overlap.store(on);
}

bool collective_overlap() {
  return overlap.load();
}

}  // namespace metajit

namespace metajit {

void set_collective_world(CollectiveWorld world) {
  std::lock_guard<std::mutex> lock(world_mutex);
  the_world = world;
}

CollectiveWorld collective_world() {
  std::lock_guard<std::mutex> lock(world_mutex);
  return the_world;
}

}  // namespace metajit
