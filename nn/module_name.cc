// module_name (nn/module_name.h): the dynamic type's demangled name, namespaces dropped.
#include "nn/module_name.h"

#include <cxxabi.h>

#include <cstdlib>
#include <memory>
#include <typeinfo>

namespace metajit::nn {

std::string module_name(const Module& m) {
  const char* mangled = typeid(m).name();
  int status = 0;
  std::unique_ptr<char, decltype(&std::free)> demangled(
      abi::__cxa_demangle(mangled, nullptr, nullptr, &status), &std::free);
  std::string name = status == 0 && demangled ? demangled.get() : mangled;
  // "metajit::nn::Linear" -> "Linear"; a template's arguments keep theirs ("Net<2>").
  const size_t args = name.find('<');
  const size_t last = name.rfind("::", args);
  return last == std::string::npos ? name : name.substr(last + 2);
}

}  // namespace metajit::nn
