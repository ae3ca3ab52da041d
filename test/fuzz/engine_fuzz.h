// The input format of the engine fuzzer (engine_fuzz.cpp), shared with the tool that
// writes the seed corpus (make_corpus.cpp). All integers are big-endian.
//
//   input  := config(1) knobs(1) record*
//   record := flags(1) length(2) time_delta(2) [config(1) if flags & kReload] packet(length)
//
// config: bits 0-1 the uplink policy (off, observe, static, rsfc), bits 2-3 the downlink
//   policy (off, static, drwa; 3 = off), bit 4 rsfc per_subscriber, bit 5 a decision sink
//   (every record is formatted), bits 6-7 the flow table size (4, 16, 64, 256).
// knobs: bits 0-5 the static windows (uplink (1 + n) KiB, downlink twice that), bit 6 a
//   fixed rsfc threshold (40 ms, else auto), bit 7 a drwa RTT_min horizon (5 s, else none).
// length: the packet's bytes (at most kMaxPacket; a last record may be cut short).
// time_delta: added to the clock before the packet, in microseconds, or in units of 10 ms
//   with kSlowClock (up to 655 s: idle, embryonic and closed timeouts).
#pragma once

#include <cstddef>
#include <cstdint>

namespace rsfc::fuzz {

constexpr uint32_t kMaxPacket = 4096;
constexpr size_t kConfigBytes = 2;
constexpr size_t kRecordHeader = 5;

namespace flag {
constexpr uint8_t kFixChecksum = 0x01;  // store the correct TCP checksum first (if it parses)
constexpr uint8_t kNotReady = 0x02;     // PacketMeta::checksum = kNotReady (CSUMNOTREADY)
constexpr uint8_t kTruncated = 0x04;    // PacketMeta::truncated (the kernel cut the copy)
constexpr uint8_t kSlowClock = 0x08;    // time_delta in units of 10 ms
constexpr uint8_t kExpire = 0x10;       // Engine::expire(now) before the packet
constexpr uint8_t kReload = 0x20;       // set_params from the config byte that follows (SIGHUP)
}  // namespace flag

// Config byte helpers for the corpus tool.
namespace config {
constexpr uint8_t kUpOff = 0, kUpObserve = 1, kUpStatic = 2, kUpRsfc = 3;
constexpr uint8_t kDownOff = 0 << 2, kDownStatic = 1 << 2, kDownDrwa = 2 << 2;
constexpr uint8_t kPerSubscriber = 0x10, kSink = 0x20;
constexpr uint8_t kFlows4 = 0 << 6, kFlows16 = 1 << 6, kFlows64 = 2 << 6, kFlows256 = 3 << 6;
}  // namespace config

// The subscriber networks the fuzzer configures.
constexpr const char* kSubscriberV4 = "198.18.0.0/16";
constexpr const char* kSubscriberV6 = "2001:2:0:1::/64";

}  // namespace rsfc::fuzz
