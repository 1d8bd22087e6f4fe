// Looking into program output.
#pragma once
#include <cstddef>
#include <string>

namespace metajit_test {

// How many times `fragment` occurs in `text` (occurrences do not overlap).
inline size_t count_occurrences(const std::string& text, const std::string& fragment) {
  if (fragment.empty()) return 0;
  size_t n = 0;
  for (size_t at = text.find(fragment); at != std::string::npos;
       at = text.find(fragment, at + fragment.size()))
    ++n;
  return n;
}

}  // namespace metajit_test
