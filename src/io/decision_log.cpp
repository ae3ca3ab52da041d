#include "rsfc/io/decision_log.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

namespace rsfc {

namespace {

void addr_text(const IpAddr& a, char* out, size_t cap) {
  if (a.family == 4) {
    inet_ntop(AF_INET, a.bytes.data(), out, static_cast<socklen_t>(cap));
  } else if (a.family == 6) {
    inet_ntop(AF_INET6, a.bytes.data(), out, static_cast<socklen_t>(cap));
  } else {
    std::snprintf(out, cap, "?");
  }
}

// JSON has no NaN/Infinity: write null for them.
void num(char* out, size_t cap, double v) {
  if (std::isfinite(v)) {
    std::snprintf(out, cap, "%.6g", v);
  } else {
    std::snprintf(out, cap, "null");
  }
}

// The names come from the engine as fixed identifiers; escape anyway so the line stays
// valid JSON whatever they contain.
void str(char* out, size_t cap, const char* s) {
  size_t n = 0;
  for (; s != nullptr && *s != '\0' && n + 7 < cap; ++s) {
    const auto c = static_cast<unsigned char>(*s);
    if (c == '"' || c == '\\') {
      out[n++] = '\\';
      out[n++] = static_cast<char>(c);
    } else if (c < 0x20) {
      n += static_cast<size_t>(std::snprintf(out + n, cap - n, "\\u%04x", c));
    } else {
      out[n++] = static_cast<char>(c);
    }
  }
  out[n] = '\0';
}

int open_append(const std::string& path) {
  return ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
}

}  // namespace

size_t format_decision_json(const DecisionRecord& r, char* out, size_t cap) {
  char sub[INET6_ADDRSTRLEN], peer[INET6_ADDRSTRLEN];
  addr_text(r.subscriber, sub, sizeof(sub));
  addr_text(r.peer, peer, sizeof(peer));
  char knob[64], state[64], tick[32], tbuff[32], rate[32], rttmin[32], rtt[32];
  str(knob, sizeof(knob), r.knob);
  str(state, sizeof(state), r.state);
  num(tick, sizeof(tick), r.tick_ms);
  num(tbuff, sizeof(tbuff), r.t_buff_ms);
  num(rate, sizeof(rate), r.rate_bps);
  num(rttmin, sizeof(rttmin), r.rtt_min_ms);
  num(rtt, sizeof(rtt), r.rtt_ms);
  const int n = std::snprintf(
      out, cap,
      "{\"time_ns\":%lld,\"subscriber\":\"%s\",\"subscriber_port\":%u,\"peer\":\"%s\","
      "\"peer_port\":%u,\"knob\":\"%s\",\"state\":\"%s\",\"tick_ms\":%s,\"t_buff_ms\":%s,"
      "\"rate_bps\":%s,\"rtt_min_ms\":%s,\"rtt_ms\":%s,\"window_bytes\":%llu,"
      "\"target_bytes\":%llu,\"timestamps\":%s,\"enforced\":%s}\n",
      static_cast<long long>(r.time), sub, unsigned{r.subscriber_port}, peer, unsigned{r.peer_port},
      knob, state, tick, tbuff, rate, rttmin, rtt, static_cast<unsigned long long>(r.window_bytes),
      static_cast<unsigned long long>(r.target_bytes), r.timestamps ? "true" : "false",
      r.enforced ? "true" : "false");
  if (n < 0 || static_cast<size_t>(n) >= cap) return 0;
  return static_cast<size_t>(n);
}

Expected<std::unique_ptr<DecisionLogFile>> DecisionLogFile::open(const std::string& path,
                                                                 size_t buffer_bytes) {
  const int fd = open_append(path);
  if (fd < 0) return Error::from_errno(errno, "decision log " + path);
  return std::unique_ptr<DecisionLogFile>(
      new DecisionLogFile(path, fd, std::max<size_t>(buffer_bytes, 4096)));
}

DecisionLogFile::DecisionLogFile(std::string path, int fd, size_t buffer_bytes)
    : path_(std::move(path)),
      fd_(fd),
      buf_(std::make_unique_for_overwrite<char[]>(buffer_bytes)),
      cap_(buffer_bytes) {}

DecisionLogFile::~DecisionLogFile() {
  (void)flush();
  if (fd_ >= 0) ::close(fd_);
}

void DecisionLogFile::on_decision(const DecisionRecord& r) {
  constexpr size_t kMaxRecord = 1024;
  if (cap_ - len_ < kMaxRecord) (void)flush();
  const size_t n = format_decision_json(r, buf_.get() + len_, cap_ - len_);
  if (n == 0) {
    ++dropped_;
    return;
  }
  len_ += n;
  ++pending_records_;
  ++records_;
}

Expected<void> DecisionLogFile::flush() {
  size_t off = 0;
  while (off < len_) {
    const ssize_t w = ::write(fd_, buf_.get() + off, len_ - off);
    if (w < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      dropped_ += pending_records_;
      len_ = pending_records_ = 0;
      return Error::from_errno(err, "decision log " + path_);
    }
    off += static_cast<size_t>(w);
  }
  len_ = pending_records_ = 0;
  return {};
}

Expected<void> DecisionLogFile::reopen() {
  auto r = flush();
  const int fd = open_append(path_);
  if (fd < 0) return Error::from_errno(errno, "decision log " + path_);
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
  return r;
}

}  // namespace rsfc
