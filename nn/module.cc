// nn::Module (include/metajit/nn.h): registering parameters, buffers and children, listing them
// under dotted names in torch's order, and the train/eval mode. state_dict and load_state_dict
// are in nn/state_dict.cc.
#include <metajit/error.h>
#include <metajit/nn.h>

#include <algorithm>
#include <string>

#include "nn/module_name.h"

namespace metajit::nn {

Module::Module() : training_(std::make_shared<detail::TraceSwitch>(true)) {}

Module::~Module() = default;

void Module::check_new_name(const std::string& name, const char* what) const {
  const std::string where = module_name(*this) + "::register_" + what + ": ";
  if (name.empty()) throw Error(where + "the name is empty");
  if (name.find('.') != std::string::npos)
    throw Error(where + "the name \"" + name +
                "\" contains '.', which separates the names of "
                "nested modules; use another character");
  auto taken = [&](const auto& list) {
    return std::any_of(list.begin(), list.end(), [&](const auto& e) {
      if constexpr (requires { e.name; })
        return e.name == name;
      else
        return e.first == name;
    });
  };
  if (taken(parameters_) || taken(buffers_) || taken(children_))
    throw Error(where + "the name \"" + name +
                "\" is already taken by a parameter, buffer or child module of this " +
                module_name(*this) + "; names must be unique");
}

Var& Module::register_parameter(std::string name, Var value) {
  check_new_name(name, "parameter");
  if (!value.defined())
    throw Error(module_name(*this) + "::register_parameter: \"" + name +
                "\" is an undefined Var (default-constructed)");
  if (!is_float(value.dtype()))
    throw DTypeError(module_name(*this) + "::register_parameter: \"" + name + "\" has dtype " +
                     dtype_name(value.dtype()) +
                     "; a parameter is float32 or float64 (register integer state as a buffer)");
  return parameters_.emplace_back(Entry{std::move(name), std::move(value)}).value;
}

Var& Module::register_buffer(std::string name, Var value) {
  check_new_name(name, "buffer");
  if (!value.defined())
    throw Error(module_name(*this) + "::register_buffer: \"" + name +
                "\" is an undefined Var (default-constructed)");
  return buffers_.emplace_back(Entry{std::move(name), std::move(value)}).value;
}

void Module::add_child(std::string name, std::shared_ptr<Module> m) {
  check_new_name(name, "module");
  if (!m) throw Error(module_name(*this) + "::register_module: \"" + name + "\" is null");
  if (m.get() == this)
    throw Error(module_name(*this) + "::register_module: \"" + name +
                "\" is the module itself; a module cannot be its own child");
  children_.emplace_back(std::move(name), std::move(m));
}

void Module::collect(bool buffers, const std::string& prefix,
                     std::vector<std::pair<std::string, Var>>& out,
                     std::vector<const Module*>* seen) const {
  for (const Entry& e : buffers ? buffers_ : parameters_)
    out.emplace_back(prefix + e.name, e.value);
  for (const auto& [name, child] : children_) {
    if (seen) {
      if (std::find(seen->begin(), seen->end(), child.get()) != seen->end()) continue;
      seen->push_back(child.get());
    }
    child->collect(buffers, prefix + name + ".", out, seen);
  }
}

std::vector<std::pair<std::string, Var>> Module::named_parameters() const {
  std::vector<std::pair<std::string, Var>> out;
  std::vector<const Module*> seen{this};
  collect(false, "", out, &seen);
  return out;
}

std::vector<Var> Module::parameters() const {
  std::vector<Var> out;
  for (auto& [name, v] : named_parameters()) out.push_back(std::move(v));
  return out;
}

std::vector<std::pair<std::string, Var>> Module::named_buffers() const {
  std::vector<std::pair<std::string, Var>> out;
  std::vector<const Module*> seen{this};
  collect(true, "", out, &seen);
  return out;
}

std::vector<Var> Module::buffers() const {
  std::vector<Var> out;
  for (auto& [name, v] : named_buffers()) out.push_back(std::move(v));
  return out;
}

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_children() const {
  return children_;
}

void Module::train(bool on) {
  training_->set(on);
  for (const auto& [name, child] : children_) child->train(on);
}

bool Module::training() const {
  return detail::read_switch(training_);
}

}  // namespace metajit::nn
