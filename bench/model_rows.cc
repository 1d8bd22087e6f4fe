// The language-model rows' shared pieces (bench/model_rows.h).
#include "bench/model_rows.h"

#include <cstdint>
#include <utility>

namespace bench {

std::vector<double> logits_probe(const metajit::Var& logits) {
  const int64_t b_n = logits.shape()[0], t_n = logits.shape()[1], v = logits.shape()[2];
  const std::vector<float> all = logits.to_vector<float>();
  std::vector<double> out;
  for (auto [b, t] : {std::pair<int64_t, int64_t>{0, 0}, {0, t_n - 1}, {b_n - 1, t_n / 2}})
    for (int64_t c = 0; c < v; ++c) out.push_back(all[size_t((b * t_n + t) * v + c)]);
  return out;
}

Row metajit_row(const std::string& workload, const Timing& t) {
  Row r;
  r.workload = workload;
  r.impl = "metajit";
  r.reps = t.reps;
  if (t.ok())
    r.seconds = t.median_s;
  else
    r.note = t.error.empty() ? "not measured" : t.error;
  return r;
}

}  // namespace bench
