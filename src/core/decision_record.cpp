#include "rsfc/core/decision_record.h"

#include <arpa/inet.h>

#include <cmath>
#include <cstdio>

namespace rsfc {

namespace {

// Appends to a caller's fixed buffer, always leaving room for a NUL; whatever does not fit
// fails the whole record.
class FixedOut {
 public:
  FixedOut(char* out, size_t cap) : out_(out), cap_(cap) {}

  void put(char c) {
    if (len_ + 1 < cap_) {
      out_[len_++] = c;
    } else {
      failed_ = true;
    }
  }
  void text(const char* s) {
    for (; *s != '\0'; ++s) put(*s);
  }
  template <typename T>
  void format(const char* fmt, T v) {
    const size_t room = cap_ - len_;  // >= 1 unless cap_ == 0
    const int n = cap_ == 0 ? -1 : std::snprintf(out_ + len_, room, fmt, v);
    if (n < 0 || static_cast<size_t>(n) >= room) {
      failed_ = true;
      return;
    }
    len_ += static_cast<size_t>(n);
  }
  size_t finish() {
    if (failed_ || cap_ == 0) return 0;
    out_[len_] = '\0';
    return len_;
  }

 private:
  char* out_;
  size_t cap_;
  size_t len_ = 0;
  bool failed_ = false;
};

// A JSON string. The names come from the engine as fixed identifiers; escaped anyway so the
// line stays valid JSON whatever they contain.
void string_value(FixedOut& o, const char* s) {
  o.put('"');
  for (; s != nullptr && *s != '\0'; ++s) {
    const auto c = static_cast<unsigned char>(*s);
    if (c == '"' || c == '\\') {
      o.put('\\');
      o.put(static_cast<char>(c));
    } else if (c < 0x20) {
      o.format("\\u%04x", unsigned{c});
    } else {
      o.put(static_cast<char>(c));
    }
  }
  o.put('"');
}

void address(FixedOut& o, const IpAddr& a) {
  char text[INET6_ADDRSTRLEN] = "?";
  if (a.family == 4 || a.family == 6) {
    inet_ntop(a.family == 4 ? AF_INET : AF_INET6, a.bytes.data(), text, sizeof(text));
  }
  string_value(o, text);
}

// JSON has no NaN/Infinity: null for them.
void number(FixedOut& o, double v, const char* fmt) {
  if (std::isfinite(v)) {
    o.format(fmt, v);
  } else {
    o.text("null");
  }
}

// A measurement that may be unknown (`known` false): null in the replay's form; the log
// writes the value as it is.
void measurement(FixedOut& o, double v, bool known, DecisionJson form) {
  if (form == DecisionJson::kLog) {
    number(o, v, "%.6g");
  } else if (known) {
    number(o, v, "%.3f");
  } else {
    o.text("null");
  }
}

}  // namespace

size_t format_decision_json(const DecisionRecord& r, char* out, size_t cap, DecisionJson form,
                            Nanos origin) {
  const bool log = form == DecisionJson::kLog;
  FixedOut o(out, cap);
  if (log) {
    o.text("{\"time_ns\":");
    o.format("%lld", static_cast<long long>(r.time));
  } else {
    o.text("{\"type\":\"decision\",\"time_s\":");
    number(o, static_cast<double>(r.time - origin) / static_cast<double>(kSecond), "%.6f");
  }
  o.text(",\"subscriber\":");
  address(o, r.subscriber);
  o.text(",\"subscriber_port\":");
  o.format("%u", unsigned{r.subscriber_port});
  o.text(",\"peer\":");
  address(o, r.peer);
  o.text(",\"peer_port\":");
  o.format("%u", unsigned{r.peer_port});
  o.text(",\"knob\":");
  string_value(o, r.knob);
  o.text(",\"state\":");
  string_value(o, r.state);
  o.text(",\"tick_ms\":");
  measurement(o, r.tick_ms, r.tick_ms > 0, form);
  o.text(",\"t_buff_ms\":");
  measurement(o, r.t_buff_ms, r.t_buff_ms >= 0, form);
  o.text(",\"rate_bps\":");
  number(o, r.rate_bps, log ? "%.6g" : "%.0f");
  o.text(",\"rtt_min_ms\":");
  measurement(o, r.rtt_min_ms, r.rtt_min_ms >= 0, form);
  o.text(",\"rtt_ms\":");
  measurement(o, r.rtt_ms, r.rtt_ms >= 0, form);
  if (r.has_threshold) {
    o.text(",\"threshold_ms\":");
    measurement(o, r.threshold_ms, r.threshold_ms > 0, form);
  }
  if (r.has_idle) {
    o.text(",\"idle_pct\":");
    measurement(o, r.idle_pct, r.idle_pct >= 0, form);
  }
  if (r.has_q_down) {
    o.text(",\"q_down_ms\":");
    measurement(o, r.q_down_ms, r.q_down_ms >= 0, form);
  }
  o.text(",\"window_bytes\":");
  o.format("%llu", static_cast<unsigned long long>(r.window_bytes));
  o.text(",\"target_bytes\":");
  o.format("%llu", static_cast<unsigned long long>(r.target_bytes));
  o.text(r.timestamps ? ",\"timestamps\":true" : ",\"timestamps\":false");
  if (log) o.text(r.enforced ? ",\"enforced\":true" : ",\"enforced\":false");
  o.text("}\n");
  return o.finish();
}

}  // namespace rsfc
