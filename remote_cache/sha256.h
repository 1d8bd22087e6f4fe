// SHA-256 (libsodium) as 64 lowercase hex digits: the digests of the remote cache's entries and
// of the compiler binaries behind a portable kernel key, where a 128-bit non-cryptographic hash
// (base/checksum.h, enough against accidents on one machine) is not enough against a fleet.
#pragma once
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace metajit {

std::string sha256_hex(std::string_view data);
// The digest of a file's bytes, streamed; nullopt when it cannot be read.
std::optional<std::string> file_sha256_hex(const std::filesystem::path& path);

}  // namespace metajit
