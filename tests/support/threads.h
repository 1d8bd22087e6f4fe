// Worker threads in tests. Catch2's assertions are not thread-safe, and a REQUIRE that fails
// in a worker thread ends the whole process: workers record what they see (in slots of their
// own, or atomics) and the test asserts on the main thread after run_threads has joined them.
#pragma once
#include <atomic>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "support/exceptions.h"

namespace metajit_test {

// Runs body(0) ... body(n - 1) on n threads, released together once all have started, and
// joins them. Returns for each thread what escaped its body ("" when nothing did); check it
// with CHECK(thrown == std::vector<std::string>(n)).
inline std::vector<std::string> run_threads(int n, const std::function<void(int)>& body) {
  std::vector<std::string> thrown(size_t(n > 0 ? n : 0));
  std::atomic<int> started{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < n; ++t)
    threads.emplace_back([&, t] {
      ++started;
      while (started.load() < n) std::this_thread::yield();
      thrown[size_t(t)] = thrown_message([&] { body(t); });
    });
  for (std::thread& th : threads) th.join();
  return thrown;
}

}  // namespace metajit_test
