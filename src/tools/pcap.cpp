#include "rsfc/tools/pcap.h"

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstring>

namespace rsfc::pcap {

namespace {

constexpr uint32_t kMagicMicro = 0xa1b2c3d4;
constexpr uint32_t kMagicNano = 0xa1b23c4d;
constexpr uint32_t kMagicKuznetzov = 0xa1b2cd34;  // "modified" pcap, 24-byte record headers
constexpr uint32_t kPcapngBlock = 0x0a0d0d0a;     // section header block type (palindrome)

constexpr uint16_t kEtherIpv4 = 0x0800;
constexpr uint16_t kEtherIpv6 = 0x86dd;
constexpr size_t kEthernetHeader = 14;
constexpr size_t kSllHeader = 16;
constexpr size_t kSll2Header = 20;
constexpr size_t kVlanTag = 4;
constexpr uint8_t kMaxVlanTags = 8;

uint32_t le32(const uint8_t* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}
uint32_t be32(const uint8_t* p) {
  return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | uint32_t{p[3]};
}
uint16_t be16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] << 8 | p[1]);
}
uint16_t le16(const uint8_t* p) {
  return static_cast<uint16_t>(p[1] << 8 | p[0]);
}

uint32_t rd32(const uint8_t* p, bool big) {
  return big ? be32(p) : le32(p);
}
uint16_t rd16(const uint8_t* p, bool big) {
  return big ? be16(p) : le16(p);
}

std::string hex32(uint32_t v) {
  char b[16];
  std::snprintf(b, sizeof(b), "0x%08" PRIx32, v);
  return b;
}

bool is_vlan_tpid(uint16_t t) {
  return t == 0x8100 || t == 0x88a8 || t == 0x9100 || t == 0x9200;
}

// `type` is the frame's ethertype/protocol field and `off` where its payload starts; follows
// 802.1Q/802.1ad tags (TCI, then the next ethertype) to the IP packet.
LinkResult follow_ethertype(std::span<const uint8_t> frame, uint16_t type, size_t off) {
  LinkResult r;
  while (is_vlan_tpid(type)) {
    if (r.vlan_tags == kMaxVlanTags) {
      r.error = LinkError::kTooManyVlanTags;
      return r;
    }
    if (frame.size() < off + kVlanTag) {
      r.error = LinkError::kTruncatedLinkHeader;
      return r;
    }
    type = be16(frame.data() + off + 2);
    off += kVlanTag;
    ++r.vlan_tags;
  }
  r.ethertype = type;
  if (type != kEtherIpv4 && type != kEtherIpv6) {
    r.error = LinkError::kNotIp;
    return r;
  }
  r.ip = frame.subspan(off);
  return r;
}

// Drops link-layer padding after the IP packet (Ethernet's 60-byte minimum frame, FCS) so the
// engine sees exactly what NFQUEUE would hand it. A stated length beyond the captured bytes
// (a cut record) is left alone: the engine decides what to do with it.
std::span<const uint8_t> trim_to_ip_length(std::span<const uint8_t> ip) {
  if (ip.empty()) return ip;
  const unsigned version = ip[0] >> 4;
  size_t stated = 0;
  if (version == 4 && ip.size() >= 4) {
    stated = be16(ip.data() + 2);
    if (stated < 20) return ip;
  } else if (version == 6 && ip.size() >= 6) {
    const size_t plen = be16(ip.data() + 4);
    if (plen == 0) return ip;  // jumbogram or bogus: not ours to judge
    stated = 40 + plen;
  } else {
    return ip;
  }
  return stated < ip.size() ? ip.first(stated) : ip;
}

}  // namespace

const char* linktype_name(uint32_t lt) {
  switch (lt) {
    case linktype::kEthernet:
      return "ethernet";
    case linktype::kRawDlt12:
    case linktype::kRawDlt14:
    case linktype::kRaw:
      return "raw";
    case linktype::kLinuxSll:
      return "linux_sll";
    case linktype::kLinuxSll2:
      return "linux_sll2";
    default:
      return "unknown";
  }
}

bool linktype_supported(uint32_t lt) {
  return std::strcmp(linktype_name(lt), "unknown") != 0;
}

const char* to_string(LinkError e) {
  switch (e) {
    case LinkError::kNone:
      return "none";
    case LinkError::kTruncatedLinkHeader:
      return "truncated_link_header";
    case LinkError::kNotIp:
      return "not_ip";
    case LinkError::kTooManyVlanTags:
      return "too_many_vlan_tags";
    case LinkError::kCount:
      break;
  }
  return "?";
}

Expected<FileHeader> parse_file_header(std::span<const uint8_t> b) {
  if (b.size() < 4) {
    return Error::msg("not a pcap file: " + std::to_string(b.size()) +
                      " bytes, shorter than a pcap file header (24)");
  }
  const uint32_t magic = le32(b.data());
  if (magic == kPcapngBlock) {
    return Error::msg(
        "pcapng is not supported: convert it to classic pcap first, e.g. "
        "`tcpdump -r in.pcapng -w out.pcap` or `editcap -F pcap in.pcapng out.pcap`");
  }
  if (b[0] == 0x1f && b[1] == 0x8b) {
    return Error::msg("the file is gzip-compressed: decompress it first (gunzip)");
  }
  FileHeader h;
  if (magic == kMagicMicro || magic == kMagicNano) {
    h.big_endian = false;
  } else if (be32(b.data()) == kMagicMicro || be32(b.data()) == kMagicNano) {
    h.big_endian = true;
  } else if (magic == kMagicKuznetzov || be32(b.data()) == kMagicKuznetzov) {
    return Error::msg(
        "\"modified\" (Kuznetzov) pcap is not supported: convert it with "
        "`editcap -F pcap in out.pcap`");
  } else {
    return Error::msg("not a pcap file (magic " + hex32(magic) + ")");
  }
  h.nanosecond = rd32(b.data(), h.big_endian) == kMagicNano;
  if (b.size() < kFileHeaderLen) {
    return Error::msg("pcap file header cut short: " + std::to_string(b.size()) + " of " +
                      std::to_string(kFileHeaderLen) + " bytes");
  }
  h.version_major = rd16(b.data() + 4, h.big_endian);
  h.version_minor = rd16(b.data() + 6, h.big_endian);
  if (h.version_major != 2) {
    return Error::msg("unsupported pcap version " + std::to_string(h.version_major) + "." +
                      std::to_string(h.version_minor) + " (only 2.x exists)");
  }
  h.snaplen = rd32(b.data() + 16, h.big_endian);
  h.linktype = rd32(b.data() + 20, h.big_endian) & 0xffffu;
  if (!linktype_supported(h.linktype)) {
    return Error::msg("unsupported link type " + std::to_string(h.linktype) +
                      " (supported: 1 ethernet, 12/14/101 raw IP, 113 linux cooked, 276 linux "
                      "cooked v2)");
  }
  return h;
}

Expected<RecordHeader> parse_record_header(std::span<const uint8_t> b, const FileHeader& fh) {
  if (b.size() < kRecordHeaderLen) {
    return Error::msg("record header cut short: " + std::to_string(b.size()) + " of " +
                      std::to_string(kRecordHeaderLen) + " bytes");
  }
  const uint32_t sec = rd32(b.data(), fh.big_endian);
  const uint32_t frac = rd32(b.data() + 4, fh.big_endian);
  RecordHeader r;
  r.caplen = rd32(b.data() + 8, fh.big_endian);
  r.len = rd32(b.data() + 12, fh.big_endian);
  const uint32_t frac_limit = fh.nanosecond ? 1'000'000'000u : 1'000'000u;
  if (frac >= frac_limit) {
    return Error::msg(std::string("timestamp ") +
                      (fh.nanosecond ? "nanoseconds " : "microseconds ") + std::to_string(frac) +
                      " out of range: the file is corrupt");
  }
  if (r.caplen > kMaxCaplen) {
    return Error::msg("captured length " + std::to_string(r.caplen) + " exceeds the maximum " +
                      std::to_string(kMaxCaplen) + ": the file is corrupt");
  }
  if (r.caplen > r.len) {
    return Error::msg("captured length " + std::to_string(r.caplen) +
                      " exceeds the original length " + std::to_string(r.len) +
                      ": the file is corrupt");
  }
  r.time =
      static_cast<Nanos>(sec) * kSecond + static_cast<Nanos>(frac) * (fh.nanosecond ? 1 : kMicro);
  return r;
}

LinkResult ip_packet(uint32_t lt, std::span<const uint8_t> frame) {
  LinkResult r;
  // Where the ethertype/protocol field sits and where the header ends.
  size_t type_at = 0, header = 0;
  switch (lt) {
    case linktype::kEthernet:
      type_at = 12, header = kEthernetHeader;
      break;
    case linktype::kLinuxSll:
      type_at = 14, header = kSllHeader;
      break;
    case linktype::kLinuxSll2:
      type_at = 0, header = kSll2Header;
      break;
    case linktype::kRawDlt12:
    case linktype::kRawDlt14:
    case linktype::kRaw:
      // No link header: the engine's own parser judges the bytes (version nibble etc.).
      if (!frame.empty()) {
        const unsigned v = frame[0] >> 4;
        r.ethertype = v == 4 ? kEtherIpv4 : v == 6 ? kEtherIpv6 : 0;
      }
      r.ip = trim_to_ip_length(frame);
      return r;
    default:
      r.error = LinkError::kNotIp;
      return r;
  }
  if (frame.size() < header) {
    r.error = LinkError::kTruncatedLinkHeader;
    return r;
  }
  r = follow_ethertype(frame, be16(frame.data() + type_at), header);
  if (r.error == LinkError::kNone) r.ip = trim_to_ip_length(r.ip);
  return r;
}

// ---- PcapReader ------------------------------------------------------------------------

Expected<PcapReader> PcapReader::open(const std::string& path) {
  PcapReader r;
  r.name_ = path;
  r.file_.reset(std::fopen(path.c_str(), "rb"));
  if (!r.file_) return Error::from_errno(errno, path);
  if (auto ok = r.init(); !ok) return ok.error();
  return r;
}

Expected<PcapReader> PcapReader::from_bytes(std::vector<uint8_t> bytes, std::string name) {
  PcapReader r;
  r.name_ = std::move(name);
  r.mem_ = std::move(bytes);
  if (auto ok = r.init(); !ok) return ok.error();
  return r;
}

Expected<void> PcapReader::init() {
  uint8_t hdr[kFileHeaderLen];
  auto n = read(hdr, sizeof(hdr));
  if (!n) return n.error();
  auto h = parse_file_header(std::span<const uint8_t>(hdr, *n));
  if (!h) return Error::msg(name_ + ": " + h.error().message);
  header_ = *h;
  return {};
}

Expected<size_t> PcapReader::read(uint8_t* dst, size_t n) {
  if (!file_) {
    const size_t k = std::min(n, mem_.size() - mem_pos_);
    if (k > 0) std::memcpy(dst, mem_.data() + mem_pos_, k);
    mem_pos_ += k;
    offset_ += k;
    return k;
  }
  const size_t k = std::fread(dst, 1, n, file_.get());
  offset_ += k;
  if (k < n && std::ferror(file_.get())) return Error::from_errno(errno, name_ + ": read");
  return k;
}

Expected<bool> PcapReader::next(Record& out) {
  if (failed_) return *failed_;
  const uint64_t at = offset_;
  auto fail = [&](const std::string& what) -> Expected<bool> {
    failed_ = Error::msg(name_ + ": record " + std::to_string(index_) + " (file offset " +
                         std::to_string(at) + "): " + what);
    return *failed_;
  };
  uint8_t hdr[kRecordHeaderLen];
  auto n = read(hdr, sizeof(hdr));
  if (!n) {
    failed_ = n.error();
    return *failed_;
  }
  if (*n == 0) return false;
  if (*n < kRecordHeaderLen) {
    return fail("record header cut short (" + std::to_string(*n) + " of " +
                std::to_string(kRecordHeaderLen) + " bytes): the capture ends inside a record");
  }
  auto rh = parse_record_header(std::span<const uint8_t>(hdr, *n), header_);
  if (!rh) return fail(rh.error().message);
  if (buf_.size() < rh->caplen) buf_.resize(rh->caplen);
  auto got = read(buf_.data(), rh->caplen);
  if (!got) {
    failed_ = got.error();
    return *failed_;
  }
  if (*got < rh->caplen) {
    return fail("packet data cut short (" + std::to_string(*got) + " of " +
                std::to_string(rh->caplen) + " bytes): the capture ends inside a record");
  }
  out.header = *rh;
  out.data = std::span<const uint8_t>(buf_.data(), rh->caplen);
  out.index = index_++;
  out.offset = at;
  return true;
}

}  // namespace rsfc::pcap
