// save_safetensors / load_safetensors (include/metajit/nn.h, README "Weights (safetensors)"):
//
//   1. round trips: every dtype (F32 F64 I32 I64 BOOL), 0-d and empty tensors, lazy Vars,
//      metadata with characters JSON escapes;
//   2. the bytes written, against a file built by hand here as Python's safetensors.numpy
//      writes it (tensors by dtype, widest first, then name; header padded to 8 bytes);
//   3. atomic writes: a save that fails leaves the old file as it was and no temporary file;
//   4. malformed files, one per rule of nn/safetensors_format.h: each is the expected typed
//      Error, naming load_safetensors, the file and (where there is one) the tensor.
// tests/safetensors_python_check.py checks the same against Python's own package.
#include <metajit/metajit.h>
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <typeinfo>
#include <vector>

#include "support/exceptions.h"
#include "support/files.h"

using namespace metajit;
using Catch::Matchers::Contains;
using metajit_test::message_of;
using metajit_test::read_file;
using metajit_test::TempDir;
using metajit_test::write_file;
namespace fs = std::filesystem;

namespace {

std::string le64(uint64_t v) {
  std::string s;
  for (int i = 0; i < 8; ++i) s += char((v >> (8 * i)) & 0xff);
  return s;
}

template <class T>
std::string bytes_of(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

// A file image: the header's length, the header, the data buffer.
std::string image(const std::string& header, const std::string& data) {
  return le64(header.size()) + header + data;
}

// An entry of a header: "name":{"dtype":..,"shape":..,"data_offsets":..}.
std::string entry(const std::string& name, const std::string& dtype, const std::string& shape,
                  const std::string& offsets) {
  return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape +
         ",\"data_offsets\":" + offsets + "}";
}

// Loading `bytes` from a file must throw exactly E (not a subclass, not another Error) whose
// message names the op and the file; returns the message.
template <class E>
std::string load_error(const TempDir& dir, const std::string& bytes) {
  const std::string path = (dir.path() / "bad.safetensors").string();
  write_file(path, bytes);
  std::string what;
  try {
    load_safetensors(path);
    FAIL("load_safetensors accepted a malformed file");
  } catch (const Error& e) {
    INFO(e.what());
    CHECK(typeid(e) == typeid(E));
    what = e.what();
  }
  CHECK_THAT(what, Contains("load_safetensors: ") && Contains(path));
  return what;
}

// The names of the entries of `dir`, to see that no temporary file was left behind.
std::vector<std::string> entries_of(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  return out;
}

}  // namespace

TEST_CASE("safetensors round trip: every dtype, 0-d and empty tensors, lazy Vars") {
  TempDir dir;
  const std::string path = (dir.path() / "w.safetensors").string();
  nn::StateDict state{
      {"f32", array<float>({1.5f, -0.0f, 3.25e-20f, 7e30f, -2.f, 0.1f}, {2, 3})},
      {"f64", array<double>({3.141592653589793, -1e-300}, {2})},
      {"i32", array<int32_t>({INT32_MIN, -1, 0, INT32_MAX}, {4, 1})},
      {"i64", array<int64_t>({INT64_MIN, 1, INT64_MAX}, {3})},
      {"bool", array<bool>({true, false, false, true, true}, {5})},
      {"scalar", array<double>({2.5}, {})},
      {"empty", zeros({0, 3}, DType::Int64)},
      {"lazy", arange(4, DType::Int32) * 3},  // not evaluated yet: save evaluates it
      {"f16", array<float16>({float16(0.5f), float16::from_bits(0x7e01), float16(-65504.f)}, {3})},
      {"bf16", array<bfloat16>({bfloat16(1e38f), bfloat16::from_bits(0x8001)}, {2})},
      {"i8", array<int8_t>({-128, 127}, {2})},
      {"u8", array<uint8_t>({0, 255, 7}, {3})},
      {"i16", array<int16_t>({-32768, 32767}, {2, 1})},
  };
  save_safetensors(path, state);
  std::map<std::string, std::string> meta{{"stale", "x"}};
  nn::StateDict back = load_safetensors(path, &meta);
  CHECK(meta.empty());  // the file has none: the map is replaced, not merged
  REQUIRE(back.size() == state.size());
  for (const auto& [name, v] : state) {
    INFO(name);
    const Var& w = back.at(name);
    CHECK(w.dtype() == v.dtype());
    CHECK(w.shape() == v.shape());
  }
  CHECK(back.at("f32").to_vector<float>() == state.at("f32").to_vector<float>());
  CHECK(std::signbit(back.at("f32").to_vector<float>()[1]));  // -0.0 kept bit for bit
  CHECK(back.at("f64").to_vector<double>() == state.at("f64").to_vector<double>());
  CHECK(back.at("i32").to_vector<int32_t>() == state.at("i32").to_vector<int32_t>());
  CHECK(back.at("i64").to_vector<int64_t>() == state.at("i64").to_vector<int64_t>());
  CHECK(back.at("bool").to_vector<bool>() == std::vector<bool>{true, false, false, true, true});
  CHECK(back.at("scalar").item<double>() == 2.5);
  CHECK(back.at("empty").numel() == 0);
  CHECK(back.at("lazy").to_vector<int32_t>() == std::vector<int32_t>{0, 3, 6, 9});
  // The 8- and 16-bit dtypes keep their bits (a NaN's payload included).
  auto bits = [](const auto& halves) {
    std::vector<uint16_t> b;
    for (const auto& h : halves) b.push_back(h.bits);
    return b;
  };
  CHECK(bits(back.at("f16").to_vector<float16>()) == bits(state.at("f16").to_vector<float16>()));
  CHECK(bits(back.at("bf16").to_vector<bfloat16>()) ==
        bits(state.at("bf16").to_vector<bfloat16>()));
  CHECK(back.at("i8").to_vector<int8_t>() == std::vector<int8_t>{-128, 127});
  CHECK(back.at("u8").to_vector<uint8_t>() == std::vector<uint8_t>{0, 255, 7});
  CHECK(back.at("i16").to_vector<int16_t>() == std::vector<int16_t>{-32768, 32767});
  // Loaded Vars are ordinary values: ops on them work.
  CHECK((back.at("i64") + back.at("i64")).to_vector<int64_t>()[1] == 2);
}

TEST_CASE("safetensors metadata round trip, and an empty state dict") {
  TempDir dir;
  const std::string path = (dir.path() / "m.safetensors").string();
  const std::map<std::string, std::string> meta{{"format", "pt"},
                                                {"quote\"back\\slash", "line\nbreak\ttab\x01"},
                                                {"utf8", "\xc3\xa9t\xc3\xa9"}};
  save_safetensors(path, {{"x", array<float>({1.f}, {1})}}, meta);
  std::map<std::string, std::string> got;
  load_safetensors(path, &got);
  CHECK(got == meta);

  save_safetensors(path, {});  // Python writes b'\x08\0..{}      ' for save({})
  CHECK(read_file(path) == le64(8) + "{}      ");
  CHECK(load_safetensors(path).empty());
}

TEST_CASE("safetensors: the bytes written are Python's (order by dtype then name, padding)") {
  TempDir dir;
  const std::string path = (dir.path() / "exact.safetensors").string();
  save_safetensors(path,
                   {{"m", array<bool>({true, false}, {2})},
                    {"b", array<int32_t>({1, 2}, {2})},
                    {"a", array<float>({1.5f}, {1})},
                    {"c", array<double>({2.5}, {})},
                    {"i", array<int64_t>({1, -2}, {2})}},
                   {{"k", "v"}});
  // What Python's safetensors.numpy.save (0.8) writes for the same arrays and metadata
  // (checked against it by tests/safetensors_python_check.py): I64 first (its Dtype enum
  // order, descending), then F64, F32, I32, BOOL; 300 bytes of JSON padded with 4 spaces.
  const std::string header =
      "{\"__metadata__\":{\"k\":\"v\"}," + entry("i", "I64", "[2]", "[0,16]") + "," +
      entry("c", "F64", "[]", "[16,24]") + "," + entry("a", "F32", "[1]", "[24,28]") + "," +
      entry("b", "I32", "[2]", "[28,36]") + "," + entry("m", "BOOL", "[2]", "[36,38]") + "}";
  REQUIRE(header.size() == 300);
  const std::string data = bytes_of<int64_t>({1, -2}) + bytes_of<double>({2.5}) +
                           bytes_of<float>({1.5f}) + bytes_of<int32_t>({1, 2}) +
                           std::string("\x01\x00", 2);
  CHECK(read_file(path) == le64(304) + header + "    " + data);
}

TEST_CASE("safetensors: a failing save leaves the old file, and no temporary file") {
  TempDir dir;
  const std::string path = (dir.path() / "keep.safetensors").string();
  save_safetensors(path, {{"w", array<float>({1.f, 2.f}, {2})}});
  const std::string before = read_file(path);
  CHECK(entries_of(dir.path()) == std::vector<std::string>{"keep.safetensors"});
  // The mode open(..., 0666) would give, not mkstemp's 0600 (this test runs single-threaded, so
  // reading the umask by setting it is safe here).
  const mode_t mask = ::umask(0);
  ::umask(mask);
  CHECK((fs::status(path).permissions() & fs::perms::all) == fs::perms(0666 & ~mask));

  std::string what = message_of<Error>([&] {
    save_safetensors(path, {{"ok", ones({2})}, {"missing", Var()}});
  });
  CHECK_THAT(what, Contains("save_safetensors") && Contains(path) && Contains("\"missing\"") &&
                       Contains("undefined"));
  what = message_of<Error>([&] { save_safetensors(path, {{"__metadata__", ones({2})}}); });
  CHECK_THAT(what, Contains("__metadata__"));
  what = message_of<Error>([&] {
    save_safetensors(path, {{"w", ones({2})}}, {{"bad", std::string("\xff\xfe")}});
  });
  CHECK_THAT(what, Contains("UTF-8"));
  CHECK(read_file(path) == before);

  // A failure after the temporary file is written: the rename onto a non-empty directory.
  const fs::path taken = dir.path() / "taken";
  fs::create_directories(taken / "inside");
  what = message_of<Error>([&] { save_safetensors(taken.string(), {{"w", ones({2})}}); });
  CHECK_THAT(what, Contains("save_safetensors") && Contains("rename"));
  CHECK(fs::is_directory(taken / "inside"));
  CHECK(entries_of(dir.path()).size() == 2);  // keep.safetensors and taken: no temporary left
  CHECK(read_file(path) == before);

  // A successful save replaces the file whole.
  save_safetensors(path, {{"v", array<int32_t>({7}, {1})}});
  CHECK(load_safetensors(path).at("v").to_vector<int32_t>() == std::vector<int32_t>{7});
  CHECK(entries_of(dir.path()).size() == 2);
}

TEST_CASE("safetensors rejects: truncated files and header lengths") {
  TempDir dir;
  CHECK_THAT(load_error<Error>(dir, "abc"), Contains("8-byte header length"));
  CHECK_THAT(load_error<Error>(dir, le64(100) + "{}"), Contains("runs past the end"));
  CHECK_THAT(load_error<Error>(dir, le64(100'000'001) + "{}"), Contains("over the limit"));
  CHECK_THAT(load_error<Error>(dir, le64(UINT64_MAX) + "{}"), Contains("over the limit"));
  const std::string missing = (dir.path() / "nope.safetensors").string();
  CHECK_THAT(message_of<Error>([&] { load_safetensors(missing); }),
             Contains("load_safetensors: " + missing) && Contains("cannot open"));
  CHECK_THAT(message_of<Error>([&] { load_safetensors(dir.path().string()); }),
             Contains("not a regular file"));
}

TEST_CASE("safetensors rejects: headers that are not JSON objects, or nest too deep") {
  TempDir dir;
  CHECK_THAT(load_error<Error>(dir, image("{\"a\":", "")), Contains("not valid JSON"));
  CHECK_THAT(load_error<Error>(dir, image("[1,2]", "")), Contains("does not start with '{'"));
  CHECK_THAT(load_error<Error>(dir, image(" {}", "")), Contains("does not start with '{'"));
  CHECK_THAT(load_error<Error>(dir, image("{\"a\":5}", "")),
             Contains("tensor \"a\"") && Contains("must be an object"));
  CHECK_THAT(load_error<Error>(dir, image("{\"\xff\":{}}", "")), Contains("not valid JSON"));
  // Half a million levels: refused while parsing, without recursing (ASan would catch that).
  const size_t deep = 500'000;
  CHECK_THAT(
      load_error<Error>(dir, image("{\"a\":{\"dtype\":\"F32\",\"shape\":" + std::string(deep, '[') +
                                       std::string(deep, ']') + ",\"data_offsets\":[0,0]}}",
                                   "")),
      Contains("nests deeper than 3 levels"));
}

TEST_CASE("safetensors rejects: dtypes metajit does not have, and unknown ones") {
  TempDir dir;
  for (const char* code : {"U16", "U32", "U64", "F8_E4M3"}) {
    INFO(code);
    CHECK_THAT(
        load_error<DTypeError>(dir, image("{" + entry("h", code, "[1]", "[0,2]") + "}", "..")),
        Contains("tensor \"h\"") && Contains(std::string("dtype ") + code) &&
            Contains("does not have that dtype yet") &&
            Contains("F32, F64, F16, BF16, I32, I64, I16, I8, U8 and BOOL"));
  }
  CHECK_THAT(
      load_error<DTypeError>(dir, image("{" + entry("t", "f32", "[1]", "[0,4]") + "}", "....")),
      Contains("tensor \"t\"") && Contains("unknown dtype \"f32\""));
  CHECK_THAT(load_error<DTypeError>(
                 dir, image("{\"t\":{\"dtype\":7,\"shape\":[],\"data_offsets\":[0,4]}}", "....")),
             Contains("tensor \"t\"") && Contains("not a string"));
}

TEST_CASE("safetensors rejects: shapes that are not lists of non-negative integers, or overflow") {
  TempDir dir;
  for (const char* shape : {"3", "[-1]", "[1.5]", "[\"2\"]", "[null]", "{}"}) {
    INFO(shape);
    const std::string what =
        load_error<ShapeError>(dir, image("{" + entry("s", "F32", shape, "[0,4]") + "}", "...."));
    CHECK_THAT(what, Contains("tensor \"s\"") && Contains("non-negative integers"));
  }
  CHECK_THAT(load_error<ShapeError>(
                 dir, image("{" + entry("s", "F32", "[4611686018427387904,4]", "[0,0]") + "}", "")),
             Contains("tensor \"s\"") && Contains("more bytes than fit in int64"));
  CHECK_THAT(load_error<ShapeError>(
                 dir, image("{" + entry("s", "I64", "[18446744073709551615]", "[0,0]") + "}", "")),
             Contains("more bytes than fit in int64"));
  // A zero dimension makes the others harmless: no elements, no bytes.
  TempDir ok;
  write_file(ok.path() / "z",
             image("{" + entry("z", "F64", "[0,18446744073709551615]", "[0,0]") + "}", ""));
  CHECK(load_safetensors((ok.path() / "z").string()).at("z").numel() == 0);
}

TEST_CASE("safetensors rejects: data_offsets that are not [begin, end] inside the data") {
  TempDir dir;
  for (const char* offsets : {"[0]", "[0,4,8]", "[-1,3]", "[0,4.0]", "5", "[\"0\",\"4\"]"}) {
    INFO(offsets);
    CHECK_THAT(load_error<Error>(dir, image("{" + entry("o", "F32", "[1]", offsets) + "}", "....")),
               Contains("tensor \"o\"") && Contains("[begin, end]"));
  }
  CHECK_THAT(load_error<Error>(dir, image("{" + entry("o", "F32", "[1]", "[4,0]") + "}", "....")),
             Contains("tensor \"o\"") && Contains("begin <= end <= 4"));
  CHECK_THAT(load_error<Error>(dir, image("{" + entry("o", "F32", "[1]", "[0,8]") + "}", "....")),
             Contains("tensor \"o\"") && Contains("not within the data buffer"));
  CHECK_THAT(load_error<Error>(dir, image("{" + entry("o", "F32", "[2]", "[0,4]") + "}", "....")),
             Contains("tensor \"o\"") && Contains("span 4 bytes") && Contains("is 8 bytes"));
  CHECK_THAT(load_error<Error>(dir, image("{\"o\":{\"dtype\":\"F32\",\"shape\":[1]}}", "....")),
             Contains("tensor \"o\"") && Contains("no \"data_offsets\""));
}

TEST_CASE("safetensors rejects: overlaps, holes and bytes no tensor covers") {
  TempDir dir;
  const std::string data(12, '\0');
  CHECK_THAT(load_error<Error>(dir, image("{" + entry("a", "F32", "[2]", "[0,8]") + "," +
                                              entry("b", "F32", "[2]", "[4,12]") + "}",
                                          data)),
             Contains("tensor \"b\"") && Contains("overlap tensor \"a\""));
  CHECK_THAT(load_error<Error>(dir, image("{" + entry("a", "F32", "[1]", "[0,4]") + "," +
                                              entry("b", "F32", "[1]", "[8,12]") + "}",
                                          data)),
             Contains("tensor \"b\"") && Contains("hole"));
  CHECK_THAT(load_error<Error>(dir, image("{" + entry("a", "F32", "[1]", "[0,4]") + "}", data)),
             Contains("12 bytes but its tensors cover 4"));
  // The same tensor twice: nlohmann's parser would keep one silently.
  CHECK_THAT(load_error<Error>(dir, image("{" + entry("a", "F32", "[1]", "[0,4]") + "," +
                                              entry("a", "F32", "[1]", "[0,4]") + "}",
                                          "....")),
             Contains("tensor name \"a\" appears twice"));
  CHECK_THAT(
      load_error<Error>(
          dir,
          image(
              "{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[0,4]}}",
              "....")),
      Contains("key \"dtype\" appears twice"));
}

TEST_CASE("safetensors rejects: metadata that is not strings, and BOOL bytes other than 0 and 1") {
  TempDir dir;
  CHECK_THAT(load_error<Error>(dir, image("{\"__metadata__\":{\"n\":1}}", "")),
             Contains("\"__metadata__\" value of \"n\" is not a string"));
  CHECK_THAT(load_error<Error>(dir, image("{\"__metadata__\":[\"x\"]}", "")),
             Contains("must be an object of strings"));
  CHECK_THAT(load_error<Error>(dir, image("{" + entry("flags", "BOOL", "[3]", "[0,3]") + "}",
                                          std::string("\x01\x00\x02", 3))),
             Contains("tensor \"flags\"") && Contains("element 2 is the byte 2") &&
                 Contains("must be 0 or 1"));
}
