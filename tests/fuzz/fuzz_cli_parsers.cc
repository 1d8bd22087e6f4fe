// libFuzzer target: the size and duration parsers (base/config.cc) behind `metajit cache clear
// --older-than`, `cache evict --max-size`, METAJIT_CACHE_MAX_SIZE and METAJIT_COMPILE_TIMEOUT.
// Any text is accepted or refused, never a crash or an overflowed value: an accepted size
// re-parses from its plain byte count to itself, an accepted duration is finite and not
// negative.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "base/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  uint64_t bytes = 0;
  if (metajit::parse_size(text, bytes)) {
    uint64_t again = 0;
    if (!metajit::parse_size(std::to_string(bytes), again) || again != bytes) std::abort();
  }
  double seconds = 0;
  if (metajit::parse_duration(text, seconds) && !(std::isfinite(seconds) && seconds >= 0))
    std::abort();
  return 0;
}
