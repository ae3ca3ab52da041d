// YAML -> Config, strictly, and Config -> commented YAML (--print-config, conf/rsfcd.yaml).
// The only file that includes yaml-cpp.
//
// Every section is a table of fields (one line per key, with its range and help): the same
// table reads the key and prints it, so conf/rsfcd.yaml is generated, never kept in step by
// hand. A key not in the table is an error,
// so is a duplicate key, a wrong type or an out-of-range value. Every error is one line:
//   <file>:<line>: <dotted.key>: <what is wrong> (got <value>)
// Rules that involve several keys (policy per direction, windows against min_window_bytes,
// subscriber_networks needed by a policy) are checked after the whole file is read.
#include "rsfc/io/config.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <unistd.h>
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
#include <set>
#include <sstream>
#include <type_traits>
#include <utility>

#include "rsfc/core/engine.h"
#include "rsfc/core/flow_table.h"
#include "rsfc/core/window.h"

namespace rsfc {
namespace {

// Window limits (the largest window TCP can advertise, the min_window_bytes floor) are the
// core's: kMaxWindowBytes and kMinWindowFloor in rsfc/core/window.h.
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
// Showing values: the documented configuration (conf/rsfcd.yaml) is printed from the tables
// that read it, so its keys, defaults and ranges cannot drift from the parser.

// The shortest text that reads back as exactly `v`: 0.875, 3, 2.5e-05.
std::string show_real(double v) {
  std::array<char, 32> buf{};
  const auto res = std::to_chars(buf.data(), buf.data() + buf.size(), v);
  return std::string(buf.data(), res.ptr);
}

// A duration in `unit`s, exactly: 200, 1.5.
std::string show_duration(Nanos v, Nanos unit) {
  if (v % unit == 0) return std::to_string(v / unit);
  return show_real(static_cast<double>(v) / static_cast<double>(unit));
}

// A double-quoted YAML string.
std::string show_string(std::string_view s) {
  std::string out = "\"";
  for (const char ch : s) {
    if (ch == '"' || ch == '\\') out += '\\';
    out += ch;
  }
  return one_line(out) + "\"";  // control characters as \n, \t, \xNN: YAML reads them back
}

// What a real range accepts, for a comment: "0 .. 1", "> 0 .. 4", "0 .. < 1".
std::string range_values(const Range& r) {
  return std::string(r.lo_open ? "> " : "") + show_real(r.lo) + " .. " + (r.hi_open ? "< " : "") +
         show_real(r.hi);
}

// Writes the configuration as commented YAML: each key's help, what it accepts, and its
// default when the value shown differs.
class Printer {
 public:
  static constexpr size_t kWidth = 96;

  explicit Printer(bool tuning) : tuning_(tuning) {}
  bool tuning() const { return tuning_; }

  // One comment line per '\n'-separated line of `text`; a line too long is wrapped (a
  // "- " item continues under its text).
  void comment(std::string_view text) {
    for (size_t start = 0; start <= text.size();) {
      const size_t end = std::min(text.find('\n', start), text.size());
      comment_line(text.substr(start, end - start));
      start = end + 1;
    }
  }

  void key(std::string_view name, std::string_view help, std::string_view values,
           const std::string& shown, const std::string& by_default) {
    explain(help);
    std::string note = values.empty() ? "" : "Values: " + std::string(values) + ".";
    if (shown != by_default) note += (note.empty() ? "" : " ") + ("Default: " + by_default + ".");
    if (!note.empty()) comment(note);
    line(std::string(name) + ": " + shown);
  }

  void open(std::string_view name, std::string_view help) {
    explain(help);
    line(std::string(name) + ":");
    ++depth_;
  }
  void close() { --depth_; }

  // An experimental section left out: its help says what it is and how to list it.
  void omitted(std::string_view help) {
    explain(help);
    comment("Not listed here: `rsfcd --print-config --tuning` prints it with every key.");
  }

  std::string take() { return std::move(out_); }

 private:
  // The help of a key or section; a help shared by two sections (uplink and downlink) is
  // printed once. Top-level keys are separated by an empty line.
  void explain(std::string_view help) {
    if (depth_ == 0) out_ += '\n';
    if (!help.empty() && explained_.insert(help.data()).second) comment(help);
  }

  void comment_line(std::string_view text) {
    const size_t width = kWidth - 2 * depth_ - 2;  // after the indent and "# "
    if (text.size() <= width) {
      line(text.empty() ? "#" : "# " + std::string(text));
      return;
    }
    size_t lead = std::min(text.find_first_not_of(' '), text.size());
    if (text.substr(lead).starts_with("- ")) lead += 2;
    const std::string indent(lead, ' ');
    std::string cur(text.substr(0, lead));
    for (size_t i = lead; i < text.size();) {
      const size_t end = std::min(text.find(' ', i), text.size());
      const std::string_view word = text.substr(i, end - i);
      i = end + 1;
      if (word.empty()) continue;
      if (cur.size() > lead && cur.size() + 1 + word.size() > width) {
        line("# " + cur);
        cur = indent;
      }
      if (cur.size() > lead) cur += ' ';
      cur += word;
    }
    line("# " + cur);
  }

  void line(std::string_view text) { out_.append(2 * depth_, ' ').append(text) += '\n'; }

  std::string out_;
  size_t depth_ = 0;
  bool tuning_;
  std::set<const char*> explained_;
};

// ---------------------------------------------------------------------------------------------
// Field tables

// How one key of a section of type T is read, and printed with its comment.
template <class T>
struct Field {
  using Read = std::function<void(Reader&, const Entry&, T&)>;
  using Print = std::function<void(Printer&, const Field&, const T& shown, const T& defaults)>;

  template <class ReadPrint>
  Field(std::string_view n, ReadPrint codec, std::string_view h)
      : name(n), read(std::move(codec.read)), print(std::move(codec.print)), help(h) {}

  std::string_view name;
  Read read;
  Print print;
  std::string_view help;  // the key's comment in the printed configuration
};
template <class T>
using FieldTable = std::vector<Field<T>>;

template <class Read, class Print>
struct Codec {
  Read read;
  Print print;
};
template <class Read, class Print>
Codec<Read, Print> codec(Read read, Print print) {
  return {std::move(read), std::move(print)};
}

// A key with a value: `show` turns the value into YAML text, `values` says what it accepts.
template <class Read, class Show>
auto leaf(Read read, Show show, std::string values) {
  return codec(std::move(read),
               [show, values = std::move(values)](Printer& p, const auto& f, const auto& shown,
                                                  const auto& defaults) {
                 p.key(f.name, f.help, values, show(shown), show(defaults));
               });
}

// `proj` is a member pointer (&RsfcParams::x) or a generic lambda returning a reference
// (`[](auto& c) -> auto& { return c.params.x; }`), so that it reads from a const target too.
template <class Proj>
auto uint_field(Proj proj, uint64_t lo, uint64_t hi) {
  return leaf(
      [proj, lo, hi](Reader& r, const Entry& e, auto& t) {
        auto& dst = std::invoke(proj, t);
        using D = std::remove_reference_t<decltype(dst)>;
        static_assert(std::is_unsigned_v<D>);
        dst = static_cast<D>(
            read_uint(r, e, lo, std::min<uint64_t>(hi, std::numeric_limits<D>::max())));
      },
      [proj](const auto& t) { return std::to_string(std::invoke(proj, t)); },
      std::to_string(lo) + " .. " + std::to_string(hi));
}

template <class Proj>
auto real_field(Proj proj, Range range) {
  return leaf([proj, range](Reader& r, const Entry& e,
                            auto& t) { std::invoke(proj, t) = read_real(r, e, range); },
              [proj](const auto& t) { return show_real(std::invoke(proj, t)); },
              range_values(range));
}

// A duration written as a number of `unit` (kMilli for *_ms keys, kSecond for *_s keys);
// fractions are allowed (1.5 s). Stored as Nanos.
template <class Proj>
auto duration_field(Proj proj, Nanos unit, Range range) {
  return leaf(
      [proj, unit, range](Reader& r, const Entry& e, auto& t) {
        std::invoke(proj, t) =
            static_cast<Nanos>(std::llround(read_real(r, e, range) * static_cast<double>(unit)));
      },
      [proj, unit](const auto& t) { return show_duration(std::invoke(proj, t), unit); },
      range_values(range));
}

template <class Proj>
auto bool_field(Proj proj) {
  return leaf(
      [proj](Reader& r, const Entry& e, auto& t) { std::invoke(proj, t) = read_bool(r, e); },
      [proj](const auto& t) { return std::string(std::invoke(proj, t) ? "true" : "false"); },
      "true or false");
}

template <class Proj>
auto string_field(Proj proj, std::string values) {
  return leaf(
      [proj](Reader& r, const Entry& e, auto& t) { std::invoke(proj, t) = read_string(r, e); },
      [proj](const auto& t) { return show_string(std::invoke(proj, t)); }, std::move(values));
}

// A value taken from a fixed list of names.
template <class V, size_t N>
using Names = std::array<std::pair<std::string_view, V>, N>;

template <class V, size_t N>
V read_name(const Reader& r, const Entry& e, const Names<V, N>& names) {
  const std::string& s = scalar(r, e, "a name");
  for (const auto& [name, value] : names) {
    if (s == name) return value;
  }
  std::string list;
  for (const auto& [name, value] : names) list += (list.empty() ? "" : ", ") + std::string(name);
  r.fail(e, "unknown value, expected one of " + list);
}

// yaml-cpp reads a bare `off` as the string "off" (PyYAML: false): both spellings are read,
// and a name that is a YAML 1.1 boolean is printed quoted.
template <class Proj, class V, size_t N>
auto name_field(Proj proj, const Names<V, N>& names) {
  std::string values;
  for (size_t i = 0; i < N; ++i) {
    values += std::string(i == 0 ? "" : i + 1 == N ? " or " : ", ") + std::string(names[i].first);
  }
  return leaf([proj, &names](Reader& r, const Entry& e,
                             auto& t) { std::invoke(proj, t) = read_name(r, e, names); },
              [proj, &names](const auto& t) {
                for (const auto& [name, value] : names) {
                  if (value == std::invoke(proj, t)) {
                    return is_yaml11_bool(name) ? show_string(name) : std::string(name);
                  }
                }
                return std::string("?");
              },
              values);
}

// Parsing only; to_string(Policy) lives with the engine.
constexpr Names<Policy, 5> kPolicyNames = {{
    {"off", Policy::kOff},
    {"observe", Policy::kObserve},
    {"static", Policy::kStatic},
    {"rsfc", Policy::kRsfc},
    {"drwa", Policy::kDrwa},
}};
constexpr Names<LogLevel, 4> kLogLevelNames = {{
    {"debug", LogLevel::kDebug},
    {"info", LogLevel::kInfo},
    {"warn", LogLevel::kWarn},
    {"error", LogLevel::kError},
}};

// rsfc.threshold_ms: "auto" or a number of milliseconds > 0.
auto threshold_field() {
  static constexpr Range kRange{0, 10'000, true, false};
  return leaf(
      [](Reader& r, const Entry& e, RsfcParams& p) {
        if (e.node.IsScalar() && e.node.Scalar() == "auto") {
          p.threshold.reset();
          return;
        }
        const auto number = e.node.IsScalar() ? without_separators(e.node.Scalar()) : std::nullopt;
        if (e.node.IsScalar() &&
            (!is_plain_scalar(e.node) || !number || !is_decimal_number(*number))) {
          r.fail(e, "expected auto or a number of ms");
        }
        const double ms = read_real(r, e, kRange);
        p.threshold = static_cast<Nanos>(std::llround(ms * static_cast<double>(kMilli)));
      },
      [](const RsfcParams& p) {
        return p.threshold ? show_duration(*p.threshold, kMilli) : std::string("auto");
      },
      "auto, or " + range_values(kRange));
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

// A nested mapping read through its own table. An experimental section is printed only on
// request (`rsfcd --print-config --tuning`).
template <class Section, class Proj>
auto section_field(const FieldTable<Section>& table, Proj proj, bool experimental = false) {
  return codec([&table, proj](Reader& r, const Entry& e,
                              auto& t) { read_section(r, e, table, std::invoke(proj, t)); },
               [&table, proj, experimental](Printer& p, const auto& f, const auto& shown,
                                            const auto& defaults) {
                 if (experimental && !p.tuning()) {
                   p.omitted(f.help);
                   return;
                 }
                 p.open(f.name, f.help);
                 for (const Field<Section>& sub : table) {
                   sub.print(p, sub, std::invoke(proj, shown), std::invoke(proj, defaults));
                 }
                 p.close();
               });
}

// The whole target of a section (for sections of Config that fill Config's own fields).
constexpr auto kSelf = [](auto& t) -> auto& {
  return t;
};

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

std::string show_queues(const Config& c) {
  std::string s;
  for (const uint16_t q : c.queues) s += (s.empty() ? "" : ", ") + std::to_string(q);
  return "[" + s + "]";
}

std::string show_networks(const Config& c) {
  std::string s;
  for (const Prefix& p : c.params.subscriber_networks) {
    s += (s.empty() ? "" : ", ") + show_string(p.to_string());
  }
  return "[" + s + "]";
}

std::string show_listen(const Config& c) {
  return show_string(c.metrics_listen);
}

// ---------------------------------------------------------------------------------------------
// The key tables: the one source of every key's name, range and help. The defaults are the
// initialisers of Config and the params structs, which these tables print from. conf/rsfcd.yaml
// is `rsfcd --print-config` (config_test checks it byte for byte).
//
// TO ADD AN RSFC KEY: add the field to RsfcParams in include/rsfc/core/params.h, add ONE line
// to kRsfcTuningFields below (kRsfcFields only if an operator needs it: at most 12 keys), and
// regenerate conf/rsfcd.yaml with `build/rsfcd --print-config > conf/rsfcd.yaml`.

// rsfc.tuning: the control law's details, experimental.
const FieldTable<RsfcParams> kRsfcTuningFields = {
    {"control_interval_floor_ms",
     duration_field(&RsfcParams::control_interval_floor, kMilli, {1, 10'000}),
     "\"Per RTT\" steps use max(RTT, this) as their time base (RTT_min can be ~1 ms)."},
    {"rtt_smoothing_ms", duration_field(&RsfcParams::rtt_smoothing, kMilli, {1, 60'000}),
     "The window is sized on the round trip the upload really sees without its own uplink queue "
     "(a concurrent download's downlink queue included), averaged over this."},
    {"probe_step_queue", real_field(&RsfcParams::probe_step_queue, {0, 10, true, false}),
     "A probe step (slow state, buffer empty) adds at most rate x this x T bytes: the queue "
     "overshoot of one step near capacity; doubles for each further step that still finds the "
     "buffer empty, up to 2^probe_doublings times."},
    {"probe_below", real_field(&RsfcParams::probe_below, {0, 1}),
     "The buffer counts as empty (probe) below this x T, or below one packet's time at the "
     "link's rate if that is more (after a capacity drop min(d) still holds the old, shorter "
     "packet time); between that and T the window holds."},
    {"drain_fraction", real_field(&RsfcParams::drain_fraction, {0, 1, true, true}),
     "Drain: window = this x rate x RTT for about a round trip."},
    {"path_foreign_rate", real_field(&RsfcParams::path_foreign_rate, {0, 1, true, false}),
     "See rsfc.path_check_ms: the flow's data arrives at less than this x its rate."},
    {"path_tolerance_ms", duration_field(&RsfcParams::path_tolerance, kMilli, {0, 1'000}),
     "See rsfc.path_check_ms: t_buff's floor counts as unchanged within this (or two ticks, if "
     "more)."},
    {"max_interval_ms", duration_field(&RsfcParams::max_interval, kMilli, {1, 60'000}),
     "Control steps come once per RTT, clamped to [control_interval_floor_ms, this]."},
    {"tick_multiple", real_field(&RsfcParams::tick_multiple, {0, 100}),
     "auto T is never below this many timestamp ticks."},
    {"rtt_gain", real_field(&RsfcParams::rtt_gain, {0, 1, true, false}),
     "Gain of the moving average of each round-trip sample (the \"current\" round trip)."},
    {"monitor_after_steps", uint_field(&RsfcParams::monitor_after_steps, 1, 100),
     "Fast state: after this many steps with the cut in force and t_buff still above T, drain "
     "(monitor)."},
    {"monitor_steps", uint_field(&RsfcParams::monitor_steps, 1, 100),
     "A drain lasts this many steps with its cut in force (longer while a scheduled drain checks "
     "for a longer path)."},
    {"fine_tick_ms", duration_field(&RsfcParams::fine_tick, kMilli, {0, 1'000}),
     "Scheduled drains may be skipped (the buffer emptied on its own) only for phones whose "
     "timestamp tick is at most this: a coarser tick cannot tell an empty buffer from a short "
     "queue."},
    {"unused_fraction", real_field(&RsfcParams::unused_fraction, {0, 1}),
     "A window the phone leaves unused (in flight below this x window) shrinks by unused_decay "
     "per step."},
    {"unused_decay", real_field(&RsfcParams::unused_decay, {0, 1}), "See unused_fraction."},
    {"startup_growth", real_field(&RsfcParams::startup_growth, {1, 100}),
     "Startup (no estimates yet): the clamp is at least this x what the phone has in flight "
     "(the downlink knob's first step for a download whose ACKs come late, its round trip over "
     "twice the base one: what is in flight plus this x what the phone acknowledged)."},
    {"probe_doublings", uint_field(&RsfcParams::probe_doublings, 0, 10),
     "See probe_step_queue: how many times its cap may double while the buffer stays empty (4: "
     "up to 16x)."},
    {"recut_fraction", real_field(&RsfcParams::recut_fraction, {0, 1, true, false}),
     "Fast state: a cut that lowers the window below this x the window it replaces is a new cut, "
     "and the monitor's count (monitor_after_steps) waits for it to take effect (the server has "
     "acknowledged everything sent under the old right edge); a smaller trim keeps the count "
     "running."},
    {"min_window_segments", uint_field(&RsfcParams::min_window_segments, 1, 64),
     "The controller never sizes a window below this many of the flow's segments (MSS); "
     "min_window_bytes applies on top."},
    {"lag_confirm_fraction", real_field(&RsfcParams::lag_confirm_fraction, {0, 1}),
     "Without timestamps: a window-opening lag within this fraction of its minimum (at least "
     "2 ms) counts as an empty buffer, which confirms the baseline."},
    {"refresh_holdoff", real_field(&RsfcParams::refresh_holdoff, {0, 1}),
     "No scheduled drain within this fraction of rsfc.min_refresh_s after the flow's start or its "
     "last drain that counted."},
    {"threshold_ceiling_lag_ms",
     duration_field(&RsfcParams::threshold_ceiling_lag, kMilli, {1, 10'000}),
     "rsfc.threshold_ceiling_ms for a flow without timestamps. Its buffering delay is read from "
     "the lag before the server's ACK opens the window, and that lag also holds the queue of the "
     "phone's downloads: a ceiling that leaves no room for it holds the upload below its link."},
    {"threshold_ceiling_download_alone_ms",
     duration_field(&RsfcParams::threshold_ceiling_download_alone, kMilli, {0, 10'000}),
     "rsfc.threshold_ceiling_ms for the downlink knob's download whose phone runs no bulk upload "
     "(as pacing.next_to_upload_only's gate). Next to an upload a low ceiling keeps the "
     "phone's round trip short; alone, the download has no one to wait behind it, and on a link "
     "whose service swings a queue above that ceiling keeps it busy. Never below "
     "rsfc.threshold_ceiling_ms (0: the same)."},
    {"threshold_packets", real_field(&RsfcParams::threshold_packets, {0, 64}),
     "Each knob's auto T is never below this many packets' service at its link's delivered "
     "rate (one MSS each), up to threshold_packets_ceiling_ms: a queue shorter than a packet "
     "leaves a slow link idle between packets (0: no such floor)."},
    {"threshold_packets_ceiling_ms",
     duration_field(&RsfcParams::threshold_packets_ceiling, kMilli, {0, 10'000}),
     "The most threshold_packets may raise a knob's auto T to, whatever "
     "rsfc.threshold_ceiling_ms is."},
    {"threshold_ceiling_steady_ms",
     duration_field(&RsfcParams::threshold_ceiling_steady, kMilli, {0, 10'000}),
     "Each knob's auto-T ceiling, and its floor where rsfc.threshold_floor_ms is higher, while "
     "the knob's own filtered queue stays within twice rsfc.threshold_ceiling_ms (the "
     "upload's: plus half its base round trip) after the flow's start-up: a link that serves "
     "at a steady rate needs no more queue than a few "
     "packets. Once the queue goes past, the full ceiling holds until it has stayed within for "
     "rsfc.min_window_horizon_s (a link whose service swings keeps its window through slow "
     "spells). Flows with timestamps only; never above rsfc.threshold_ceiling_ms, the packet "
     "floor (threshold_packets) on top; not for a download alone (0: off)."},
    {"downlink_round_trip", bool_field(&RsfcParams::downlink_round_trip),
     "The downlink knob (policy rsfc) on a phone without TCP timestamps: true runs its law on "
     "the gateway's round trip (data forwarded to the ACK that covers it), which holds the "
     "phone's uplink queue too, with T's ceiling threshold_ceiling_lag_ms as the upload's: the "
     "two knobs then hold the sum of the phone's two queues. false leaves such downloads "
     "unclamped, and their uploads' lag then holds the download's whole queue. Counted in "
     "rsfcd_downlink_flows_round_trip_total and rsfcd_downlink_flows_no_timestamps_total."},
    {"downlink_yield", real_field(&RsfcParams::downlink_yield, {0.05, 1}),
     "The downlink knob on the gateway's round trip (downlink_round_trip): while the phone's "
     "regulated upload delivers short of its link (its last whole second under 0.85 of its best "
     "second of the 5-10 s before), the download steps with T's ceiling "
     "threshold_ceiling_lag_ms times this, so that it gives the upload room in the one sum both "
     "knobs hold (1: never gives way). Counted in rsfcd_downlink_steps_yielded_total."},
};

// rsfc: the RSFC controller (uplink knob), the keys an operator sets.
const FieldTable<RsfcParams> kRsfcFields = {
    {"threshold_ms", threshold_field(),
     "The threshold T. auto = the flow's RTT_min, clamped to [max(threshold_floor_ms, "
     "rsfc.tuning.tick_multiple x the phone's timestamp tick, rsfc.tuning.threshold_packets "
     "packets' service at the link's rate up to rsfc.tuning.threshold_packets_ceiling_ms), "
     "threshold_ceiling_ms or that floor if higher]."},
    {"threshold_floor_ms", duration_field(&RsfcParams::threshold_floor, kMilli, {0, 10'000}),
     "auto T is never below this (timestamp tick granularity is up to 10 ms)."},
    {"threshold_ceiling_ms", duration_field(&RsfcParams::threshold_ceiling, kMilli, {1, 10'000}),
     "auto T is never above this: the latency budget of each knob's queue (for a download "
     "alone rsfc.tuning.threshold_ceiling_download_alone_ms when higher, for the upload of a "
     "phone without timestamps rsfc.tuning.threshold_ceiling_lag_ms; while the knob's own queue "
     "has not gone past twice this (the upload's: plus half its base round trip), "
     "rsfc.tuning.threshold_ceiling_steady_ms when lower)."},
    {"min_window_horizon_s", duration_field(&RsfcParams::min_window_horizon, kSecond, {1, 3'600}),
     "Sliding window over which min(d) is taken: long enough to have seen an almost empty "
     "buffer, short enough for clock drift and route changes to age out."},
    {"tbuff_filter_ms", duration_field(&RsfcParams::tbuff_filter, kMilli, {0, 10'000}),
     "Short windowed minimum on t_buff samples, so that a link outage (one late packet) is not "
     "taken for a standing queue. 0 = no filter."},
    {"growth_per_rtt", real_field(&RsfcParams::growth_per_rtt, {0, 4, true, false}),
     "Slow state: the window grows by this fraction per RTT while t_buff stays low."},
    {"fast_target", real_field(&RsfcParams::fast_target, {0, 2}),
     "Fast state (t_buff > T): window = rate x (RTT + this x T): one bandwidth-delay product "
     "plus a small standing queue that keeps the uplink busy."},
    {"min_refresh_s", duration_field(&RsfcParams::min_refresh, kSecond, {0, 3'600}),
     "Every this many seconds of the gateway clock all flows drain briefly (together, so that "
     "one phone's buffer really empties) to re-measure min(d); keep it below "
     "min_window_horizon_s. 0 = never. After a flow's first drain, a boundary is skipped when "
     "its buffer emptied on its own within the period (timestamps with a tick of "
     "rsfc.tuning.fine_tick_ms or finer, minimum not risen since): the drain would only cost "
     "throughput."},
    {"path_check_ms", duration_field(&RsfcParams::path_check, kMilli, {0, 60'000}),
     "A longer path (route change, handover) reads like a standing queue in t_buff. At a "
     "scheduled drain that does not empty the buffer, if t_buff stays above T without its floor "
     "falling for this long while the flow's data arrives at less than "
     "rsfc.tuning.path_foreign_rate x its rate (a queue of its own would drain at the link's "
     "rate), the delay is taken as path: min(d) is raised by it. 0 = never (min(d) only ages out "
     "over min_window_horizon_s)."},
    {"initial_window_bytes", uint_field(&RsfcParams::initial_window_bytes, 0, kMaxWindowBytes),
     "Before a flow has estimates the window is clamped to max(this, "
     "rsfc.tuning.startup_growth x what is in flight without the flow's own queue): it never "
     "holds back a sender in slow start, but keeps the advertised right edge (which can never be "
     "pulled back) within reach of the first real clamp. It holds from the handshake on: an rsfc "
     "knob also lowers the SYN's or SYN-ACK's window (unscaled) travelling its way, and the ACKs "
     "before the flow's first payload that way (while their sender has sent at most 64 KB the "
     "other way), to this. 0 = 65535 bytes (a handshake's window is then never lowered); "
     "otherwise at least min_window_bytes."},
    {"per_subscriber", bool_field(&RsfcParams::per_subscriber),
     "The regulated uploads of one subscriber address fill one uplink buffer: with true they "
     "share one delivered rate (per rsfcd worker: rsfcd-iptables.sh's default subscriber "
     "balancing keeps all flows of a phone on one worker, -b kernel / --queue-balance does not), "
     "and each flow's window is sized on its share of it instead of on its own windowed maximum, "
     "which overstates the share and makes several uploads keep a queue between them. The same "
     "shared state hands a new flow of the phone (a download opened behind its upload, whose "
     "handshake then gives no clock) the TCP timestamp clock its other flows measured."},
    {"idle_law", bool_field(&RsfcParams::idle_law),
     "A phone that sends no TCP timestamps gives rsfc one delay, a round trip through both of "
     "its queues, so a download's queue reads as the upload's. With true (and per_subscriber), "
     "its upload steps instead on how long its uplink sat idle, read from every packet the "
     "phone sends, whenever those come evenly enough to tell; while it does, its downloads' "
     "round trip holds their own queue alone, to 30 ms, and they are paced on the gateway's "
     "clock (with pacing). Lab: 3G without timestamps, phone's p95 under both 341 -> 246 ms "
     "(lab/EXPERIMENTS.md Q57). Phones with timestamps are not affected."},
    {"share_equalize", real_field(&RsfcParams::share_equalize, {0, 1}),
     "How far each flow's share is pulled toward an equal split among the subscriber's uploads "
     "that use their windows: 0 = keep the shares as they are, 1 = equal."},
    {"tuning", section_field(kRsfcTuningFields, kSelf, true),
     "rsfc.tuning, experimental: the control law's details. Not for operators: the defaults "
     "are what the lab and the simulation were measured with (lab/EXPERIMENTS.md); change them "
     "only to run an experiment, e.g. rsfc: {tuning: {probe_below: 0.3}}. Reloadable on SIGHUP "
     "like the rest."},
};

const FieldTable<DrwaParams> kDrwaFields = {
    {"alpha", real_field(&DrwaParams::alpha, {0, 1, false, true}),
     "cwnd_est smoothing (published default 7/8)."},
    {"lambda", real_field(&DrwaParams::lambda, {0, 100, true, false}),
     "rwnd's multiple of the estimate (published default 3)."},
    {"interval_floor_ms", duration_field(&DrwaParams::interval_floor, kMilli, {1, 10'000}),
     "\"Once per RTT\" never more often than this."},
    {"rtt_min_horizon_s", duration_field(&DrwaParams::rtt_min_horizon, kSecond, {0, 86'400}),
     "RTT_min ages out after this many seconds; 0 = kept for the flow's life as published "
     "(DRWA keeps about (lambda - 1) x RTT_min of queue, which an aging minimum would learn and "
     "ratchet up)."},
};

const FieldTable<PacingParams> kPacingFields = {
    {"enabled", bool_field(&PacingParams::enabled),
     "true: the gateway holds a download's data and releases it no faster than gain x the rate "
     "at which the phone has been receiving it (timed on the phone's TCP timestamps), so that "
     "the server's bursts wait here and not in the base station's downlink buffer, where the "
     "phone's other traffic (its uploads' ACKs, a page it loads) would queue behind them. Needs "
     "downlink.policy rsfc; paces only flows its regulator steers (timestamps, past their "
     "startup). A held packet waits in the kernel's queue: count it in queue.maxlen. Turning "
     "it on takes a restart (its state, 144 bytes per flows.regulated_max, is reserved "
     "at start); turning it off, or changing the keys below, applies on SIGHUP."},
    {"gain", real_field(&PacingParams::gain, {1, 4, true, false}),
     "Release rate = this x the phone's receive rate (the windowed maximum of its samples). "
     "Above 1, so that a link that speeds up is followed (by this factor per sample)."},
    {"max_hold_ms", duration_field(&PacingParams::max_hold, kMilli, {1, 1'000}),
     "No packet is held longer than this."},
    {"sample_ms", duration_field(&PacingParams::sample, kMilli, {1, 1'000}),
     "A receive-rate sample spans at least this much of the phone's clock."},
    {"horizon_s", duration_field(&PacingParams::horizon, kSecond, {0.1, 60}),
     "The receive rate is the maximum of the samples over this."},
    {"burst_bytes", uint_field(&PacingParams::burst_bytes, 0, 1'000'000),
     "Bytes of data that may leave back to back after the pacer has been idle (as fq's "
     "quantum: two full-sized segments); what follows is spaced. A download whose window is "
     "a few segments then waits only for the link, not for the pacer as well."},
    {"next_to_upload_only", bool_field(&PacingParams::next_to_upload_only),
     "true: pace a download only while its phone runs a bulk upload: uploads that the uplink "
     "knob's rsfc regulates (rsfc.per_subscriber) delivered data within the last second, and "
     "8 KB or more in this second and the two before or one filled its window (a request, a "
     "keepalive or a control connection does neither). The swing pacing breaks needs such an "
     "upload; a download alone is left to its windows, where the pacer, which follows a link "
     "that speeds up by gain per sample, would cost it rate."},
};

const FieldTable<DirectionParams> kDirectionFields = {
    {"policy", name_field(&DirectionParams::policy, kPolicyNames),
     "What the knob does:\n"
     "- off: nothing, the windows pass untouched.\n"
     "- observe: track and export metrics, never modify.\n"
     "- static: clamp the window to static_window_bytes (what Android does with tcp_rmem_max).\n"
     "- rsfc: Receiver-Side Flow Control (see rsfc below). On the uplink it keeps the phone's "
     "uplink buffer short; on the downlink it keeps the download's queue in the downlink "
     "buffer short, timed on the phone's own clock (TCP timestamps; for a phone without them "
     "on the gateway's round trip, which holds both of its queues: "
     "rsfc.tuning.downlink_round_trip), with the same rsfc keys (threshold_ms, "
     "growth_per_rtt, fast_target, ...).\n"
     "- drwa, downlink only: Dynamic Receive Window Adjustment (see drwa below).\n"
     "Write off quoted if other tools read this file: PyYAML (YAML 1.1) reads a bare off as the "
     "boolean false. rsfcd accepts both spellings, but not false or no."},
    {"static_window_bytes",
     uint_field(&DirectionParams::static_window_bytes, kMinWindowFloor, kMaxWindowBytes),
     "The clamp when policy is static, at least min_window_bytes then. The upper end, "
     "65535 x 2^14, is the largest window TCP can advertise."},
};

const FieldTable<Config> kQueueFields = {
    {"maxlen", uint_field(&Config::queue_maxlen, 1, kU32Max), "Packets the kernel holds for us."},
    {"socket_buffer_bytes", uint_field(&Config::socket_rcvbuf, 64 << 10, 1 << 30),
     "The netlink socket's receive buffer."},
    {"batch", uint_field(&Config::batch_size, 1, 65'536), "Packets drained per wakeup at most."},
};

const FieldTable<Config> kFlowsFields = {
    {"max", uint_field(&Config::flows_max, 1, kU32Max),
     "Flows tracked at most, shared out between the queues' workers: each gets flows.max / "
     "queues (rounded up), which must be at least 1 and at most 2^31 (what its flow table can "
     "index). Memory for every flow is reserved at start: flows.max x the size of a flow (about "
     "240 bytes), with the regulators (flows.regulated_max), must fit in the machine's physical "
     "memory. Restart-only."},
    {"regulated_max", uint_field(&Config::regulated_max, 1, kU32Max),
     "Regulators per knob at most, shared out between the queues' workers like flows.max. A "
     "flow takes one of its knob's regulators when the knob begins to steer it (uplink, under "
     "rsfc or observe: at its first payload from the subscriber; downlink, under rsfc, drwa or "
     "observe: at its first payload to the subscriber) and gives it back when it ends. A flow "
     "that finds all of them taken passes that knob untouched for its life, counted in "
     "rsfcd_regulator_pool_full_total (rsfcd_regulator_pool_used: regulators in use). Memory for "
     "all is reserved at start: flows.regulated_max x about 5.0 KB (a regulator of each knob "
     "and the subscriber's shared uplink state). Restart-only."},
    {"idle_timeout_s",
     duration_field([](auto& c) -> auto& { return c.params.idle_timeout; }, kSecond,
                    {1, 7 * 86'400}),
     "Forget a flow idle this long (7 days at most)."},
    {"closed_timeout_s",
     duration_field([](auto& c) -> auto& { return c.params.closed_timeout; }, kSecond, {1, 3'600}),
     "After FIN/RST both ways, keep the flow this long for late ACKs."},
    {"embryonic_timeout_s",
     duration_field([](auto& c) -> auto& { return c.params.embryonic_timeout; }, kSecond,
                    {1, 3'600}),
     "Forget a flow whose handshake never completed after this long."},
    {"max_per_subscriber",
     uint_field(
         [](auto& c) -> auto& { return c.params.max_flows_per_subscriber; }, 0, kU32Max),
     "Flows one subscriber address may hold in a worker's table (0 = no cap), so that one "
     "subscriber cannot push out another's flows. At the cap a new flow of the subscriber "
     "takes the place of its own least recently seen closed or embryonic flow; if it has only "
     "established flows the new one passes untracked (unregulated) until one of them ends. "
     "Counted in rsfcd_flows_subscriber_cap_total."},
    {"adopt_from_conntrack",
     bool_field([](auto& c) -> auto& { return c.params.adopt_from_conntrack; }),
     "A flow first seen mid-stream (older than this rsfcd: a restart, an upgrade, an eviction) "
     "has no known window scale. With true, rsfcd asks the kernel's connection tracking for the "
     "scales its handshake announced and regulates the flow from then on; with one queue it "
     "also reads the whole table at start-up. Needs conntrack active in the gateway's network "
     "namespace (any conntrack match in its rules). Counted in rsfcd_flows_adopted_total and "
     "rsfcd_conntrack_lookups_total. false leaves such flows unregulated."},
};

const FieldTable<Config> kMetricsFields = {
    {"listen",
     leaf(read_listen, show_listen,
          "\"address:port\" with an IPv4 address, \"[ipv6]:port\" (e.g. \"[::1]:9477\"), or \"\" "
          "to disable the endpoint; port 1 .. 65535"),
     "Host names are not accepted. Restart-only."},
};

const FieldTable<Config> kLogFields = {
    {"level", name_field(&Config::log_level, kLogLevelNames), ""},
};

const FieldTable<Config> kTopFields = {
    {"queues",
     leaf(read_queues, show_queues,
          "a list of queue numbers 0 .. 65535, no duplicates, at least one"),
     "NFQUEUE numbers to serve, one worker thread per queue. They must match the iptables rules "
     "(conf/rsfcd-iptables.sh), e.g.\n"
     "  iptables-legacy -A FORWARD -p tcp -j NFQUEUE --queue-num 0 --queue-bypass\n"
     "Restart-only."},
    {"subscriber_networks",
     leaf(read_networks, show_networks,
          "a list of \"address/length\" prefixes, IPv4 or IPv6, no duplicates"),
     "Which side of a flow is the subscriber (the phone): addresses inside these prefixes. A bare "
     "address is a host prefix; host bits set after the length are an error (they usually mean "
     "a typo in the length). At least one is required unless uplink.policy and downlink.policy "
     "are both off: without it rsfcd cannot tell uplink from downlink."},
    {"uplink",
     section_field(
         kDirectionFields, [](auto& c) -> auto& { return c.params.uplink; }),
     "The uplink knob: the window in ACKs travelling TO subscribers, i.e. how much the phone may "
     "keep in flight into its own (bloated) uplink buffer."},
    {"downlink",
     section_field(
         kDirectionFields, [](auto& c) -> auto& { return c.params.downlink; }),
     "The downlink knob: the window in ACKs travelling FROM subscribers, i.e. how much the server "
     "may keep in flight into the downlink buffer."},
    {"min_window_bytes",
     uint_field(
         [](auto& c) -> auto& { return c.params.min_window_bytes; }, kMinWindowFloor,
         kMaxWindowBytes),
     "No policy ever lowers a window below this many bytes (below 2 segments, senders stall on "
     "delayed ACKs). The lower end is 2 x 536, the smallest default MSS."},
    {"flows", section_field(kFlowsFields, kSelf), "Per-flow state."},
    {"queue", section_field(kQueueFields, kSelf),
     "The netlink side of each NFQUEUE. All restart-only."},
    {"metrics", section_field(kMetricsFields, kSelf),
     "Prometheus metrics over HTTP (GET /metrics)."},
    {"log", section_field(kLogFields, kSelf), "Logs go to stderr."},
    {"decision_log",
     string_field(&Config::decision_log, "a file path (quote it), or \"\" for none"),
     "Write one JSON line per control decision (rsfc and drwa) to this file. Applies on SIGHUP, "
     "which also reopens the file (log rotation)."},
    {"decision_log_max_bytes", uint_field(&Config::decision_log_max_bytes, 0, uint64_t{1} << 50),
     "The decision log stops growing at this many bytes (whole lines; the records left out are "
     "counted in rsfcd_decision_log_dropped_total{reason=\"size_cap\"}) until it is rotated: "
     "after SIGHUP the reopened file is written to again. 0 = no limit. Applies on SIGHUP."},
    {"rsfc",
     section_field(
         kRsfcFields, [](auto& c) -> auto& { return c.params.rsfc; }),
     "The RSFC controller, used when uplink.policy or downlink.policy is rsfc. T is the "
     "threshold on the filtered buffering delay (uplink: t_buff; downlink: the download's "
     "queue in the downlink buffer): above it the controller clamps the window to about one "
     "bandwidth-delay product (fast state), below it the window grows (slow state)."},
    {"drwa",
     section_field(
         kDrwaFields, [](auto& c) -> auto& { return c.params.drwa; }),
     "DRWA, used when downlink.policy is drwa. Once per RTT:\n"
     "  cwnd_est <- alpha x cwnd_est + (1 - alpha) x bytes received in the last RTT\n"
     "  rwnd     <- lambda x (RTT_min / RTT_est) x cwnd_est"},
    {"pacing",
     section_field(
         kPacingFields, [](auto& c) -> auto& { return c.params.pacing; }),
     "Downlink pacing (docs/DESIGN.md §4b), for downloads the downlink knob's rsfc steers."},
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

// The flow table indexes its hash buckets (kBucketsPerFlow per flow, a power of two in all)
// with 32 bits: at most 2^31 flows per worker.
constexpr uint64_t kMaxFlowsPerWorker = (uint64_t{1} << 32) / FlowTable::kBucketsPerFlow;

// The machine's physical memory in bytes; 0 if unknown.
uint64_t physical_memory() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGESIZE);
  return pages > 0 && page_size > 0
             ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size)
             : 0;
}

std::string format_bytes(uint64_t bytes) {
  std::array<char, 32> buf{};
  const double gib = static_cast<double>(bytes) / static_cast<double>(1ULL << 30);
  if (gib >= 1024) {
    std::snprintf(buf.data(), buf.size(), "%.1f TiB", gib / 1024);
  } else {
    std::snprintf(buf.data(), buf.size(), "%.1f GiB", gib);
  }
  return buf.data();
}

// flows.max is shared out between the queues' workers, each of which reserves its flow table
// at start: every worker must get at least one flow, its table must be indexable, and all of
// them must fit in the machine's memory.
void check_flows(const Reader& r, const Config& c) {
  const uint64_t queues = c.queues.size();
  const uint64_t per_worker = flows_per_worker(c);
  const int line = r.line_of("flows.max").value_or(r.line_of("queues").value_or(0));
  const std::string got = " (got " + std::to_string(c.flows_max) + ")";
  if (c.flows_max < queues) {
    r.fail(line, "flows.max",
           "must be at least the number of queues (" + std::to_string(queues) +
               "): each queue's worker gets flows.max / " + std::to_string(queues) + " flows" +
               got);
  }
  if (per_worker > kMaxFlowsPerWorker) {
    r.fail(line, "flows.max",
           std::to_string(per_worker) + " flows per queue's worker, more than its flow table " +
               "can index (" + std::to_string(kMaxFlowsPerWorker) + "); add queues or lower it" +
               got);
  }
  const uint64_t per_regulated = Engine::bytes_per_regulated_flow() +
                                 (c.params.pacing.enabled ? Engine::bytes_per_paced_flow() : 0);
  const uint64_t reserved = reserved_bytes(c);
  if (const uint64_t memory = physical_memory(); memory != 0 && reserved > memory) {
    r.fail(line, "flows.max",
           "the flow tables and regulators would reserve " + format_bytes(reserved) + " (" +
               std::to_string(Engine::bytes_per_flow()) + " bytes per flow, " +
               std::to_string(per_regulated) + " per flows.regulated_max), " +
               "more than this machine's memory (" + format_bytes(memory) + ")" + got);
  }
}

void check_config(const Reader& r, const Config& c) {
  check_flows(r, c);
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

  // Set in the file with another downlink policy: a contradiction (by default it only does
  // nothing there).
  if (c.params.pacing.enabled && c.params.downlink.policy != Policy::kRsfc &&
      r.line_of("pacing.enabled")) {
    r.fail(r.line_of("pacing.enabled").value_or(0), "pacing.enabled",
           "needs downlink.policy rsfc: the pacer runs on its regulator's clock and state (got "
           "downlink.policy " +
               std::string(to_string(c.params.downlink.policy)) + ")");
  }

  const RsfcParams& rs = c.params.rsfc;
  // Set explicitly (the default under a raised min_window_bytes only means the floor: no
  // window is ever written below min_window_bytes).
  if (rs.initial_window_bytes != 0 && rs.initial_window_bytes < c.params.min_window_bytes &&
      r.line_of("rsfc.initial_window_bytes")) {
    r.fail(r.line_of("rsfc.initial_window_bytes").value_or(0), "rsfc.initial_window_bytes",
           "must be 0 (65535 bytes) or at least min_window_bytes (" +
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
  // Skip a node's tag (!!str) and the blanks after it (anchors were refused before).
  auto blank = [&](size_t k) { return at(k) == ' ' || at(k) == '\t'; };
  auto end_of_line = [&](size_t k) { return at(k) == '\n' || at(k) == '\r'; };
  while (at(i) == '!') {
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

// Reads the stream as events, before any node is built: counts the documents (only the first
// two are read), notices a parser that makes no progress between documents, and finds the
// first anchor (&name; an alias, *name, needs one before it). Anchors are refused: each alias
// is a reference the tree walks would follow again, so nested aliases grow the work 10x per
// level (a 501-byte file held --check-config for 14 s); no configuration needs them.
class DocumentScan : public YAML::EventHandler {
 public:
  int documents = 0;
  bool stuck = false;
  int second_line = 0;  // 1-based line where the second document starts
  std::optional<std::pair<YAML::Mark, std::string>> anchor;  // the first one

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
  void OnAnchor(const YAML::Mark& mark, const std::string& name) override {
    if (!anchor) anchor.emplace(mark, name);
  }

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
    DocumentScan scan;
    for (int i = 0; i < 2 && parser.HandleNextDocument(scan); ++i) {
    }
    if (scan.stuck) r.fail(scan.second_line, "", "YAML syntax error: unexpected character");
    if (scan.documents > 1) {
      r.fail(scan.second_line, "", "more than one YAML document (a second '---' or a '...')");
    }
    if (scan.anchor) {
      r.fail(
          scan.anchor->first.line + 1, "",
          "YAML anchors and aliases (&name, *name) are not accepted: write the value out (got &" +
              scan.anchor->second + ")");
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

namespace {

// The top of the printed configuration.
constexpr std::string_view kHeader =
    "rsfcd configuration, printed by `rsfcd --print-config` from the tables that read it "
    "(src/io/config.cpp). Every key is shown with what it accepts, set to its default unless "
    "its comment says otherwise. `rsfcd --print-config --tuning` adds the experimental block "
    "rsfc.tuning.\n"
    "\n"
    "rsfcd reads this file at start-up and again on SIGHUP. Reading rules (strict on purpose; a "
    "mistake is reported as ONE line,\n"
    "  <file>:<line>: <dotted.key>: <what is wrong> (got <value>)\n"
    "and the file is refused as a whole; on SIGHUP the running configuration stays):\n"
    "- An unknown key, at any level, is an error (a typo never silently means \"default\").\n"
    "- A key given twice in the same mapping is an error.\n"
    "- Byte sizes, counts and queue numbers are plain decimal integers: no sign, no fraction, no "
    "exponent, no hex, no quotes, no leading zero (YAML 1.1 reads 0755 as octal). Digit "
    "separators are allowed: 1_000_000.\n"
    "- Durations (keys ending in _s or _ms) are numbers and may have a fraction: 1.5.\n"
    "- Strings may be quoted or not, but a quoted value must close on its own line, and a string "
    "key refuses the bare YAML 1.1 boolean words (yes/no/on/off/true/false...): quote them if you "
    "mean them.\n"
    "- One document only; UTF-8 text; no % directives other than %YAML/%TAG before '---'.\n"
    "- No anchors or aliases (&name, *name): write every value out.\n"
    "- A key with no value (`min_window_bytes:`) is an error; a SECTION with no value (every key "
    "under `rsfc:` commented out) means \"all defaults\".\n"
    "- Keys left out take their defaults.\n"
    "\n"
    "Restart-only keys (they take effect at the next start; a SIGHUP that changes them is "
    "reported with a warning): queues, queue.*, flows.max, flows.regulated_max, metrics.listen. "
    "Everything else applies on SIGHUP.";

}  // namespace

Config example_config() {
  Config c;
  c.params.subscriber_networks = {Prefix::parse("198.18.0.0/16").value(),
                                  Prefix::parse("2001:2::/48").value()};
  // What the lab's suite found best over every link (docs/RESULTS.md §13): rsfc on both
  // knobs, each keeping at most 30 ms of queue next to an upload (a download alone keeps
  // rsfc.tuning.threshold_ceiling_download_alone_ms, 80), and a download paced while its phone
  // uploads. Code defaults stay off: a file that leaves a knob out does not regulate it.
  c.params.uplink.policy = Policy::kRsfc;
  c.params.downlink.policy = Policy::kRsfc;
  c.params.rsfc.threshold_ceiling = 30 * kMilli;
  c.params.pacing.enabled = true;
  c.params.pacing.next_to_upload_only = true;
  // The pacer's state (Engine::bytes_per_paced_flow) for every regulator slot: 2,000 slots
  // fewer per knob keep a million flows within 512 MiB (docs/RESULTS.md §9).
  c.regulated_max = 56'000;
  return c;
}

std::string format_config(const Config& shown, bool tuning) {
  Printer p(tuning);
  p.comment(kHeader);
  const Config defaults;
  for (const Field<Config>& f : kTopFields) f.print(p, f, shown, defaults);
  return p.take();
}

uint32_t flows_per_worker(const Config& c) {
  const uint64_t queues = std::max<size_t>(1, c.queues.size());
  return static_cast<uint32_t>((uint64_t{c.flows_max} + queues - 1) / queues);
}

static_assert(Config{}.regulated_max == Engine::kDefaultRegulatedMax);

uint64_t reserved_bytes(const Config& c) {
  const uint64_t queues = c.queues.size();
  const uint64_t per_worker = flows_per_worker(c);
  const uint64_t regulated = std::min<uint64_t>(regulated_per_worker(c), per_worker);
  const uint64_t per_regulated = Engine::bytes_per_regulated_flow() +
                                 (c.params.pacing.enabled ? Engine::bytes_per_paced_flow() : 0);
  return per_worker * queues * Engine::bytes_per_flow() + regulated * queues * per_regulated;
}

uint32_t regulated_per_worker(const Config& c) {
  const uint64_t queues = std::max<size_t>(1, c.queues.size());
  return static_cast<uint32_t>((uint64_t{c.regulated_max} + queues - 1) / queues);
}

std::vector<std::string> restart_only_differences(const Config& running, const Config& loaded) {
  std::vector<std::string> keys;
  if (running.queues != loaded.queues) keys.emplace_back("queues");
  if (running.queue_maxlen != loaded.queue_maxlen) keys.emplace_back("queue.maxlen");
  if (running.socket_rcvbuf != loaded.socket_rcvbuf) keys.emplace_back("queue.socket_buffer_bytes");
  if (running.batch_size != loaded.batch_size) keys.emplace_back("queue.batch");
  if (running.flows_max != loaded.flows_max) keys.emplace_back("flows.max");
  if (running.regulated_max != loaded.regulated_max) keys.emplace_back("flows.regulated_max");
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
