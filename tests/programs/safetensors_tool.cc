// Helper of tests/safetensors_python_check.py: metajit's side of the Python interop check.
//   safetensors_tool read FILE         prints the file's tensors and metadata as JSON
//                                      {"tensors": {name: {dtype, shape, values}}, "metadata": {}}
//   safetensors_tool write SPEC FILE   saves the tensors SPEC (the same JSON) describes
// Values travel as JSON numbers: float32 values widen to double exactly and back, and doubles
// are printed with enough digits to read back the same bits.
#include <metajit/metajit.h>

#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "nn/safetensors_format.h"  // dtype_code: the file format's names

using namespace metajit;
using json = nlohmann::json;

namespace {

template <class H>
std::vector<float> halves_as_floats(const std::vector<H>& halves) {
  std::vector<float> out;
  for (const H& h : halves) out.push_back(float(h));
  return out;
}

template <class H>
Var halves_of(const json& vals, const Shape& shape) {
  std::vector<H> out;
  for (float f : vals.get<std::vector<float>>()) out.push_back(H(f));
  return array<H>(out, shape);
}

json values_of(const Var& v) {
  switch (v.dtype()) {
    case DType::Float32:
      return v.to_vector<float>();
    case DType::Float64:
      return v.to_vector<double>();
    case DType::Int32:
      return v.to_vector<int32_t>();
    case DType::Int64:
      return v.to_vector<int64_t>();
    case DType::Bool:
      return v.to_vector<bool>();
    case DType::Int8:
      return v.to_vector<int8_t>();
    case DType::UInt8:
      return v.to_vector<uint8_t>();
    case DType::Int16:
      return v.to_vector<int16_t>();
    case DType::Float16:  // every half is a float exactly
      return halves_as_floats(v.to_vector<float16>());
    case DType::BFloat16:
      return halves_as_floats(v.to_vector<bfloat16>());
  }
  return nullptr;
}

Var var_of(const json& t) {
  const std::string code = t.at("dtype");
  const Shape shape = t.at("shape").get<Shape>();
  const json& vals = t.at("values");
  if (code == "F32") return array<float>(vals.get<std::vector<float>>(), shape);
  if (code == "F64") return array<double>(vals.get<std::vector<double>>(), shape);
  if (code == "I32") return array<int32_t>(vals.get<std::vector<int32_t>>(), shape);
  if (code == "I64") return array<int64_t>(vals.get<std::vector<int64_t>>(), shape);
  if (code == "BOOL") return array<bool>(vals.get<std::vector<bool>>(), shape);
  if (code == "I8") return array<int8_t>(vals.get<std::vector<int8_t>>(), shape);
  if (code == "U8") return array<uint8_t>(vals.get<std::vector<uint8_t>>(), shape);
  if (code == "I16") return array<int16_t>(vals.get<std::vector<int16_t>>(), shape);
  if (code == "F16") return halves_of<float16>(vals, shape);
  if (code == "BF16") return halves_of<bfloat16>(vals, shape);
  throw std::runtime_error("safetensors_tool: unknown dtype " + code);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string cmd = argc > 1 ? argv[1] : "";
  try {
    if (cmd == "read" && argc == 3) {
      std::map<std::string, std::string> meta;
      json out{{"tensors", json::object()}, {"metadata", json::object()}};
      for (const auto& [name, v] : load_safetensors(argv[2], &meta))
        out["tensors"][name] = {{"dtype", safetensors::dtype_code(v.dtype())},
                                {"shape", v.shape()},
                                {"values", values_of(v)}};
      for (const auto& [k, v] : meta) out["metadata"][k] = v;
      std::cout << out.dump() << "\n";
      return 0;
    }
    if (cmd == "write" && argc == 4) {
      std::ifstream in(argv[2]);
      const json spec = json::parse(in);
      nn::StateDict state;
      for (const auto& [name, t] : spec.at("tensors").items()) state[name] = var_of(t);
      save_safetensors(argv[3], state,
                       spec.at("metadata").get<std::map<std::string, std::string>>());
      return 0;
    }
  } catch (const std::exception& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
  std::cerr << "usage: safetensors_tool read FILE | write SPEC FILE\n";
  return 2;
}
