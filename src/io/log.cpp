#include "rsfc/io/log.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <mutex>

namespace rsfc::log {

namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
std::mutex g_write_mutex;  // keeps lines whole even when stderr is a regular file
constexpr size_t kMaxLine = 2048;

void vlog(LogLevel l, const char* fmt, va_list ap) {
  if (!enabled(l)) return;
  char msg[kMaxLine];
  const int n = std::vsnprintf(msg, sizeof(msg), fmt, ap);
  if (n < 0) return;
  write(l, std::string_view(msg, std::min(static_cast<size_t>(n), sizeof(msg) - 1)));
}
}  // namespace

void set_level(LogLevel l) {
  g_level.store(static_cast<int>(l), std::memory_order_relaxed);
}
LogLevel level() {
  return static_cast<LogLevel>(g_level.load(std::memory_order_relaxed));
}

size_t format_line(char* out, size_t cap, long long unix_ns, LogLevel l, std::string_view msg) {
  if (cap < 64) return 0;
  const time_t secs = static_cast<time_t>(unix_ns / 1'000'000'000);
  const long ms = static_cast<long>((unix_ns / 1'000'000) % 1000);
  tm t{};
  gmtime_r(&secs, &t);
  int n = std::snprintf(out, cap, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %s: ", t.tm_year + 1900,
                        t.tm_mon + 1, t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec, ms, to_string(l));
  size_t len = n < 0 ? 0 : std::min(static_cast<size_t>(n), cap - 1);
  while (!msg.empty() && (msg.back() == '\n' || msg.back() == '\r')) msg.remove_suffix(1);
  for (char c : msg) {
    if (len + 2 > cap) break;  // keep room for '\n'
    out[len++] = (c == '\n' || c == '\r') ? ' ' : c;
  }
  out[len++] = '\n';
  return len;
}

void write(LogLevel l, std::string_view msg) {
  if (!enabled(l)) return;
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  char line[kMaxLine + 64];
  const size_t len = format_line(
      line, sizeof(line), static_cast<long long>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec, l, msg);
  std::lock_guard lock(g_write_mutex);
  size_t off = 0;
  while (off < len) {
    const ssize_t w = ::write(STDERR_FILENO, line + off, len - off);
    if (w < 0) {
      if (errno == EINTR) continue;
      return;
    }
    off += static_cast<size_t>(w);
  }
}

#define RSFC_LOG_FN(name, lvl)      \
  void name(const char* fmt, ...) { \
    va_list ap;                     \
    va_start(ap, fmt);              \
    vlog(lvl, fmt, ap);             \
    va_end(ap);                     \
  }
RSFC_LOG_FN(debug, LogLevel::kDebug)
RSFC_LOG_FN(info, LogLevel::kInfo)
RSFC_LOG_FN(warn, LogLevel::kWarn)
RSFC_LOG_FN(error, LogLevel::kError)
#undef RSFC_LOG_FN

}  // namespace rsfc::log
