// nn::Sequential (include/metajit/nn.h): the out-of-line parts; push_back is a template in the
// header, since it needs each child's type to call it.
#include <metajit/error.h>
#include <metajit/nn.h>

#include <string>

namespace metajit::nn {

Var Sequential::operator()(const Var& x) const {
  Var y = x;
  for (const auto& step : steps_) y = step(y);
  return y;
}

std::shared_ptr<Module> Sequential::operator[](size_t i) const {
  if (i >= steps_.size())
    throw Error("Sequential: index " + std::to_string(i) + " out of range for " +
                std::to_string(steps_.size()) + " children");
  return named_children()[i].second;
}

}  // namespace metajit::nn
