#include "cache/untrusted_json.h"

#include <nlohmann/json.hpp>

namespace metajit {

nlohmann::json parse_untrusted_json(std::string_view text) {
  bool too_deep = false;
  // Values below the limit are dropped as they are parsed (the callback's false), so a deep
  // document never exists as a tree at all.
  nlohmann::json::parser_callback_t bound = [&too_deep](int depth, nlohmann::json::parse_event_t,
                                                        nlohmann::json&) {
    if (depth > kMaxJsonDepth) too_deep = true;
    return !too_deep;
  };
  nlohmann::json j = nlohmann::json::parse(text, bound, /*allow_exceptions=*/false);
  if (too_deep) return nlohmann::json(nlohmann::json::value_t::discarded);
  return j;
}

}  // namespace metajit
