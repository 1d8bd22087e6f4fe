#include "nn/safetensors_format.h"

#include <metajit/error.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

namespace metajit::safetensors {

namespace {

using json = nlohmann::json;

}  // namespace

std::string quoted_name(const std::string& name) {
  std::string q = json(name.substr(0, 200)).dump(-1, ' ', false, json::error_handler_t::replace);
  return name.size() > 200 ? q + "..." : q;
}

namespace {

std::string where(const std::string& path) {
  return "load_safetensors: " + path + ": ";
}
std::string where(const std::string& path, const std::string& tensor) {
  return where(path) + "tensor " + quoted_name(tensor) + ": ";
}

constexpr const char* kSupported = "F32, F64, F16, BF16, I32, I64, I16, I8, U8 and BOOL";

// The file's dtype name, as a metajit dtype.
DType parse_dtype(const json& code, const std::string& path, const std::string& tensor) {
  static const std::map<std::string, DType> known = {
      {"F32", DType::Float32},   {"F64", DType::Float64}, {"I32", DType::Int32},
      {"I64", DType::Int64},     {"BOOL", DType::Bool},   {"F16", DType::Float16},
      {"BF16", DType::BFloat16}, {"I8", DType::Int8},     {"U8", DType::UInt8},
      {"I16", DType::Int16}};
  // The format's other dtypes: valid files metajit cannot hold (yet), told apart from typos.
  static const std::set<std::string> later = {"U16",     "U32", "U64",     "F8_E4M3", "F8_E5M2",
                                              "F8_E8M0", "F4",  "F6_E2M3", "F6_E3M2", "C64"};
  if (!code.is_string())
    throw DTypeError(where(path, tensor) + "\"dtype\" is " +
                     code.dump(-1, ' ', false, json::error_handler_t::replace).substr(0, 100) +
                     ", not a string; valid: " + kSupported);
  const std::string& s = code.get_ref<const std::string&>();
  if (auto it = known.find(s); it != known.end()) return it->second;
  if (later.count(s))
    throw DTypeError(where(path, tensor) + "dtype " + s +
                     " is valid safetensors, but metajit "
                     "does not have that dtype yet; it reads " +
                     kSupported);
  throw DTypeError(where(path, tensor) + "unknown dtype " + quoted_name(s) +
                   "; valid: " + kSupported);
}

// The shape, and its element count times the item size, checked not to overflow int64.
Shape parse_shape(const json& j, DType dtype, uint64_t* bytes, const std::string& path,
                  const std::string& tensor) {
  if (!j.is_array())
    throw ShapeError(where(path, tensor) + "\"shape\" must be a list of non-negative integers");
  Shape shape;
  uint64_t n = 1;
  bool overflow = false;
  for (const json& d : j) {
    if (!d.is_number_integer() || (!d.is_number_unsigned() && d.get<int64_t>() < 0))
      throw ShapeError(where(path, tensor) + "\"shape\" holds " + d.dump().substr(0, 100) +
                       "; it must be a list of non-negative integers");
    const uint64_t v = d.get<uint64_t>();
    if (v > uint64_t(std::numeric_limits<int64_t>::max()))
      overflow = true;
    else if (v != 0 && n > uint64_t(std::numeric_limits<int64_t>::max()) / v)
      overflow = true;
    else
      n *= v;
    shape.push_back(int64_t(std::min<uint64_t>(v, uint64_t(std::numeric_limits<int64_t>::max()))));
  }
  // A zero dimension makes any other size harmless (no elements); else the bytes must fit.
  const bool empty = std::find(shape.begin(), shape.end(), int64_t(0)) != shape.end();
  if (empty) n = 0;
  const uint64_t item = dtype_size(dtype);
  if (!empty && (overflow || n > uint64_t(std::numeric_limits<int64_t>::max()) / item))
    throw ShapeError(where(path, tensor) + "shape " + j.dump().substr(0, 200) + " of " +
                     dtype_code(dtype) + " has more bytes than fit in int64");
  *bytes = n * item;
  return shape;
}

// [begin, end] within the data buffer, and as long as the shape needs.
void parse_offsets(const json& j, TensorEntry& e, uint64_t need, uint64_t data_bytes,
                   const std::string& path) {
  if (!j.is_array() || j.size() != 2 || !j[0].is_number_unsigned() || !j[1].is_number_unsigned())
    throw Error(where(path, e.name) +
                "\"data_offsets\" must be [begin, end], two non-negative "
                "integers");
  e.begin = j[0].get<uint64_t>();
  e.end = j[1].get<uint64_t>();
  if (e.begin > e.end || e.end > data_bytes)
    throw Error(where(path, e.name) + "data_offsets [" + std::to_string(e.begin) + ", " +
                std::to_string(e.end) +
                "] are not within the data buffer: it needs begin <= end "
                "<= " +
                std::to_string(data_bytes) + " (the bytes after the header)");
  if (e.bytes() != need)
    throw Error(where(path, e.name) + "data_offsets [" + std::to_string(e.begin) + ", " +
                std::to_string(e.end) + "] span " + std::to_string(e.bytes()) + " bytes, but " +
                dtype_code(e.dtype) + " of shape " + shape_str(e.shape) + " is " +
                std::to_string(need) + " bytes");
}

TensorEntry parse_entry(const std::string& name, const json& j, uint64_t data_bytes,
                        const std::string& path) {
  if (!j.is_object())
    throw Error(where(path, name) +
                "its entry must be an object {\"dtype\", \"shape\", "
                "\"data_offsets\"}");
  for (const char* field : {"dtype", "shape", "data_offsets"})
    if (!j.contains(field))
      throw Error(where(path, name) + "its entry has no \"" + field +
                  "\"; it needs \"dtype\", "
                  "\"shape\" and \"data_offsets\"");
  TensorEntry e;
  e.name = name;
  e.dtype = parse_dtype(j["dtype"], path, name);
  uint64_t need = 0;
  e.shape = parse_shape(j["shape"], e.dtype, &need, path, name);
  parse_offsets(j["data_offsets"], e, need, data_bytes, path);
  return e;
}

std::map<std::string, std::string> parse_metadata(const json& j, const std::string& path) {
  if (!j.is_object()) throw Error(where(path) + "\"__metadata__\" must be an object of strings");
  std::map<std::string, std::string> out;
  for (const auto& [k, v] : j.items()) {
    if (!v.is_string())
      throw Error(where(path) + "\"__metadata__\" value of " + quoted_name(k) +
                  " is not a string; "
                  "metadata maps strings to strings");
    out[k] = v.get<std::string>();
  }
  return out;
}

// The tensors must tile the data buffer: sorted by offset, each starts where the one before
// ends, and the last ends at its end (Python's rule; see the header).
void check_coverage(std::vector<TensorEntry>& tensors, uint64_t data_bytes,
                    const std::string& path) {
  std::sort(tensors.begin(), tensors.end(), [](const TensorEntry& a, const TensorEntry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t covered = 0;
  const TensorEntry* prev = nullptr;
  for (const TensorEntry& e : tensors) {
    if (e.begin < covered)
      throw Error(where(path, e.name) + "bytes [" + std::to_string(e.begin) + ", " +
                  std::to_string(e.end) + ") overlap tensor " + quoted_name(prev->name) + "'s [" +
                  std::to_string(prev->begin) + ", " + std::to_string(prev->end) + ")");
    if (e.begin > covered)
      throw Error(where(path, e.name) + "starts at byte " + std::to_string(e.begin) +
                  " of the data buffer, leaving a hole after byte " + std::to_string(covered) +
                  "; the tensors must cover the data buffer without gaps (as Python's "
                  "safetensors requires)");
    covered = e.end;
    prev = &e;
  }
  if (covered != data_bytes)
    throw Error(where(path) + "the data buffer has " + std::to_string(data_bytes) +
                " bytes but its tensors cover " + std::to_string(covered) +
                "; the tensors must cover it exactly (as Python's safetensors requires)");
}

}  // namespace

uint64_t header_length(const unsigned char (&prefix)[8], uint64_t file_size,
                       const std::string& path) {
  if (file_size < 8)
    throw Error(where(path) + "the file has " + std::to_string(file_size) +
                " bytes; a safetensors "
                "file starts with an 8-byte header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | prefix[i];  // little-endian on any host
  if (n > kMaxHeaderBytes)
    throw Error(where(path) + "header length " + std::to_string(n) + " is over the limit of " +
                std::to_string(kMaxHeaderBytes) + " bytes (Python's safetensors' too)");
  if (n > file_size - 8)
    throw Error(where(path) + "header length " + std::to_string(n) +
                " runs past the end of the "
                "file (" +
                std::to_string(file_size) + " bytes)");
  return n;
}

namespace {

// Parses the header with two checks nlohmann's parser does not make: no object may repeat a
// key (nlohmann would keep one silently, and a tensor could hide behind another), and nothing
// may nest deeper than kMaxHeaderDepth (values below it are dropped as they are parsed).
json parse_checked(std::string_view text, const std::string& path) {
  bool too_deep = false;
  std::string duplicate;
  int duplicate_depth = 0;
  // keys[d]: the keys seen so far in the object open at depth d - 1 (its keys come at depth d).
  std::vector<std::set<std::string>> keys(kMaxHeaderDepth + 2);
  json::parser_callback_t check = [&](int depth, json::parse_event_t event, json& parsed) {
    if (depth > kMaxHeaderDepth) too_deep = true;
    if (too_deep || !duplicate.empty()) return false;
    if (event == json::parse_event_t::object_start) {
      keys[size_t(depth) + 1].clear();
    } else if (event == json::parse_event_t::key &&
               !keys[size_t(depth)].insert(parsed.get<std::string>()).second) {
      duplicate = parsed.get<std::string>();
      duplicate_depth = depth;
    }
    return true;
  };
  json j;
  try {
    j = json::parse(text.begin(), text.end(), check, /*allow_exceptions=*/true);
  } catch (const json::exception& e) {
    throw Error(where(path) +
                "the header is not valid JSON: " + std::string(e.what()).substr(0, 300));
  }
  if (too_deep)
    throw Error(where(path) + "the header nests deeper than " + std::to_string(kMaxHeaderDepth) +
                " levels below its top object; a valid one nests name -> entry -> shape -> "
                "dimension");
  if (!duplicate.empty())
    throw Error(where(path) + (duplicate_depth == 1 ? "tensor name " : "key ") +
                quoted_name(duplicate) + " appears twice" +
                (duplicate_depth == 1 ? "" : " in one object") + "; names must be unique");
  return j;
}

}  // namespace

Header parse_header(std::string_view text, uint64_t data_bytes, const std::string& path) {
  // Python's check too: a header is an object, and its first byte says so.
  if (text.empty() || text.front() != '{')
    throw Error(where(path) + "the header does not start with '{'; it must be a JSON object");
  const json j = parse_checked(text, path);
  if (!j.is_object())
    throw Error(where(path) + "the header is not a JSON object of tensor entries");
  Header h;
  for (const auto& [name, value] : j.items()) {
    if (name == "__metadata__")
      h.metadata = parse_metadata(value, path);
    else
      h.tensors.push_back(parse_entry(name, value, data_bytes, path));
  }
  check_coverage(h.tensors, data_bytes, path);
  return h;
}

Header parse_image(std::string_view image, const std::string& path) {
  unsigned char prefix[8] = {};
  std::memcpy(prefix, image.data(), std::min<size_t>(8, image.size()));
  const uint64_t n = header_length(prefix, image.size(), path);
  return parse_header(image.substr(8, size_t(n)), image.size() - 8 - n, path);
}

const char* dtype_code(DType dtype) {
  switch (dtype) {
    case DType::Bool:
      return "BOOL";
    case DType::Int32:
      return "I32";
    case DType::Int64:
      return "I64";
    case DType::Float32:
      return "F32";
    case DType::Float64:
      return "F64";
    case DType::Int8:
      return "I8";
    case DType::UInt8:
      return "U8";
    case DType::Int16:
      return "I16";
    case DType::Float16:
      return "F16";
    case DType::BFloat16:
      return "BF16";
  }
  return "?";
}

namespace {

// Python's safetensors sorts by its Dtype enum (BOOL < U8 < I8 < ... < I16 < U16 < F16 < BF16 <
// I32 < U32 < F32 < F64 < I64 < U64), descending: the widest alignment first, so every tensor
// of a file it writes is aligned.
int python_dtype_rank(DType t) {
  switch (t) {
    case DType::Bool:
      return 0;
    case DType::UInt8:
      return 1;
    case DType::Int8:
      return 2;
    case DType::Int16:
      return 3;
    case DType::Float16:
      return 4;
    case DType::BFloat16:
      return 5;
    case DType::Int32:
      return 6;
    case DType::Float32:
      return 7;
    case DType::Float64:
      return 8;
    case DType::Int64:
      return 9;
  }
  return 0;
}

// A JSON string as serde_json writes it (nlohmann escapes the same characters the same way:
// '"', '\\', and control characters, \u00xx in lower case, UTF-8 left as it is).
std::string json_string(const std::string& s, const std::string& path, const char* what) {
  try {
    return json(s).dump();
  } catch (const json::exception&) {
    throw Error("save_safetensors: " + path + ": " + what + " " + quoted_name(s) +
                " is not valid UTF-8; safetensors headers are UTF-8 JSON");
  }
}

}  // namespace

Layout plan_layout(std::vector<TensorEntry> tensors,
                   const std::map<std::string, std::string>& metadata, const std::string& path) {
  std::sort(tensors.begin(), tensors.end(), [](const TensorEntry& a, const TensorEntry& b) {
    const int ra = python_dtype_rank(a.dtype), rb = python_dtype_rank(b.dtype);
    return ra != rb ? ra > rb : a.name < b.name;  // std::string compares bytes as unsigned
  });
  std::string h = "{";
  if (!metadata.empty()) {
    h += "\"__metadata__\":{";
    for (const auto& [k, v] : metadata)
      h +=
          json_string(k, path, "metadata key") + ":" + json_string(v, path, "metadata value") + ",";
    h.back() = '}';
    h += ",";
  }
  uint64_t offset = 0;
  for (TensorEntry& e : tensors) {
    if (e.name == "__metadata__")
      throw Error("save_safetensors: " + path +
                  ": a tensor cannot be named \"__metadata__\"; the "
                  "format keeps that key for the metadata");
    e.begin = offset;
    e.end = offset + uint64_t(numel_of(e.shape)) * dtype_size(e.dtype);
    offset = e.end;
    std::string dims;
    for (int64_t d : e.shape) dims += (dims.empty() ? "" : ",") + std::to_string(d);
    h += json_string(e.name, path, "tensor name") + ":{\"dtype\":\"" + dtype_code(e.dtype) +
         "\",\"shape\":[" + dims + "],\"data_offsets\":[" + std::to_string(e.begin) + "," +
         std::to_string(e.end) + "]},";
  }
  if (h.back() == ',') h.pop_back();
  h += "}";
  h.append((8 - h.size() % 8) % 8, ' ');  // Python pads so the data starts 8-byte aligned
  Layout out;
  for (int i = 0; i < 8; ++i) out.prefix += char((uint64_t(h.size()) >> (8 * i)) & 0xff);
  out.prefix += h;
  out.tensors = std::move(tensors);
  out.data_bytes = offset;
  return out;
}

}  // namespace metajit::safetensors
