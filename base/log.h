// Diagnostics on stderr, filtered by METAJIT_LOG (quiet|warn|info|debug).
#pragma once
#include <string>

#include "base/config.h"

namespace metajit {

bool log_enabled(LogLevel level);
void log_message(LogLevel level, const std::string& message);  // "metajit: <message>\n"
// Logs a warning at most once per process for each distinct `key`.
void warn_once(const std::string& key, const std::string& message);

}  // namespace metajit
