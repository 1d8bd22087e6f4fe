// libFuzzer target: safetensors files, untrusted input (nn/safetensors_format.h). Any bytes give
// tensors or a metajit::Error, never a crash, a hang or a read outside the file, and:
//   - the loader (load_safetensors, on the bytes written to a file) agrees with the format
//     parser on the same bytes: the same tensors, or an Error; it may refuse what the parser
//     accepts only for a BOOL byte other than 0 or 1, which only the data shows;
//   - what the parser accepts, laid out again as save_safetensors would write it, parses back
//     to the same names, dtypes, shapes and metadata.
#include <metajit/error.h>
#include <metajit/nn.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "nn/safetensors_format.h"

using namespace metajit;
namespace st = metajit::safetensors;

namespace {

const std::string& scratch_file() {
  static const std::string path =
      (std::filesystem::temp_directory_path() /
       ("metajit-fuzz-safetensors-" + std::to_string(::getpid()) + ".safetensors"))
          .string();
  return path;
}

bool same_entries(const st::Header& a, const st::Header& b) {
  if (a.tensors.size() != b.tensors.size() || a.metadata != b.metadata) return false;
  std::map<std::string, const st::TensorEntry*> by_name;
  for (const st::TensorEntry& e : a.tensors) by_name[e.name] = &e;
  for (const st::TensorEntry& e : b.tensors) {
    auto it = by_name.find(e.name);
    if (it == by_name.end() || it->second->dtype != e.dtype || it->second->shape != e.shape)
      return false;
  }
  return true;
}

void check_loader_agrees(std::string_view image, const std::optional<st::Header>& parsed) {
  std::ofstream(scratch_file(), std::ios::binary | std::ios::trunc)
      .write(image.data(), std::streamsize(image.size()));
  try {
    const nn::StateDict loaded = load_safetensors(scratch_file());
    if (!parsed || loaded.size() != parsed->tensors.size()) std::abort();
    for (const st::TensorEntry& e : parsed->tensors) {
      const Var& v = loaded.at(e.name);
      if (v.dtype() != e.dtype || v.shape() != e.shape) std::abort();
    }
  } catch (const Error& err) {
    if (parsed && std::string(err.what()).find("must be 0 or 1") == std::string::npos) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view image(reinterpret_cast<const char*>(data), size);
  std::optional<st::Header> parsed;
  try {
    parsed = st::parse_image(image, "fuzz.safetensors");
  } catch (const Error&) {
  }
  check_loader_agrees(image, parsed);
  if (parsed) {
    const st::Layout layout =
        st::plan_layout(parsed->tensors, parsed->metadata, "fuzz.safetensors");
    const std::string again = layout.prefix + std::string(size_t(layout.data_bytes), '\0');
    if (!same_entries(*parsed, st::parse_image(again, "fuzz-again.safetensors"))) std::abort();
  }
  return 0;
}
