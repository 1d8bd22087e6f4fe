// dist::shard: each rank's share of an epoch's samples, as PyTorch's DistributedSampler deals
// them (include/metajit/distributed.h).
#include <metajit/distributed.h>
#include <metajit/error.h>

#include <numeric>
#include <random>

namespace metajit::dist {
namespace {

// 0..n-1 in an order that depends only on (seed, epoch): Fisher-Yates with std::mt19937_64,
// whose output the standard fixes, and a bounded draw by rejection, never
// std::uniform_int_distribution or std::shuffle, whose algorithms differ between libraries.
std::vector<int64_t> epoch_order(int64_t n, uint64_t seed, int64_t epoch, bool shuffle) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t(0));
  if (!shuffle) return order;
  std::seed_seq seq{uint32_t(seed), uint32_t(seed >> 32), uint32_t(uint64_t(epoch)),
                    uint32_t(uint64_t(epoch) >> 32)};
  std::mt19937_64 gen(seq);
  for (int64_t i = n - 1; i > 0; --i) {
    const uint64_t bound = uint64_t(i) + 1, limit = UINT64_MAX - UINT64_MAX % bound;
    uint64_t draw = gen();
    while (draw >= limit) draw = gen();
    std::swap(order[size_t(i)], order[size_t(draw % bound)]);
  }
  return order;
}

}  // namespace

std::vector<int64_t> shard(int64_t n, uint64_t seed, int64_t epoch, bool shuffle, bool drop_last) {
  if (n < 0) throw Error("dist::shard: n = " + std::to_string(n) + " samples; expected n >= 0");
  if (epoch < 0)
    throw Error("dist::shard: epoch " + std::to_string(epoch) + "; expected epoch >= 0");
  const int64_t ranks = world_size(), me = rank();
  std::vector<int64_t> order = epoch_order(n, seed, epoch, shuffle);
  // Padded to a multiple of the ranks by repeating the order from its start (as often as it
  // takes when n < ranks), or cut to one.
  const int64_t total = drop_last ? n / ranks * ranks : (n + ranks - 1) / ranks * ranks;
  if (n > 0)
    for (int64_t i = n; i < total; ++i) order.push_back(order[size_t(i % n)]);
  order.resize(size_t(total));
  std::vector<int64_t> mine;
  mine.reserve(size_t(total / ranks));
  for (int64_t i = me; i < total; i += ranks) mine.push_back(order[size_t(i)]);
  return mine;
}

}  // namespace metajit::dist
