// Plain text shipped gzip-compressed in data/ (the King James Version's Book of Genesis,
// data/kjv/; credits in data/kjv/README.md), read the way digits_data.h reads the digits CSV, and
// turned into character ids for samples/train_charlm.
#pragma once
#include <zlib.h>

#include <array>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace text {

#ifndef METAJIT_KJV_TEXT
#define METAJIT_KJV_TEXT "data/kjv/genesis.txt.gz"
#endif

// The whole decompressed file; throws std::runtime_error naming the file when it cannot be
// opened or read.
inline std::string read_gz(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) throw std::runtime_error("cannot open " + path);
  std::string text;
  char buf[1 << 16];
  for (;;) {
    const int n = gzread(f, buf, sizeof buf);
    if (n < 0) {
      int code = 0;
      const std::string why = gzerror(f, &code);
      gzclose(f);
      throw std::runtime_error("cannot read " + path + ": " + why);
    }
    if (n == 0) break;
    text.append(buf, size_t(n));
  }
  gzclose(f);
  return text;
}

// The characters a text uses, in byte order, and the id of each (its position in that order).
struct Vocab {
  std::string chars;              // chars[id]
  std::array<int32_t, 256> id{};  // id[(unsigned char)c], -1 for a character not in the text
  explicit Vocab(const std::string& text) {
    std::array<bool, 256> seen{};
    for (const char c : text) seen[static_cast<unsigned char>(c)] = true;
    id.fill(-1);
    for (int c = 0; c < 256; ++c)
      if (seen[size_t(c)]) {
        id[size_t(c)] = int32_t(chars.size());
        chars.push_back(char(c));
      }
  }
  int64_t size() const { return int64_t(chars.size()); }
  // The ids of s; throws std::runtime_error on a character the vocabulary lacks.
  std::vector<int32_t> encode(const std::string& s) const {
    std::vector<int32_t> ids(s.size());
    for (size_t i = 0; i < s.size(); ++i) {
      ids[i] = id[static_cast<unsigned char>(s[i])];
      if (ids[i] < 0)
        throw std::runtime_error("character " +
                                 std::to_string(int(static_cast<unsigned char>(s[i]))) +
                                 " is not in the vocabulary");
    }
    return ids;
  }
};

}  // namespace text
