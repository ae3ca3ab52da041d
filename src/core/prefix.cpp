// IpAddr and Prefix text conversions (start-up / config path; may allocate).
#include <arpa/inet.h>

#include <string>

#include "rsfc/core/types.h"

namespace rsfc {
namespace {

// inet_pton needs a NUL-terminated string; longest valid text is INET6_ADDRSTRLEN - 1.
bool to_cstr(std::string_view text, char (&buf)[INET6_ADDRSTRLEN]) {
  if (text.empty() || text.size() >= sizeof buf) return false;
  text.copy(buf, text.size());
  buf[text.size()] = '\0';
  return true;
}

void set_error(std::string* error, std::string msg) {
  if (error) *error = std::move(msg);
}

}  // namespace

std::optional<IpAddr> IpAddr::parse(std::string_view text) {
  char buf[INET6_ADDRSTRLEN];
  if (!to_cstr(text, buf)) return std::nullopt;
  IpAddr a;
  if (text.find(':') != std::string_view::npos) {
    if (inet_pton(AF_INET6, buf, a.bytes.data()) != 1) return std::nullopt;
    a.family = 6;
  } else {
    // glibc's inet_pton accepts only the dotted-quad form (no octal, hex or short forms).
    if (inet_pton(AF_INET, buf, a.bytes.data()) != 1) return std::nullopt;
    a.family = 4;
  }
  return a;
}

std::string IpAddr::to_string() const {
  char buf[INET6_ADDRSTRLEN];
  if (family != 4 && family != 6) return "<unset>";
  if (!inet_ntop(family == 4 ? AF_INET : AF_INET6, bytes.data(), buf, sizeof buf)) return "?";
  return buf;
}

std::optional<Prefix> Prefix::parse(std::string_view text, std::string* error) {
  const size_t slash = text.find('/');
  const std::string_view addr_text = text.substr(0, slash);
  auto addr = IpAddr::parse(addr_text);
  if (!addr) {
    set_error(error, "invalid address '" + std::string(addr_text) + "' in prefix '" +
                         std::string(text) + "'");
    return std::nullopt;
  }
  const unsigned max_len = addr->family == 4 ? 32 : 128;
  unsigned len = max_len;
  if (slash != std::string_view::npos) {
    const std::string_view len_text = text.substr(slash + 1);
    if (len_text.empty() || len_text.size() > 3) {
      set_error(error, "invalid prefix length in '" + std::string(text) + "'");
      return std::nullopt;
    }
    len = 0;
    for (char c : len_text) {
      if (c < '0' || c > '9') {
        set_error(error, "invalid prefix length in '" + std::string(text) + "'");
        return std::nullopt;
      }
      len = len * 10 + static_cast<unsigned>(c - '0');
    }
    if (len > max_len) {
      set_error(error, "prefix length " + std::to_string(len) + " exceeds " +
                           std::to_string(max_len) + " in '" + std::string(text) + "'");
      return std::nullopt;
    }
  }
  Prefix p;
  p.addr = *addr;
  p.length = static_cast<uint8_t>(len);
  // Clear host bits and refuse if any were set.
  bool host_bits = false;
  for (size_t i = 0; i < p.addr.bytes.size(); ++i) {
    const size_t bit0 = i * 8;
    uint8_t keep;
    if (bit0 + 8 <= len) {
      keep = 0xff;
    } else if (bit0 >= len) {
      keep = 0;
    } else {
      keep = static_cast<uint8_t>(0xff << (8 - (len - bit0)));
    }
    if (p.addr.bytes[i] & static_cast<uint8_t>(~keep)) host_bits = true;
    p.addr.bytes[i] &= keep;
  }
  if (host_bits) {
    set_error(error, "host bits set in '" + std::string(text) + "' (network is " + p.to_string() +
                         "; check the length)");
    return std::nullopt;
  }
  return p;
}

bool Prefix::contains(const IpAddr& a) const {
  if (a.family != addr.family || addr.family == 0) return false;
  const size_t full = length / 8;
  for (size_t i = 0; i < full; ++i) {
    if (a.bytes[i] != addr.bytes[i]) return false;
  }
  const unsigned rest = length % 8;
  if (rest == 0) return true;
  const auto mask = static_cast<uint8_t>(0xff << (8 - rest));
  return (a.bytes[full] & mask) == addr.bytes[full];
}

std::string Prefix::to_string() const {
  return addr.to_string() + "/" + std::to_string(length);
}

}  // namespace rsfc
