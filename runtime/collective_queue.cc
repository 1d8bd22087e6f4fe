#include "runtime/collective_queue.h"

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

namespace metajit {
namespace {

class CollectiveQueue {
 public:
  CollectiveQueue() { std::thread([this] { run(); }).detach(); }

  std::future<void> submit(std::function<void()> work) {
    std::packaged_task<void()> task(std::move(work));
    std::future<void> done = task.get_future();
    {
      std::lock_guard<std::mutex> lock(mu_);
      tasks_.push_back(std::move(task));
    }
    ready_.notify_one();
    return done;
  }

 private:
  [[noreturn]] void run() {
    for (;;) {
      std::packaged_task<void()> task;
      {
        std::unique_lock<std::mutex> lock(mu_);
        ready_.wait(lock, [this] { return !tasks_.empty(); });
        task = std::move(tasks_.front());
        tasks_.pop_front();
      }
      task();  // an exception is stored in the future, never thrown here
    }
  }

  std::mutex mu_;
  std::condition_variable ready_;
  std::deque<std::packaged_task<void()>> tasks_;
};

}  // namespace

std::future<void> submit_collective(std::function<void()> work) {
  // Never destroyed: the thread is detached and may still be waiting when the process exits
  // (static destructors must not join a thread that another collective could be blocking).
  static CollectiveQueue* queue = new CollectiveQueue;
  return queue->submit(std::move(work));
}

}  // namespace metajit
