// XXH3-128 digests written as 32 lowercase hex digits: kernel keys and file checksums.
#pragma once
#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>

namespace metajit {

std::string xxh3_128_hex(const void* data, size_t size);
std::string xxh3_128_hex(const std::string& data);
// Digest of a file's bytes; nullopt if it cannot be read.
std::optional<std::string> xxh3_128_file_hex(const std::filesystem::path& path);
// True when `s` is non-empty lowercase hex of at most 32 digits (keys and key prefixes).
bool is_key_hex(const std::string& s);

}  // namespace metajit
