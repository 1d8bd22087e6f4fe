// load_safetensors and save_safetensors (include/metajit/nn.h): the file I/O around the format
// checks of nn/safetensors_format.cc.
//
// Loading copies: each tensor's bytes are read (pread) straight into a new 64-byte aligned
// buffer from the allocator, one copy and no intermediate vector. Mapping the file instead
// (zero-copy) is not done, for three reasons: base/buffer.h's Buffer always returns its memory
// to the allocator's free lists, so it would need an owner/release path of its own; the kernels
// assume 64-byte aligned buffers, and the files Python writes align tensors to 8 bytes only, so
// few tensors would qualify; and a mapped file that another process truncates turns a later
// read of the tensor into SIGBUS, a crash on untrusted input, where pread gives an Error now.
#include <fcntl.h>
#include <metajit/error.h>
#include <metajit/eval.h>
#include <metajit/nn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "base/buffer.h"
#include "meta_ops/node.h"
#include "nn/safetensors_format.h"
#include "runtime/residency.h"

namespace metajit {

// The format is little-endian; the Vars' bytes are the host's. Copying them as they are is
// right only on a little-endian host, the only kind metajit builds for.
static_assert(std::endian::native == std::endian::little,
              "safetensors I/O copies bytes as they are: it needs a little-endian host");

namespace {

std::string sys_error(const std::string& op, const std::string& path, const std::string& what) {
  return op + ": " + path + ": " + what + ": " + std::strerror(errno);
}

// A file descriptor closed at the end of the scope.
struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
};

// Reads exactly `n` bytes at `offset`; Error when the file ends first (it shrank while read).
void pread_all(int fd, void* dst, uint64_t n, uint64_t offset, const std::string& path) {
  auto* p = static_cast<char*>(dst);
  while (n > 0) {
    const ssize_t got = ::pread(fd, p, size_t(std::min<uint64_t>(n, 1u << 30)), off_t(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw Error(sys_error("load_safetensors", path, "read failed"));
    if (got == 0)
      throw Error("load_safetensors: " + path +
                  ": the file ended early (was it changed while "
                  "being read?)");
    p += got;
    n -= uint64_t(got);
    offset += uint64_t(got);
  }
}

// A Var holding tensor `e`'s bytes, read from the data buffer at `data_start`.
Var read_tensor(int fd, const safetensors::TensorEntry& e, uint64_t data_start,
                const std::string& path) {
  BufferPtr buf = allocate_buffer(size_t(e.bytes()));
  pread_all(fd, buf->data(), e.bytes(), data_start + e.begin, path);
  if (e.dtype == DType::Bool) {  // metajit's bools are bytes holding 0 or 1, nothing else
    const auto* b = static_cast<const unsigned char*>(buf->data());
    for (uint64_t i = 0; i < e.bytes(); ++i)
      if (b[i] > 1)
        throw Error("load_safetensors: " + path + ": tensor " + safetensors::quoted_name(e.name) +
                    ": BOOL element " + std::to_string(i) + " is the byte " + std::to_string(b[i]) +
                    "; a BOOL byte must be 0 or 1");
  }
  NodePtr node = new_node(OpKind::Leaf, e.dtype, e.shape);
  node->data = std::move(buf);
  return Var(std::move(node));
}

}  // namespace

nn::StateDict load_safetensors(const std::string& path,
                               std::map<std::string, std::string>* metadata) {
  Fd f(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (f.fd < 0) throw Error(sys_error("load_safetensors", path, "cannot open"));
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) throw Error(sys_error("load_safetensors", path, "cannot stat"));
  if (!S_ISREG(st.st_mode)) throw Error("load_safetensors: " + path + ": not a regular file");
  const uint64_t size = uint64_t(st.st_size);
  unsigned char prefix[8] = {};
  pread_all(f.fd, prefix, std::min<uint64_t>(8, size), 0, path);
  const uint64_t n = safetensors::header_length(prefix, size, path);
  std::string text(size_t(n), '\0');
  pread_all(f.fd, text.data(), n, 8, path);
  // Every check is made before the first tensor is allocated.
  safetensors::Header header = safetensors::parse_header(text, size - 8 - n, path);
  nn::StateDict out;
  for (const safetensors::TensorEntry& e : header.tensors)
    out.emplace(e.name, read_tensor(f.fd, e, 8 + n, path));
  if (metadata) *metadata = std::move(header.metadata);
  return out;
}

namespace {

// The mode a new file gets from open(..., 0666): what the process's umask leaves. Read from
// /proc rather than umask(), which would change it for every thread while it is read.
mode_t new_file_mode() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("Umask:", 0) == 0) return 0666 & ~mode_t(std::stoul(line.substr(6), nullptr, 8));
  return 0644;
}

void write_all(int fd, const void* src, uint64_t n, const std::string& tmp) {
  const auto* p = static_cast<const char*>(src);
  while (n > 0) {
    const ssize_t put = ::write(fd, p, size_t(std::min<uint64_t>(n, 1u << 30)));
    if (put < 0 && errno == EINTR) continue;
    if (put < 0) throw Error(sys_error("save_safetensors", tmp, "write failed"));
    p += put;
    n -= uint64_t(put);
  }
}

// Writes the file at `tmp` (already created as `fd`), flushed to disk.
void write_file(int fd, const safetensors::Layout& layout, const std::vector<BufferPtr>& data,
                const std::string& tmp, mode_t mode) {
  write_all(fd, layout.prefix.data(), layout.prefix.size(), tmp);
  for (size_t i = 0; i < data.size(); ++i)
    write_all(fd, data[i]->data(), layout.tensors[i].bytes(), tmp);
  if (::fchmod(fd, mode) != 0) throw Error(sys_error("save_safetensors", tmp, "chmod failed"));
  if (::fsync(fd) != 0) throw Error(sys_error("save_safetensors", tmp, "fsync failed"));
}

// Writes beside `path` and renames over it: a reader sees the old file or the new one, and a
// failure (the disk full, a rename onto a directory) leaves `path` as it was.
void write_atomically(const std::string& path, const safetensors::Layout& layout,
                      const std::vector<BufferPtr>& data) {
  const std::filesystem::path target(path);
  const std::filesystem::path dir = target.has_parent_path() ? target.parent_path() : ".";
  std::string tmp = (dir / ("." + target.filename().string() + ".tmp-XXXXXX")).string();
  Fd f(::mkstemp(tmp.data()));
  if (f.fd < 0) throw Error(sys_error("save_safetensors", path, "cannot create a file beside it"));
  try {
    write_file(f.fd, layout, data, tmp, new_file_mode());
    if (::close(f.fd) != 0) {
      f.fd = -1;
      throw Error(sys_error("save_safetensors", tmp, "close failed"));
    }
    f.fd = -1;
    if (::rename(tmp.c_str(), path.c_str()) != 0)
      throw Error(sys_error("save_safetensors", path, "cannot rename " + tmp + " to it"));
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  // The rename itself reaches the disk with the directory (best effort: some filesystems
  // cannot fsync a directory, and the file is complete either way).
  Fd d(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (d.fd >= 0) ::fsync(d.fd);
}

}  // namespace

void save_safetensors(const std::string& path, const nn::StateDict& tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::vector<safetensors::TensorEntry> entries;
  std::vector<Var> vars;
  for (const auto& [name, v] : tensors) {
    if (!v.defined())
      throw Error("save_safetensors: " + path + ": tensor \"" + name +
                  "\" is an undefined Var "
                  "(default-constructed); every value in the map must be defined");
    entries.push_back({name, v.dtype(), v.shape()});
    vars.push_back(v);
  }
  // Checked before anything is computed or written.
  safetensors::Layout layout = safetensors::plan_layout(std::move(entries), metadata, path);
  eval(vars);                   // one evaluation for all the lazy ones
  std::vector<BufferPtr> data;  // in the layout's order, held while written
  for (const safetensors::TensorEntry& e : layout.tensors)
    data.push_back(buffer_on(*tensors.at(e.name).node(), Device::CPU));
  write_atomically(path, layout, data);
}

}  // namespace metajit
