// The parameterless layers (include/metajit/nn.h): Dropout, whose behaviour follows the
// module's mode, and the activations ReLU, GELU, Tanh and Sigmoid, for Sequential.
#include <metajit/composite.h>
#include <metajit/error.h>
#include <metajit/nn.h>

#include <string>

namespace metajit::nn {

Dropout::Dropout(double p) : p_(p) {
  if (!(p >= 0 && p <= 1))
    throw Error("Dropout(p = " + std::to_string(p) + "): p is a probability, 0 <= p <= 1");
}

Var Dropout::operator()(const Var& x) const {
  return dropout(x, p_, training());
}

Var ReLU::operator()(const Var& x) const {
  return relu(x);
}

Var GELU::operator()(const Var& x) const {
  return gelu(x, tanh_approx_);
}

Var Tanh::operator()(const Var& x) const {
  return tanh(x);
}

Var Sigmoid::operator()(const Var& x) const {
  return sigmoid(x);
}

}  // namespace metajit::nn
