// Where kernels go: runs one kernel, then shows its cache entry on disk and its source.
#include <metajit/metajit.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

using namespace metajit;
namespace fs = std::filesystem;

int main() {
  Var x = arange(10, DType::Float32);
  Var y = sqrt(x * x + 1.0);
  std::vector<KernelInfo> kernels = plan({y});
  eval({y});
  std::printf("y = sqrt(x*x + 1) for x = 0..9 -> %.3f ... %.3f\n", y.to_vector<float>()[0],
              y.to_vector<float>()[9]);

  const fs::path root = cache_dir();
  std::printf("cache root: %s  (METAJIT_CACHE_DIR overrides it)\n", root.c_str());
  for (const KernelInfo& k : kernels) {
    fs::path entry = cache_entry_dir(k.key);
    std::printf("\nkernel %s\nentry:    %s\n", k.key.c_str(), entry.c_str());
    if (fs::exists(entry))
      for (const auto& f : fs::directory_iterator(entry))
        std::printf("  %-12s %8llu bytes\n", f.path().filename().c_str(),
                    (unsigned long long)(f.is_regular_file() ? f.file_size() : 0));
    std::ifstream meta(entry / "meta.json");
    std::stringstream ss;
    ss << meta.rdbuf();
    std::printf("meta.json: %.300s%s\n", ss.str().c_str(), ss.str().size() > 300 ? " ..." : "");
    std::printf("source (also: metajit cache show %s):\n%s\n", k.key.substr(0, 8).c_str(),
                k.source.c_str());
  }
  return 0;
}
