// YAML -> Config, strictly. The only file that includes yaml-cpp.
//
// Every section is a table of fields (one line per key): a key not in the table is an error,
// so is a duplicate key, a wrong type or an out-of-range value. Every error is one line:
//   <file>:<line>: <dotted.key>: <what is wrong> (got <value>)
// Rules that involve several keys (policy per direction, windows against min_window_bytes,
// subscriber_networks needed by a policy) are checked after the whole file is read.
#include "rsfc/io/config.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <type_traits>
#include <utility>

namespace rsfc {
namespace {

// The largest window TCP can advertise: 65535 << 14 (RFC 7323 caps the shift at 14).
constexpr uint64_t kMaxWindowBytes = 65535ULL << 14;
// min_window_bytes floor: 2 segments of the smallest default MSS (RFC 1122: 536).
constexpr uint64_t kMinWindowFloor = 2 * 536;
constexpr uint64_t kU32Max = std::numeric_limits<uint32_t>::max();
constexpr size_t kMaxFileBytes = 1 << 20;

// ---------------------------------------------------------------------------------------------
// Reading values

// One value in the document, with the dotted key that reached it and its line (1-based).
struct Entry {
  YAML::Node node;
  std::string key;
  int line = 0;
};

std::string describe_node(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a mapping";
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      return "nothing";
    case YAML::NodeType::Scalar:
      break;
  }
  std::string s = n.Scalar();
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  if (n.Tag() != "?") return "\"" + s + "\"";  // quoted (or explicitly tagged) in the file
  return s;
}

bool is_plain_scalar(const YAML::Node& n) {
  return n.IsScalar() && n.Tag() == "?";
}

// Plain scalars that YAML 1.1 tools (PyYAML) read as booleans.
bool is_yaml11_bool(std::string_view s) {
  static constexpr std::array<std::string_view, 22> kWords = {
      "y",    "Y",    "yes",   "Yes",   "YES",   "n",  "N",  "no", "No",  "NO",  "true",
      "True", "TRUE", "false", "False", "FALSE", "on", "On", "ON", "off", "Off", "OFF"};
  return std::find(kWords.begin(), kWords.end(), s) != kWords.end();
}

// Control characters (a newline inside a quoted value or a key) are escaped, so that every
// message stays on one line.
std::string one_line(std::string_view text) {
  std::string out;
  for (const char ch : text) {
    const auto u = static_cast<unsigned char>(ch);
    if (ch == '\n') {
      out += "\\n";
    } else if (ch == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7f) {
      std::array<char, 8> buf{};
      std::snprintf(buf.data(), buf.size(), "\\x%02x", u);
      out += buf.data();
    } else {
      out += ch;
    }
  }
  return out;
}

std::string format_number(double v) {
  std::array<char, 32> buf{};
  std::snprintf(buf.data(), buf.size(), "%g", v);
  return buf.data();
}

class Reader {
 public:
  explicit Reader(std::string_view source) : source_(source) {}

  [[noreturn]] void fail(int line, std::string_view key, std::string_view what) const {
    std::string msg(source_);
    if (line > 0) msg += ":" + std::to_string(line);
    msg += ": ";
    if (!key.empty()) msg.append(key).append(": ");
    msg += what;
    throw ConfigError(one_line(msg));
  }
  // The common case: something is wrong with a value; say what it was.
  [[noreturn]] void fail(const Entry& e, std::string_view what) const {
    fail(e.line, e.key, std::string(what) + " (got " + describe_node(e.node) + ")");
  }

  // Remembers where each key was set, for checks that involve several keys.
  void note(const std::string& key, int line) { lines_[key] = line; }
  std::optional<int> line_of(const std::string& key) const {
    auto it = lines_.find(key);
    if (it == lines_.end()) return std::nullopt;
    return it->second;
  }

 private:
  std::string_view source_;
  std::map<std::string, int> lines_;
};

int line_of_node(const YAML::Node& n, int fallback) {
  // A missing value (`key:`) has the mark of whatever follows it: use the key's line.
  if (n.IsNull()) return fallback;
  const YAML::Mark m = n.Mark();
  return m.is_null() ? fallback : m.line + 1;
}

// A scalar with a value; `key:` alone or `key: ~` is an error for every non-section key.
const std::string& scalar(const Reader& r, const Entry& e, std::string_view expected) {
  if (e.node.IsNull()) r.fail(e, "has no value, expected " + std::string(expected));
  if (!e.node.IsScalar()) r.fail(e, "expected " + std::string(expected));
  return e.node.Scalar();
}

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

// Removes YAML 1.1 digit separators (1_000_000): each '_' must sit between two digits.
std::optional<std::string> without_separators(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '_') {
      out += s[i];
    } else if (i == 0 || i + 1 == s.size() || !is_digit(s[i - 1]) || !is_digit(s[i + 1])) {
      return std::nullopt;
    }
  }
  return out;
}

// A non-negative decimal integer. Rejects signs, fractions, exponents, hex and leading zeros
// (YAML 1.1 reads 0755 as octal).
uint64_t read_uint(const Reader& r, const Entry& e, uint64_t lo, uint64_t hi) {
  const std::string& s = scalar(r, e, "an integer");
  if (!is_plain_scalar(e.node)) r.fail(e, "expected an integer, not a quoted string");
  if (!s.empty() && s[0] == '-') r.fail(e, "must not be negative");
  const std::optional<std::string> digits = without_separators(s);
  if (!digits || digits->empty() || !std::all_of(digits->begin(), digits->end(), is_digit)) {
    r.fail(e, "expected an integer");
  }
  if (digits->size() > 1 && (*digits)[0] == '0') {
    r.fail(e, "leading zero (YAML 1.1 reads it as octal): write the number without it");
  }
  uint64_t v = 0;
  const char* end = digits->data() + digits->size();
  auto [ptr, ec] = std::from_chars(digits->data(), end, v);
  if (ec != std::errc() || ptr != end || v < lo || v > hi) {
    r.fail(e, "out of range, must be between " + std::to_string(lo) + " and " + std::to_string(hi));
  }
  return v;
}

struct Range {
  double lo;
  double hi;
  bool lo_open = false;  // lo itself excluded
  bool hi_open = false;
  bool contains(double v) const {
    return (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
  }
  std::string describe() const {
    if (!lo_open && !hi_open) return "between " + format_number(lo) + " and " + format_number(hi);
    return std::string(lo_open ? "> " : ">= ") + format_number(lo) + " and " +
           (hi_open ? "< " : "<= ") + format_number(hi);
  }
};

// True for the number syntax accepted by read_real: -?digits(.digits)?([eE][-+]?digits)?
bool is_decimal_number(std::string_view s) {
  size_t i = 0;
  auto digits = [&] {
    const size_t start = i;
    while (i < s.size() && is_digit(s[i])) ++i;
    return i > start;
  };
  if (i < s.size() && s[i] == '-') ++i;
  if (!digits()) return false;
  if (i < s.size() && s[i] == '.') {
    ++i;
    if (!digits()) return false;
  }
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '-' || s[i] == '+')) ++i;
    if (!digits()) return false;
  }
  return i == s.size();
}

// A finite decimal number: 3, 0.875, 2.5e-1, 86_400.
double read_real(const Reader& r, const Entry& e, Range range) {
  const std::string& s = scalar(r, e, "a number");
  if (!is_plain_scalar(e.node)) r.fail(e, "expected a number, not a quoted string");
  const std::optional<std::string> text = without_separators(s);
  if (!text || !is_decimal_number(*text)) r.fail(e, "expected a number");
  double v = 0;
  const char* end = text->data() + text->size();
  auto [ptr, ec] = std::from_chars(text->data(), end, v);
  if (ec != std::errc() || ptr != end || !std::isfinite(v) || !range.contains(v)) {
    if ((*text)[0] == '-' && range.lo >= 0) r.fail(e, "must not be negative");
    r.fail(e, "out of range, must be " + range.describe());
  }
  return v;
}

// A string; a plain YAML 1.1 boolean word is refused, because the writer almost surely meant
// something else (`decision_log: off` would otherwise log to a file named "off").
std::string read_string(const Reader& r, const Entry& e) {
  const std::string& s = scalar(r, e, "a string");
  if (is_plain_scalar(e.node) && is_yaml11_bool(s)) {
    r.fail(e, "expected a string; this reads as a boolean in YAML 1.1, quote it if you mean it");
  }
  return s;
}

// true or false (YAML 1.2 core spellings); yes/no/on/off are refused as ambiguous between
// YAML versions.
bool read_bool(const Reader& r, const Entry& e) {
  const std::string& s = scalar(r, e, "true or false");
  if (s == "true" || s == "True" || s == "TRUE") return true;
  if (s == "false" || s == "False" || s == "FALSE") return false;
  r.fail(e, "expected true or false");
}

// ---------------------------------------------------------------------------------------------
// Field tables

// How to read one key of a section of type T.
template <class T>
struct Field {
  std::string_view name;
  std::function<void(Reader&, const Entry&, T&)> read;
};
template <class T>
using FieldTable = std::vector<Field<T>>;

// `proj` is a member pointer (&RsfcParams::x) or a lambda returning a reference.
template <class Proj>
auto uint_field(Proj proj, uint64_t lo, uint64_t hi) {
  return [proj, lo, hi](Reader& r, const Entry& e, auto& t) {
    auto& dst = std::invoke(proj, t);
    using D = std::remove_reference_t<decltype(dst)>;
    static_assert(std::is_unsigned_v<D>);
    dst =
        static_cast<D>(read_uint(r, e, lo, std::min<uint64_t>(hi, std::numeric_limits<D>::max())));
  };
}

template <class Proj>
auto real_field(Proj proj, Range range) {
  return [proj, range](Reader& r, const Entry& e, auto& t) {
    std::invoke(proj, t) = read_real(r, e, range);
  };
}

// A duration written as a number of `unit` (kMilli for *_ms keys, kSecond for *_s keys);
// fractions are allowed (1.5 s). Stored as Nanos.
template <class Proj>
auto duration_field(Proj proj, Nanos unit, Range range) {
  return [proj, unit, range](Reader& r, const Entry& e, auto& t) {
    std::invoke(proj, t) =
        static_cast<Nanos>(std::llround(read_real(r, e, range) * static_cast<double>(unit)));
  };
}

template <class Proj>
auto bool_field(Proj proj) {
  return [proj](Reader& r, const Entry& e, auto& t) { std::invoke(proj, t) = read_bool(r, e); };
}

template <class Proj>
auto string_field(Proj proj) {
  return [proj](Reader& r, const Entry& e, auto& t) { std::invoke(proj, t) = read_string(r, e); };
}

// A value taken from a fixed list of names.
template <class V, size_t N>
V read_name(const Reader& r, const Entry& e,
            const std::array<std::pair<std::string_view, V>, N>& names) {
  const std::string& s = scalar(r, e, "a name");
  for (const auto& [name, value] : names) {
    if (s == name) return value;
  }
  std::string list;
  for (const auto& [name, value] : names) list += (list.empty() ? "" : ", ") + std::string(name);
  r.fail(e, "unknown value, expected one of " + list);
}

// Parsing only; to_string(Policy) lives with the engine.
constexpr std::array<std::pair<std::string_view, Policy>, 5> kPolicyNames = {{
    {"off", Policy::kOff},
    {"observe", Policy::kObserve},
    {"static", Policy::kStatic},
    {"rsfc", Policy::kRsfc},
    {"drwa", Policy::kDrwa},
}};
constexpr std::array<std::pair<std::string_view, LogLevel>, 4> kLogLevelNames = {{
    {"debug", LogLevel::kDebug},
    {"info", LogLevel::kInfo},
    {"warn", LogLevel::kWarn},
    {"error", LogLevel::kError},
}};

// rsfc.threshold_ms: "auto" or a number of milliseconds > 0.
void read_threshold(Reader& r, const Entry& e, RsfcParams& p) {
  if (e.node.IsScalar() && e.node.Scalar() == "auto") {
    p.threshold.reset();
    return;
  }
  const auto number = e.node.IsScalar() ? without_separators(e.node.Scalar()) : std::nullopt;
  if (e.node.IsScalar() && (!is_plain_scalar(e.node) || !number || !is_decimal_number(*number))) {
    r.fail(e, "expected auto or a number of ms");
  }
  const double ms = read_real(r, e, Range{0, 10'000, true, false});
  p.threshold = static_cast<Nanos>(std::llround(ms * static_cast<double>(kMilli)));
}

// Edit distance, for "did you mean" on unknown keys.
size_t distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// Where a key that used to be valid now lives ("" if it never did).
std::string moved_to(std::string_view dotted);

// Reads a mapping through its field table. A missing value (`rsfc:` with every key commented
// out) is an empty section: the defaults stay.
template <class T>
void read_section(Reader& r, const Entry& section, const FieldTable<T>& table, T& target) {
  if (section.node.IsNull()) return;
  if (!section.node.IsMap()) r.fail(section, "expected a mapping of keys");
  const std::string prefix = section.key.empty() ? "" : section.key + ".";
  std::map<std::string, int> seen;
  for (const auto& kv : section.node) {
    const YAML::Node k = kv.first;
    const YAML::Node v = kv.second;
    const int key_line = line_of_node(k, section.line);
    if (!k.IsScalar()) r.fail(key_line, prefix + "?", "a key must be a plain name");
    const std::string& name = k.Scalar();
    const std::string dotted = prefix + name;
    if (auto [pos, inserted] = seen.emplace(name, key_line); !inserted) {
      r.fail(key_line, dotted,
             "duplicate key (first set on line " + std::to_string(pos->second) + ")");
    }
    auto field =
        std::find_if(table.begin(), table.end(), [&](const Field<T>& f) { return f.name == name; });
    if (field == table.end()) {
      if (const std::string now = moved_to(dotted); !now.empty()) {
        r.fail(Entry{v, dotted, key_line}, "unknown key: " + now);
      }
      std::string known, best;
      size_t best_d = std::numeric_limits<size_t>::max();
      for (const Field<T>& f : table) {
        known += (known.empty() ? "" : ", ") + std::string(f.name);
        const size_t d = distance(name, f.name);
        if (d < best_d) {
          best_d = d;
          best = f.name;
        }
      }
      std::string what = "unknown key";
      if (best_d <= std::max<size_t>(2, name.size() / 3)) what += ", did you mean " + best + "?";
      r.fail(key_line, dotted, what + " (known: " + known + ")");
    }
    r.note(dotted, key_line);
    field->read(r, Entry{v, dotted, line_of_node(v, key_line)}, target);
  }
}

template <class Section, class Proj>
auto section_field(const FieldTable<Section>& table, Proj proj) {
  return [&table, proj](Reader& r, const Entry& e, auto& t) {
    read_section(r, e, table, std::invoke(proj, t));
  };
}

// `host:port` with an IPv4 literal or a bracketed IPv6 literal; "" disables.
void read_listen(Reader& r, const Entry& e, Config& c) {
  const std::string s = read_string(r, e);
  if (s.empty()) {
    c.metrics_listen.clear();
    return;
  }
  const size_t colon = s.rfind(':');
  if (colon == std::string::npos) r.fail(e, "expected host:port, [ipv6]:port, or \"\" to disable");
  std::string host = s.substr(0, colon);
  const std::string port = s.substr(colon + 1);
  bool v6 = false;
  if (!host.empty() && host.front() == '[') {
    if (host.back() != ']') r.fail(e, "expected [ipv6]:port");
    host = host.substr(1, host.size() - 2);
    v6 = true;
  } else if (host.find(':') != std::string::npos) {
    r.fail(e, "an IPv6 address must be in brackets, e.g. [::1]:9477");
  }
  std::array<unsigned char, sizeof(in6_addr)> buf{};
  if (inet_pton(v6 ? AF_INET6 : AF_INET, host.c_str(), buf.data()) != 1) {
    r.fail(e, v6 ? "not an IPv6 address inside the brackets"
                 : "host must be an IPv4 address or a bracketed IPv6 address (no names)");
  }
  unsigned p = 0;
  auto [ptr, ec] = std::from_chars(port.data(), port.data() + port.size(), p);
  if (port.empty() || ec != std::errc() || ptr != port.data() + port.size() || p < 1 || p > 65535) {
    r.fail(e, "port must be a number between 1 and 65535");
  }
  c.metrics_listen = s;
}

void read_queues(Reader& r, const Entry& e, Config& c) {
  if (!e.node.IsSequence()) r.fail(e, "expected a list of NFQUEUE numbers, e.g. [0, 1]");
  if (e.node.size() == 0) r.fail(e, "must list at least one queue");
  std::vector<uint16_t> queues;
  std::map<uint16_t, size_t> index;
  for (size_t i = 0; i < e.node.size(); ++i) {
    const Entry item{e.node[i], e.key + "[" + std::to_string(i) + "]",
                     line_of_node(e.node[i], e.line)};
    const auto q = static_cast<uint16_t>(read_uint(r, item, 0, 65535));
    if (auto [pos, inserted] = index.emplace(q, i); !inserted) {
      r.fail(item,
             "duplicate queue number, also " + e.key + "[" + std::to_string(pos->second) + "]");
    }
    queues.push_back(q);
  }
  c.queues = std::move(queues);
}

void read_networks(Reader& r, const Entry& e, Config& c) {
  if (e.node.IsNull()) r.fail(e, "has no value, expected a list of prefixes");
  if (!e.node.IsSequence()) r.fail(e, "expected a list of prefixes, e.g. [\"198.18.0.0/15\"]");
  std::vector<Prefix> nets;
  for (size_t i = 0; i < e.node.size(); ++i) {
    const Entry item{e.node[i], e.key + "[" + std::to_string(i) + "]",
                     line_of_node(e.node[i], e.line)};
    const std::string text = read_string(r, item);
    std::string why;
    std::optional<Prefix> p = Prefix::parse(text, &why);
    if (!p) r.fail(item, "bad prefix" + (why.empty() ? "" : ": " + why));
    for (size_t j = 0; j < nets.size(); ++j) {
      if (nets[j] == *p) {
        r.fail(item, "duplicate prefix, same as " + e.key + "[" + std::to_string(j) + "]");
      }
    }
    nets.push_back(*p);
  }
  c.params.subscriber_networks = std::move(nets);
}

// ---------------------------------------------------------------------------------------------
// The key tables. Ranges are documented in conf/rsfcd.yaml: keep the two in step.

// rsfc.tuning: the control law's details (experimental). TO ADD AN RSFC KEY: add the field to
// RsfcParams in include/rsfc/core/params.h, add ONE line below (or to kRsfcFields if an
// operator needs it), and document it in conf/rsfcd.yaml (the config_test checks that the
// example file parses and shows the defaults).
const FieldTable<RsfcParams> kRsfcTuningFields = {
    {"control_interval_floor_ms",
     duration_field(&RsfcParams::control_interval_floor, kMilli, {1, 10'000})},
    {"rtt_smoothing_ms", duration_field(&RsfcParams::rtt_smoothing, kMilli, {1, 60'000})},
    {"probe_step_queue", real_field(&RsfcParams::probe_step_queue, {0, 10, true, false})},
    {"probe_below", real_field(&RsfcParams::probe_below, {0, 1})},
    {"drain_fraction", real_field(&RsfcParams::drain_fraction, {0, 1, true, true})},
    {"path_foreign_rate", real_field(&RsfcParams::path_foreign_rate, {0, 1, true, false})},
    {"path_tolerance_ms", duration_field(&RsfcParams::path_tolerance, kMilli, {0, 1'000})},
    {"max_interval_ms", duration_field(&RsfcParams::max_interval, kMilli, {1, 60'000})},
    {"tick_multiple", real_field(&RsfcParams::tick_multiple, {0, 100})},
    {"rtt_gain", real_field(&RsfcParams::rtt_gain, {0, 1, true, false})},
    {"monitor_after_steps", uint_field(&RsfcParams::monitor_after_steps, 1, 100)},
    {"monitor_steps", uint_field(&RsfcParams::monitor_steps, 1, 100)},
    {"fine_tick_ms", duration_field(&RsfcParams::fine_tick, kMilli, {0, 1'000})},
    {"unused_fraction", real_field(&RsfcParams::unused_fraction, {0, 1})},
    {"unused_decay", real_field(&RsfcParams::unused_decay, {0, 1})},
    {"startup_growth", real_field(&RsfcParams::startup_growth, {1, 100})},
    {"probe_doublings", uint_field(&RsfcParams::probe_doublings, 0, 10)},
    {"recut_fraction", real_field(&RsfcParams::recut_fraction, {0, 1, true, false})},
    {"min_window_segments", uint_field(&RsfcParams::min_window_segments, 1, 64)},
    {"lag_confirm_fraction", real_field(&RsfcParams::lag_confirm_fraction, {0, 1})},
    {"refresh_holdoff", real_field(&RsfcParams::refresh_holdoff, {0, 1})},
};

// rsfc: the RSFC controller (uplink knob), the keys an operator sets.
const FieldTable<RsfcParams> kRsfcFields = {
    {"threshold_ms", read_threshold},  // "auto" or ms > 0
    {"threshold_floor_ms", duration_field(&RsfcParams::threshold_floor, kMilli, {0, 10'000})},
    {"threshold_ceiling_ms", duration_field(&RsfcParams::threshold_ceiling, kMilli, {1, 10'000})},
    {"min_window_horizon_s", duration_field(&RsfcParams::min_window_horizon, kSecond, {1, 3'600})},
    {"tbuff_filter_ms", duration_field(&RsfcParams::tbuff_filter, kMilli, {0, 10'000})},
    {"growth_per_rtt", real_field(&RsfcParams::growth_per_rtt, {0, 4, true, false})},
    {"fast_target", real_field(&RsfcParams::fast_target, {0, 2})},
    {"min_refresh_s", duration_field(&RsfcParams::min_refresh, kSecond, {0, 3'600})},
    {"path_check_ms", duration_field(&RsfcParams::path_check, kMilli, {0, 60'000})},
    {"initial_window_bytes", uint_field(&RsfcParams::initial_window_bytes, 0, kMaxWindowBytes)},
    {"per_subscriber", bool_field(&RsfcParams::per_subscriber)},
    {"share_equalize", real_field(&RsfcParams::share_equalize, {0, 1})},
    {"tuning", section_field(kRsfcTuningFields, [](RsfcParams& p) -> RsfcParams& { return p; })},
};

const FieldTable<DrwaParams> kDrwaFields = {
    {"alpha", real_field(&DrwaParams::alpha, {0, 1, false, true})},
    {"lambda", real_field(&DrwaParams::lambda, {0, 100, true, false})},
    {"interval_floor_ms", duration_field(&DrwaParams::interval_floor, kMilli, {1, 10'000})},
    {"rtt_min_horizon_s", duration_field(&DrwaParams::rtt_min_horizon, kSecond, {0, 86'400})},
};

const FieldTable<DirectionParams> kDirectionFields = {
    {"policy",
     [](Reader& r, const Entry& e, DirectionParams& d) {
       // yaml-cpp reads a bare `off` as the string "off" (PyYAML: false): both spellings work.
       d.policy = read_name(r, e, kPolicyNames);
     }},
    {"static_window_bytes",
     uint_field(&DirectionParams::static_window_bytes, kMinWindowFloor, kMaxWindowBytes)},
};

const FieldTable<Config> kQueueFields = {
    {"maxlen", uint_field(&Config::queue_maxlen, 1, kU32Max)},
    {"socket_buffer_bytes", uint_field(&Config::socket_rcvbuf, 64 << 10, 1 << 30)},
    {"batch", uint_field(&Config::batch_size, 1, 65'536)},
};

const FieldTable<Config> kFlowsFields = {
    {"max", uint_field(&Config::flows_max, 1, kU32Max)},
    {"idle_timeout_s", duration_field([](Config& c) -> Nanos& { return c.params.idle_timeout; },
                                      kSecond, {1, 7 * 86'400})},
    {"closed_timeout_s", duration_field([](Config& c) -> Nanos& { return c.params.closed_timeout; },
                                        kSecond, {1, 3'600})},
    {"embryonic_timeout_s",
     duration_field([](Config& c) -> Nanos& { return c.params.embryonic_timeout; }, kSecond,
                    {1, 3'600})},
};

const FieldTable<Config> kMetricsFields = {
    {"listen", read_listen},
};

const FieldTable<Config> kLogFields = {
    {"level",
     [](Reader& r, const Entry& e, Config& c) { c.log_level = read_name(r, e, kLogLevelNames); }},
};

const FieldTable<Config> kTopFields = {
    {"queues", read_queues},
    {"subscriber_networks", read_networks},
    {"uplink", section_field(kDirectionFields,
                             [](Config& c) -> DirectionParams& { return c.params.uplink; })},
    {"downlink", section_field(kDirectionFields,
                               [](Config& c) -> DirectionParams& { return c.params.downlink; })},
    {"min_window_bytes",
     uint_field([](Config& c) -> uint32_t& { return c.params.min_window_bytes; }, kMinWindowFloor,
                kMaxWindowBytes)},
    {"queue", section_field(kQueueFields, [](Config& c) -> Config& { return c; })},
    {"flows", section_field(kFlowsFields, [](Config& c) -> Config& { return c; })},
    {"metrics", section_field(kMetricsFields, [](Config& c) -> Config& { return c; })},
    {"log", section_field(kLogFields, [](Config& c) -> Config& { return c; })},
    {"decision_log", string_field(&Config::decision_log)},
    {"rsfc", section_field(kRsfcFields, [](Config& c) -> RsfcParams& { return c.params.rsfc; })},
    {"drwa", section_field(kDrwaFields, [](Config& c) -> DrwaParams& { return c.params.drwa; })},
};

bool has_field(const FieldTable<RsfcParams>& table, std::string_view name) {
  return std::any_of(table.begin(), table.end(),
                     [&](const Field<RsfcParams>& f) { return f.name == name; });
}

std::string moved_to(std::string_view dotted) {
  if (dotted == "rsfc.decision_log") return "the decision log is the top-level key decision_log";
  constexpr std::string_view kRsfc = "rsfc.", kTuning = "rsfc.tuning.";
  if (dotted.starts_with(kTuning) && has_field(kRsfcFields, dotted.substr(kTuning.size()))) {
    return "an operator key, set it as rsfc." + std::string(dotted.substr(kTuning.size()));
  }
  if (dotted.starts_with(kRsfc) && has_field(kRsfcTuningFields, dotted.substr(kRsfc.size()))) {
    return "moved to the experimental block, rsfc.tuning." +
           std::string(dotted.substr(kRsfc.size()));
  }
  return "";
}

// ---------------------------------------------------------------------------------------------
// Rules across keys

void check_direction(const Reader& r, const Config& c, const DirectionParams& d,
                     const std::string& name) {
  const std::string policy_key = name + ".policy";
  const int policy_line = r.line_of(policy_key).value_or(0);
  if (name == "downlink" && d.policy == Policy::kRsfc) {
    r.fail(policy_line, policy_key,
           "rsfc is an uplink-only policy (it regulates the subscriber's uplink buffer); "
           "downlink takes off, observe, static or drwa (got rsfc)");
  }
  if (name == "uplink" && d.policy == Policy::kDrwa) {
    r.fail(policy_line, policy_key,
           "drwa is a downlink-only policy (it sizes the server's window into the downlink); "
           "uplink takes off, observe, static or rsfc (got drwa)");
  }
  const uint32_t min = c.params.min_window_bytes;
  if (d.policy == Policy::kStatic && d.static_window_bytes < min) {
    const std::string win_key = name + ".static_window_bytes";
    if (auto line = r.line_of(win_key)) {
      r.fail(*line, win_key,
             "below min_window_bytes (" + std::to_string(min) + ") while " + policy_key +
                 " is static (got " + std::to_string(d.static_window_bytes) + ")");
    }
    r.fail(r.line_of("min_window_bytes").value_or(policy_line), "min_window_bytes",
           "above " + win_key + " (" + std::to_string(d.static_window_bytes) +
               " by default) while " + policy_key + " is static (got " + std::to_string(min) + ")");
  }
}

void check_config(const Reader& r, const Config& c) {
  check_direction(r, c, c.params.uplink, "uplink");
  check_direction(r, c, c.params.downlink, "downlink");

  if (c.params.subscriber_networks.empty()) {
    for (const char* dir : {"uplink", "downlink"}) {
      const DirectionParams& d =
          std::string_view(dir) == "uplink" ? c.params.uplink : c.params.downlink;
      if (d.policy == Policy::kOff) continue;
      const std::string policy_key = std::string(dir) + ".policy";
      const int line = r.line_of("subscriber_networks").value_or(r.line_of(policy_key).value_or(0));
      r.fail(line, "subscriber_networks",
             "must list at least one prefix when " + policy_key + " is not off (got none)");
    }
  }

  const RsfcParams& rs = c.params.rsfc;
  if (rs.initial_window_bytes != 0 && rs.initial_window_bytes < c.params.min_window_bytes) {
    r.fail(r.line_of("rsfc.initial_window_bytes").value_or(0), "rsfc.initial_window_bytes",
           "must be 0 (no clamp until estimates exist) or at least min_window_bytes (" +
               std::to_string(c.params.min_window_bytes) + ") (got " +
               std::to_string(rs.initial_window_bytes) + ")");
  }
}

// yaml-cpp 0.7 accepts a quoted scalar that is never closed when the file ends with a newline:
// the string silently swallows the rest of the file, whose keys then take their defaults. So
// every quoted scalar must close on the line where it opens (no config value spans lines).
void check_quotes(const Reader& r, const YAML::Node& n, std::string_view text,
                  const std::string& path) {
  if (n.IsSequence()) {
    for (size_t i = 0; i < n.size(); ++i) {
      check_quotes(r, n[i], text, path + "[" + std::to_string(i) + "]");
    }
  } else if (n.IsMap()) {
    for (const auto& kv : n) {
      const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : "?";
      const std::string child = path.empty() ? key : path + "." + key;
      check_quotes(r, kv.first, text, child);
      check_quotes(r, kv.second, text, child);
    }
  }
  // Plain scalars cannot be unterminated. yaml-cpp's mark is a byte offset into the text
  // (parse_config strips a UTF-8 BOM and refuses UTF-16/32 so that it is).
  if (!n.IsScalar() || n.Tag() == "?" || n.Mark().is_null() || n.Mark().pos < 0) return;
  size_t i = static_cast<size_t>(n.Mark().pos);
  auto at = [&](size_t k) { return k < text.size() ? text[k] : '\n'; };
  // Skip node properties: an anchor (&a) or a tag (!!str), each followed by blanks.
  auto blank = [&](size_t k) { return at(k) == ' ' || at(k) == '\t'; };
  auto end_of_line = [&](size_t k) { return at(k) == '\n' || at(k) == '\r'; };
  while (at(i) == '&' || at(i) == '!') {
    ++i;
    while (!blank(i) && !end_of_line(i) && at(i) != '"' && at(i) != '\'') ++i;
    while (blank(i)) ++i;
  }
  const char quote = at(i);
  if (quote != '"' && quote != '\'') return;  // e.g. `!!str 5`, not quoted
  for (++i; !end_of_line(i); ++i) {
    if (quote == '"' && at(i) == '\\') {
      if (end_of_line(i + 1)) break;  // a line continuation: the value spans lines
      ++i;                            // escaped character
    } else if (quote == '\'' && at(i) == '\'' && at(i + 1) == '\'') {
      ++i;  // '' is a quote inside single quotes
    } else if (at(i) == quote) {
      return;
    }
  }
  r.fail(n.Mark().line + 1, path,
         std::string("unterminated quoted string: the closing ") + quote +
             " must be on the line where the value starts");
}

// A '%' line is a YAML directive: only %YAML and %TAG, before a '---' that starts the
// document. yaml-cpp 0.7 skips an unknown one, and takes one met later for the start of a new
// document, dropping the rest of the file.
void check_directives(const Reader& r, std::string_view text) {
  bool preamble = true;
  bool directives = false;
  int line = 0;
  for (size_t start = 0; start < text.size();) {
    const size_t end = std::min(text.find('\n', start), text.size());
    const std::string_view l = text.substr(start, end - start);
    start = end + 1;
    ++line;
    if (l.starts_with('%')) {
      if (!preamble) {
        r.fail(line, "", "a line starting with % (a YAML directive) inside the document");
      }
      if (!l.starts_with("%YAML ") && !l.starts_with("%TAG ")) {
        r.fail(line, "", "unknown YAML directive (a line starting with %)");
      }
      directives = true;
    } else if (preamble && l.find_first_not_of(" \t\r") != std::string_view::npos &&
               !l.starts_with('#')) {
      if (directives && !l.starts_with("---")) {
        r.fail(line, "", "YAML directives must be followed by a '---' line");
      }
      preamble = false;
    }
  }
}

// Counts the documents in a stream (only the first two are read) and notices a parser that
// makes no progress between documents.
class DocumentCounter : public YAML::EventHandler {
 public:
  int documents = 0;
  bool stuck = false;
  int second_line = 0;  // 1-based line where the second document starts

  void OnDocumentStart(const YAML::Mark& mark) override {
    if (++documents == 2) {
      second_line = mark.line + 1;
      stuck = mark.pos == first_pos_;
    } else {
      first_pos_ = mark.pos;
    }
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}

 private:
  int first_pos_ = -1;
};

}  // namespace

Config parse_config(std::string_view yaml_text, std::string_view source) {
  Reader r(source);
  if (yaml_text.starts_with("\xEF\xBB\xBF")) yaml_text.remove_prefix(3);  // UTF-8 BOM
  if (yaml_text.find('\0') != std::string_view::npos || yaml_text.starts_with("\xFE\xFF") ||
      yaml_text.starts_with("\xFF\xFE")) {
    r.fail(0, "", "not UTF-8 text (UTF-16/32 or binary): save the file as UTF-8");
  }
  check_directives(r, yaml_text);
  const std::string text(yaml_text);
  YAML::Node root;
  try {
    // Count documents first, with a bound: yaml-cpp 0.7's LoadAll() never ends (and eats all
    // memory) on a stray ',' at the top level (jbeder/yaml-cpp#1040, fixed after 0.8): the
    // parser then reports empty documents at one position forever.
    std::istringstream in(text);
    YAML::Parser parser(in);
    DocumentCounter counter;
    for (int i = 0; i < 2 && parser.HandleNextDocument(counter); ++i) {
    }
    if (counter.stuck) r.fail(counter.second_line, "", "YAML syntax error: unexpected character");
    if (counter.documents > 1) {
      r.fail(counter.second_line, "", "more than one YAML document (a second '---' or a '...')");
    }
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    r.fail(e.mark.is_null() ? 0 : e.mark.line + 1, "", "YAML syntax error: " + e.msg);
  }
  check_quotes(r, root, text, "");
  if (root.IsNull()) r.fail(1, "", "empty configuration (no keys)");
  if (!root.IsMap()) {
    r.fail(line_of_node(root, 1), "",
           "the top level must be a mapping of keys (got " + describe_node(root) + ")");
  }
  Config c;
  read_section(r, Entry{root, "", 1}, kTopFields, c);
  check_config(r, c);
  return c;
}

Config load_config_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    throw ConfigError(one_line(path) + ": is a directory, expected a YAML file");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(one_line(path) + ": cannot open: " + std::strerror(errno));
  std::string text;
  std::array<char, 4096> buf{};
  while (in.read(buf.data(), buf.size()) || in.gcount() > 0) {
    text.append(buf.data(), static_cast<size_t>(in.gcount()));
    if (text.size() > kMaxFileBytes) {
      throw ConfigError(one_line(path) + ": larger than " + std::to_string(kMaxFileBytes) +
                        " bytes, not a config file");
    }
  }
  if (in.bad()) throw ConfigError(one_line(path) + ": read error: " + std::strerror(errno));
  return parse_config(text, path);
}

std::vector<std::string> restart_only_differences(const Config& running, const Config& loaded) {
  std::vector<std::string> keys;
  if (running.queues != loaded.queues) keys.emplace_back("queues");
  if (running.queue_maxlen != loaded.queue_maxlen) keys.emplace_back("queue.maxlen");
  if (running.socket_rcvbuf != loaded.socket_rcvbuf) keys.emplace_back("queue.socket_buffer_bytes");
  if (running.batch_size != loaded.batch_size) keys.emplace_back("queue.batch");
  if (running.flows_max != loaded.flows_max) keys.emplace_back("flows.max");
  if (running.metrics_listen != loaded.metrics_listen) keys.emplace_back("metrics.listen");
  return keys;
}

const char* to_string(LogLevel l) {
  switch (l) {
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarn:
      return "warn";
    case LogLevel::kError:
      return "error";
  }
  return "?";
}

}  // namespace rsfc
