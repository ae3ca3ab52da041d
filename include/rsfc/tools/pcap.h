// Classic pcap files (not pcapng): a bounds-checked reader for rsfc-replay.
//
// Two layers:
//  - pure decoders on byte spans (file header, record header, link layer -> IP packet), never
//    reading outside the span they are given, never allocating;
//  - PcapReader, which pulls a file (or an in-memory image) through them record by record
//    into one reused buffer.
// Both byte orders; microsecond (0xa1b2c3d4) and nanosecond (0xa1b23c4d) magic. Link types:
// Ethernet (with any number of 802.1Q / 802.1ad / QinQ tags), raw IP (DLT 12/14, LINKTYPE 101),
// Linux cooked SLL (113) and SLL2 (276).
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "rsfc/core/expected.h"
#include "rsfc/core/types.h"

namespace rsfc::pcap {

inline constexpr size_t kFileHeaderLen = 24;
inline constexpr size_t kRecordHeaderLen = 16;
// Largest caplen accepted (libpcap's own limit for every link type we read). Anything
// larger is a corrupt file, not a packet.
inline constexpr uint32_t kMaxCaplen = 262144;

// The link types this reader understands (values as stored in the file).
namespace linktype {
inline constexpr uint32_t kEthernet = 1;
inline constexpr uint32_t kRawDlt12 = 12;  // DLT_RAW on most BSDs/Linux, in old files
inline constexpr uint32_t kRawDlt14 = 14;  // DLT_RAW on OpenBSD, in old files
inline constexpr uint32_t kRaw = 101;      // LINKTYPE_RAW
inline constexpr uint32_t kLinuxSll = 113;
inline constexpr uint32_t kLinuxSll2 = 276;
}  // namespace linktype
const char* linktype_name(uint32_t lt);  // "ethernet", "raw", "linux_sll", ... or "unknown"
bool linktype_supported(uint32_t lt);

struct FileHeader {
  bool big_endian = false;  // byte order of the file (as its writer had)
  bool nanosecond = false;
  uint16_t version_major = 0, version_minor = 0;
  uint32_t snaplen = 0;
  uint32_t linktype = 0;  // low 16 bits of the field (the upper bits carry FCS info)
};

// Decodes the 24-byte file header. Errors: too short, pcapng, unknown magic, version not 2.x,
// unsupported link type. Messages are one line and say what to do where there is something.
Expected<FileHeader> parse_file_header(std::span<const uint8_t> bytes);

struct RecordHeader {
  Nanos time = 0;  // since the Unix epoch
  uint32_t caplen = 0;
  uint32_t len = 0;  // length on the wire
};

// Decodes a 16-byte record header. Errors: too short, caplen > kMaxCaplen, caplen > len,
// sub-second field out of range.
Expected<RecordHeader> parse_record_header(std::span<const uint8_t> bytes, const FileHeader& fh);

// Why a frame did not yield an IP packet.
enum class LinkError : uint8_t {
  kNone = 0,
  kTruncatedLinkHeader,  // fewer bytes than the link header (incl. VLAN tags) needs
  kNotIp,                // ethertype / protocol is neither IPv4 nor IPv6 (ARP, LLDP, ...)
  kTooManyVlanTags,      // more stacked tags than any sane network uses
  kCount
};
const char* to_string(LinkError e);

struct LinkResult {
  LinkError error = LinkError::kNone;
  std::span<const uint8_t> ip;  // the IP packet: trimmed to its stated length when the frame
                                // has padding after it; as captured when the record is cut
  uint16_t ethertype = 0;       // 0x0800 / 0x86dd (or what was found, for kNotIp)
  uint8_t vlan_tags = 0;
};

// Strips the link-layer header of a frame of link type `lt` (one that linktype_supported()).
LinkResult ip_packet(uint32_t lt, std::span<const uint8_t> frame);

struct Record {
  RecordHeader header;
  std::span<const uint8_t> data;  // caplen bytes; valid until the next call to next()
  uint64_t index = 0;             // 0-based record number
  uint64_t offset = 0;            // file offset of the record header
  bool truncated() const { return header.caplen < header.len; }
};

// Reads records one at a time. Move-only; owns its FILE (closed on destruction).
class PcapReader {
 public:
  // Opens and validates the file header.
  static Expected<PcapReader> open(const std::string& path);
  // Reads an in-memory image (tests, and pipes read fully beforehand).
  static Expected<PcapReader> from_bytes(std::vector<uint8_t> bytes, std::string name = "<memory>");

  PcapReader(PcapReader&&) noexcept = default;
  PcapReader& operator=(PcapReader&&) noexcept = default;
  PcapReader(const PcapReader&) = delete;
  PcapReader& operator=(const PcapReader&) = delete;
  ~PcapReader() = default;

  const FileHeader& header() const { return header_; }
  const std::string& name() const { return name_; }

  // Fills `out` with the next record. Returns true on a record, false at a clean end of file
  // (exactly after a whole record). Errors (a cut-off record, an absurd caplen, a read error)
  // name the record number and file offset; after an error the reader stays at the error.
  Expected<bool> next(Record& out);

 private:
  struct FileCloser {
    void operator()(std::FILE* f) const {
      if (f != nullptr) std::fclose(f);
    }
  };
  PcapReader() = default;
  // Reads up to n bytes into dst; returns how many (short only at EOF), or an error.
  Expected<size_t> read(uint8_t* dst, size_t n);
  Expected<void> init();

  std::string name_;
  std::unique_ptr<std::FILE, FileCloser> file_;
  std::vector<uint8_t> mem_;  // the image, when reading from memory
  size_t mem_pos_ = 0;
  FileHeader header_;
  std::vector<uint8_t> buf_;  // record data, reused
  uint64_t offset_ = 0;       // bytes consumed so far
  uint64_t index_ = 0;
  std::optional<Error> failed_;
};

}  // namespace rsfc::pcap
