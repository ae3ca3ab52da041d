// Logging for the daemon: one line per message on stderr, "<UTC time> <level>: <text>",
// filtered by level, safe to call from any thread (each line is one write(2)).
#pragma once

#include <string_view>

#include "rsfc/io/config.h"

namespace rsfc::log {

void set_level(LogLevel level);
LogLevel level();
inline bool enabled(LogLevel l) {
  return static_cast<int>(l) >= static_cast<int>(level());
}

// Writes one line (newlines in `msg` become spaces). Ignores messages below the level.
void write(LogLevel l, std::string_view msg);

// printf-style helpers.
void debug(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void info(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void warn(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void error(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// Formats "<UTC time> <level>: <msg>\n" into `out` (exposed for tests). Returns the length.
size_t format_line(char* out, size_t cap, long long unix_ns, LogLevel l, std::string_view msg);

}  // namespace rsfc::log
