// How errors name a module: its class without namespaces ("Linear", "MyNet"), as torch's
// messages do ("Error(s) in loading state_dict for Linear").
#pragma once
#include <metajit/nn.h>

#include <string>

namespace metajit::nn {

std::string module_name(const Module& m);

}  // namespace metajit::nn
