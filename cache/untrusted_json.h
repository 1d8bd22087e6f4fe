// JSON read from files another process, user or machine may have written (meta.json,
// manifests, statistics, remembered toolchain answers): parsed with a bound on nesting.
// nlohmann's parser itself is iterative, but copying or comparing a parsed value recurses once
// per level, so a file of "[[[[..." a few hundred kilobytes long would exhaust the stack later
// (found by ASan on the kernel-spec tests; see tests/fuzz/corpus/manifest/).
#pragma once
#include <nlohmann/json_fwd.hpp>
#include <string_view>

namespace metajit {

// Deeper than any file metajit writes: a kernel spec's index expressions nest at most
// kMaxIndexExprDepth (256) levels inside a few levels of objects.
inline constexpr int kMaxJsonDepth = 512;

// The value `text` holds, or a discarded value (is_discarded()) when it is not valid JSON or
// nests deeper than kMaxJsonDepth. Never throws for bad input.
nlohmann::json parse_untrusted_json(std::string_view text);

}  // namespace metajit
