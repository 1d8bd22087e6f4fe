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
// Appends `label[<length of value>]=value` and a newline to `out`: how every hashed identity is
// written (kernel keys, toolchain identities). The length prefix lets a list of fields decode
// one way only, so two different lists never give the same text or digest.
void append_field(std::string& out, const std::string& label, const std::string& value);

// True when `s` is non-empty lowercase hex of at most 32 digits (keys and key prefixes).
bool is_key_hex(const std::string& s);

}  // namespace metajit
