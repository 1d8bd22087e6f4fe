// The safetensors file format, as bytes only (no Vars): reading and checking a header, and
// laying out the header of a file to write. nn/safetensors.cc does the file I/O around it;
// tests/fuzz/fuzz_safetensors.cc feeds it arbitrary bytes.
//
// A file is: an 8-byte little-endian u64 N; N bytes of JSON, an object mapping each tensor's
// name to {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, plus an optional
// "__metadata__" object of string values; then the data buffer, which the offsets (relative to
// its start) index.
//
// Reading is as strict as Python's safetensors (0.8, its Rust deserializer), which rejects:
// N > 100 MB or beyond the file; a header that is not UTF-8 JSON starting with '{'; offsets that
// are not [begin, end] with begin <= end; a tensor whose byte count is not numel * itemsize; and,
// sorting tensors by offset, any overlap, hole or trailing byte: the tensors must cover the data
// buffer exactly. We follow it on holes (rejected, like Python) so that every file metajit
// accepts Python accepts too, and add what Python lets through: duplicate names anywhere in the
// header (its JSON map keeps the last) and headers nesting deeper than a valid one can. Fields
// of an entry other than dtype, shape and data_offsets are ignored, as Python ignores them.
#pragma once
#include <metajit/dtype.h>

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace metajit::safetensors {

// Python's limit on the header's size; a bigger header is refused before it is read.
inline constexpr uint64_t kMaxHeaderBytes = 100'000'000;
// A valid header nests 3 levels below its top object (top -> entry -> shape -> dimension); JSON
// nesting deeper is refused as it is parsed, so it never becomes a deep tree.
inline constexpr int kMaxHeaderDepth = 3;

struct TensorEntry {
  std::string name;
  DType dtype = DType::Float32;
  Shape shape;
  uint64_t begin = 0, end = 0;  // byte offsets into the data buffer
  uint64_t bytes() const { return end - begin; }
};

struct Header {
  std::vector<TensorEntry> tensors;  // in data order (by begin, then end)
  std::map<std::string, std::string> metadata;
};

// The header length N that the file's first 8 bytes hold, checked: the file has them and the
// header, and N <= kMaxHeaderBytes. Error naming `path` otherwise.
uint64_t header_length(const unsigned char (&prefix)[8], uint64_t file_size,
                       const std::string& path);

// Parses and checks the N header bytes of a file whose data buffer has `data_bytes` bytes.
// Error (DTypeError, ShapeError) naming `path`, the tensor and what is valid.
Header parse_header(std::string_view json, uint64_t data_bytes, const std::string& path);

// Both of the above on a whole file held in memory (`path` only names it in messages).
Header parse_image(std::string_view image, const std::string& path);

// A name read from a file, for a message: JSON-quoted (control characters escaped) and cut
// after 200 bytes, since a hostile name can be megabytes long.
std::string quoted_name(const std::string& name);

// "F32", "F64", "I32", "I64", "BOOL": the format's name for a dtype.
const char* dtype_code(DType dtype);

// What save_safetensors writes before the data: the 8-byte length and the padded header JSON,
// and the tensors in the order (and at the offsets) their bytes follow it.
struct Layout {
  std::string prefix;
  std::vector<TensorEntry> tensors;
  uint64_t data_bytes = 0;
};
// Orders `tensors` (name, dtype, shape given; offsets are assigned) as Python's safetensors
// does: by dtype, widest first (I64, F64, F32, I32, BOOL: its dtype enum order, descending),
// then by name bytewise. Error naming `path` and the tensor for a name "__metadata__", or a
// name or metadata string that is not valid UTF-8.
Layout plan_layout(std::vector<TensorEntry> tensors,
                   const std::map<std::string, std::string>& metadata, const std::string& path);

}  // namespace metajit::safetensors
