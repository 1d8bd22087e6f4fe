// The memory-bandwidth floor: an OpenMP copy (b = a) and triad (a = b + s*c) over buffers of a
// workload's size, timed in the same blocks as the workload itself. Their best rate (bytes
// read + bytes written per second, STREAM's way of counting) turns a workload's compulsory
// bytes (inputs read once, output written once) into the fastest time it could take.
#pragma once
#include <cstdint>
#include <vector>

#include "bench/timing.h"

namespace bench {

struct FloorProbe {
  int64_t elems = 0;
  // Appends the copy and triad impls to `impls`; remember where they went.
  void add_to(std::vector<Impl>& impls);
  // After measure(): the rates from the timings at the recorded positions.
  void read(const std::vector<Timing>& timings);

  double copy_bytes_per_s = kNaN, triad_bytes_per_s = kNaN;
  double bytes_per_s() const;  // the better of the two
  double floor_seconds(double compulsory_bytes) const { return compulsory_bytes / bytes_per_s(); }

 private:
  size_t copy_at = 0, triad_at = 0;
};

}  // namespace bench
