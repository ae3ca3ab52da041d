#include "rsfc/io/conntrack.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <libmnl/libmnl.h>
#include <linux/netfilter/nf_conntrack_tcp.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_conntrack.h>
#include <linux/netlink.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace rsfc {

namespace {

// Dumps are told from lookups by their sequence number (lookups count up from 1 below it).
constexpr uint32_t kDumpSeq = 0x80000000u;
constexpr size_t kDatagramBytes = 64 << 10;  // a dump part is at most ~32 KB

uint16_t ct_type(uint8_t msg) {
  return static_cast<uint16_t>((NFNL_SUBSYS_CTNETLINK << 8) | msg);
}

nlmsghdr* put_request(uint8_t* buf, uint8_t msg, uint16_t flags, uint32_t seq, uint8_t family) {
  nlmsghdr* nlh = mnl_nlmsg_put_header(buf);
  nlh->nlmsg_type = ct_type(msg);
  nlh->nlmsg_flags = static_cast<uint16_t>(NLM_F_REQUEST | flags);
  nlh->nlmsg_seq = seq;
  auto* nfg = static_cast<nfgenmsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(nfgenmsg)));
  nfg->nfgen_family = family == 6 ? AF_INET6 : AF_INET;
  nfg->version = NFNETLINK_V0;
  nfg->res_id = 0;
  return nlh;
}

// Attributes of one nest, by type (absent = nullptr).
template <size_t N>
struct Attrs {
  std::array<const nlattr*, N> a{};
  const nlattr* operator[](int t) const { return a[static_cast<size_t>(t)]; }
};

template <size_t N>
int collect(const nlattr* attr, void* data) {
  const int type = mnl_attr_get_type(attr);
  if (type >= 0 && static_cast<size_t>(type) < N) static_cast<Attrs<N>*>(data)->a[type] = attr;
  return MNL_CB_OK;
}

template <size_t N>
bool parse_nested(const nlattr* nest, Attrs<N>& out) {
  return nest != nullptr && mnl_attr_parse_nested(nest, collect<N>, &out) >= 0;
}

bool read_addr(const nlattr* a, uint8_t family, IpAddr& out) {
  const size_t len = family == 4 ? 4 : 16;
  if (a == nullptr || mnl_attr_get_payload_len(a) != len) return false;
  out.family = family;
  std::memcpy(out.bytes.data(), mnl_attr_get_payload(a), len);
  return true;
}

bool read_u8(const nlattr* a, uint8_t& out) {
  if (a == nullptr || mnl_attr_validate(a, MNL_TYPE_U8) < 0) return false;
  out = mnl_attr_get_u8(a);
  return true;
}

// A TCP tuple: addresses and ports (network byte order on the wire).
bool parse_tuple(const nlattr* nest, ConnTuple& t) {
  Attrs<CTA_TUPLE_MAX + 1> tuple;
  Attrs<CTA_IP_MAX + 1> ip;
  Attrs<CTA_PROTO_MAX + 1> proto;
  if (!parse_nested(nest, tuple) || !parse_nested(tuple[CTA_TUPLE_IP], ip) ||
      !parse_nested(tuple[CTA_TUPLE_PROTO], proto)) {
    return false;
  }
  uint8_t num = 0;
  if (!read_u8(proto[CTA_PROTO_NUM], num) || num != IPPROTO_TCP) return false;
  const nlattr* sp = proto[CTA_PROTO_SRC_PORT];
  const nlattr* dp = proto[CTA_PROTO_DST_PORT];
  if (sp == nullptr || dp == nullptr || mnl_attr_validate(sp, MNL_TYPE_U16) < 0 ||
      mnl_attr_validate(dp, MNL_TYPE_U16) < 0) {
    return false;
  }
  t.sport = ntohs(mnl_attr_get_u16(sp));
  t.dport = ntohs(mnl_attr_get_u16(dp));
  if (ip[CTA_IP_V4_SRC] != nullptr) {
    return read_addr(ip[CTA_IP_V4_SRC], 4, t.src) && read_addr(ip[CTA_IP_V4_DST], 4, t.dst);
  }
  return read_addr(ip[CTA_IP_V6_SRC], 6, t.src) && read_addr(ip[CTA_IP_V6_DST], 6, t.dst);
}

// A direction's scale counts only with IP_CT_TCP_FLAG_WINDOW_SCALE in its flags.
bool scale_seen(const nlattr* a) {
  if (a == nullptr || mnl_attr_get_payload_len(a) < sizeof(nf_ct_tcp_flags)) return false;
  nf_ct_tcp_flags f;
  std::memcpy(&f, mnl_attr_get_payload(a), sizeof f);
  return (f.flags & IP_CT_TCP_FLAG_WINDOW_SCALE) != 0;
}

void put_tuple(nlmsghdr* nlh, const FlowKey& k) {
  nlattr* tuple = mnl_attr_nest_start(nlh, CTA_TUPLE_ORIG);
  nlattr* ip = mnl_attr_nest_start(nlh, CTA_TUPLE_IP);
  if (k.family == 4) {
    mnl_attr_put(nlh, CTA_IP_V4_SRC, 4, k.sub_addr.data());
    mnl_attr_put(nlh, CTA_IP_V4_DST, 4, k.peer_addr.data());
  } else {
    mnl_attr_put(nlh, CTA_IP_V6_SRC, 16, k.sub_addr.data());
    mnl_attr_put(nlh, CTA_IP_V6_DST, 16, k.peer_addr.data());
  }
  mnl_attr_nest_end(nlh, ip);
  nlattr* proto = mnl_attr_nest_start(nlh, CTA_TUPLE_PROTO);
  mnl_attr_put_u8(nlh, CTA_PROTO_NUM, IPPROTO_TCP);
  mnl_attr_put_u16(nlh, CTA_PROTO_SRC_PORT, htons(k.sub_port));
  mnl_attr_put_u16(nlh, CTA_PROTO_DST_PORT, htons(k.peer_port));
  mnl_attr_nest_end(nlh, proto);
  mnl_attr_nest_end(nlh, tuple);
}

}  // namespace

const char* to_string(LookupResult r) {
  switch (r) {
    case LookupResult::kFound:
      return "found";
    case LookupResult::kNotFound:
      return "not_found";
    case LookupResult::kNoScale:
      return "no_scale";
    case LookupResult::kError:
      return "error";
    case LookupResult::kDropped:
      return "dropped";
    case LookupResult::kCount:
      break;
  }
  return "?";
}

bool parse_conntrack_tcp(const nlmsghdr* nlh, ConntrackTcp& out, bool* established) {
  if (nlh->nlmsg_type != ct_type(IPCTNL_MSG_CT_NEW)) return false;
  if (nlh->nlmsg_len < mnl_nlmsg_size(sizeof(nfgenmsg))) return false;
  Attrs<CTA_MAX + 1> ct;
  if (mnl_attr_parse(nlh, sizeof(nfgenmsg), collect<CTA_MAX + 1>, &ct) < 0) return false;
  if (!parse_tuple(ct[CTA_TUPLE_ORIG], out.original) ||
      !parse_tuple(ct[CTA_TUPLE_REPLY], out.reply)) {
    return false;
  }
  Attrs<CTA_PROTOINFO_MAX + 1> info;
  Attrs<CTA_PROTOINFO_TCP_MAX + 1> tcp;
  out.original_scale_seen = out.reply_scale_seen = false;
  if (!parse_nested(ct[CTA_PROTOINFO], info) || !parse_nested(info[CTA_PROTOINFO_TCP], tcp)) {
    return true;  // no protocol info: nothing known of the scales
  }
  uint8_t state = 0;
  if (established != nullptr) {
    *established =
        read_u8(tcp[CTA_PROTOINFO_TCP_STATE], state) && state == TCP_CONNTRACK_ESTABLISHED;
  }
  out.original_scale_seen = read_u8(tcp[CTA_PROTOINFO_TCP_WSCALE_ORIGINAL], out.original_scale) &&
                            scale_seen(tcp[CTA_PROTOINFO_TCP_FLAGS_ORIGINAL]);
  out.reply_scale_seen = read_u8(tcp[CTA_PROTOINFO_TCP_WSCALE_REPLY], out.reply_scale) &&
                         scale_seen(tcp[CTA_PROTOINFO_TCP_FLAGS_REPLY]);
  return true;
}

size_t build_conntrack_get(uint8_t* buf, size_t room, const FlowKey& key, uint32_t seq) {
  if (room < ConntrackClient::kRequestBytes) return 0;
  nlmsghdr* nlh = put_request(buf, IPCTNL_MSG_CT_GET, 0, seq, key.family);
  put_tuple(nlh, key);
  return nlh->nlmsg_len;
}

Expected<ConntrackClient> ConntrackClient::open(ConntrackCounters* counters) {
  auto s = MnlSocket::open(NETLINK_NETFILTER);
  if (!s) return s.error();
  ConntrackClient c;
  c.sock_ = std::move(s).value();
  const int fd = c.sock_.fd();
  const int fl = fcntl(fd, F_GETFL);
  if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
    return Error::from_errno(errno, "conntrack socket O_NONBLOCK");
  // Answers to a burst of lookups (a restart with many flows) and dump parts queue here.
  (void)c.sock_.set_rcvbuf(4 << 20);
  c.counters_ = counters;
  c.out_.resize(kMaxOutstanding * kRequestBytes);
  c.in_.resize(kDatagramBytes);
  return c;
}

bool ConntrackClient::lookup(const FlowKey& key) {
  if (queued_ + in_flight_ >= kMaxOutstanding) {
    count(LookupResult::kDropped);
    return false;
  }
  const size_t n =
      build_conntrack_get(out_.data() + out_len_, out_.size() - out_len_, key, next_seq_);
  if (n == 0) {  // cannot happen: out_ holds kMaxOutstanding requests
    count(LookupResult::kDropped);
    return false;
  }
  next_seq_ = next_seq_ + 1 >= kDumpSeq ? 1 : next_seq_ + 1;
  out_len_ += n;
  ++queued_;
  return true;
}

Expected<void> ConntrackClient::flush() {
  if (queued_ == 0) return {};
  const uint32_t n = std::exchange(queued_, 0);
  const size_t len = std::exchange(out_len_, 0);
  quiet_ = false;
  if (auto r = sock_.send({out_.data(), len}); !r) {
    count(LookupResult::kError, n);
    return r;
  }
  in_flight_ += n;
  return {};
}

// One dump at a time per socket (netlink answers a second one EBUSY): IPv6 follows IPv4.
Expected<void> ConntrackClient::dump() {
  dump_v6_next_ = true;
  return send_dump(4);
}

Expected<void> ConntrackClient::send_dump(uint8_t family) {
  alignas(nlmsghdr) uint8_t buf[kRequestBytes];
  nlmsghdr* nlh = put_request(buf, IPCTNL_MSG_CT_GET, NLM_F_DUMP, kDumpSeq + family, family);
  if (auto r = sock_.send({buf, nlh->nlmsg_len}); !r) {
    dump_v6_next_ = false;
    return r;
  }
  dumping_ = true;
  return {};
}

void ConntrackClient::expire() {
  if (in_flight_ > 0 && quiet_) {
    count(LookupResult::kError, in_flight_);
    in_flight_ = 0;
  }
  quiet_ = true;
}

long ConntrackClient::read_datagram() {
  for (;;) {
    const ssize_t n = ::recv(fd(), in_.data(), in_.size(), MSG_DONTWAIT);
    if (n >= 0) return static_cast<long>(n);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    if (errno == ENOBUFS) {
      // Answers were lost, which ones is unknown: every lookup in flight is given up (an
      // answer that still comes is used, not counted again).
      count(LookupResult::kError, in_flight_);
      in_flight_ = 0;
      continue;
    }
    return -1;
  }
}

bool ConntrackClient::receive_with(EntryFn fn, void* ctx) {
  // A few datagrams per call: a dump of a big table must not hold the worker's packets up
  // (the event is level-triggered: the rest is read on the next turn of the loop).
  for (int i = 0; i < kDatagramsPerCall; ++i) {
    const long n = read_datagram();
    if (n == 0) return true;
    if (n < 0) return false;
    int len = static_cast<int>(n);
    for (auto* nlh = reinterpret_cast<const nlmsghdr*>(in_.data()); mnl_nlmsg_ok(nlh, len);
         nlh = mnl_nlmsg_next(nlh, &len)) {
      ConntrackTcp ct;
      bool established = false;
      const Answer a = classify_answer(nlh, ct, established);
      if (a != Answer::kNone) fn(ctx, ct, a == Answer::kDumpEntry, established);
    }
  }
  return true;
}

bool ConntrackClient::answered() {
  quiet_ = false;
  if (in_flight_ == 0) return false;  // given up already (expire(), ENOBUFS)
  --in_flight_;
  return true;
}

// One message: a lookup's answer (an entry or an error) or part of a dump.
ConntrackClient::Answer ConntrackClient::classify_answer(const nlmsghdr* nlh, ConntrackTcp& ct,
                                                         bool& established) {
  const bool from_dump = nlh->nlmsg_seq >= kDumpSeq;
  if (nlh->nlmsg_type == NLMSG_DONE || nlh->nlmsg_type == NLMSG_ERROR) {
    const int err = nlh->nlmsg_type == NLMSG_ERROR ? nlmsg_error_code(nlh) : 0;
    if (from_dump) {
      dumping_ = false;
      if (std::exchange(dump_v6_next_, false)) (void)send_dump(6);
    } else if (answered()) {
      count(err == -ENOENT ? LookupResult::kNotFound : LookupResult::kError);
    }
    return Answer::kNone;
  }
  const bool parsed = parse_conntrack_tcp(nlh, ct, &established);
  if (from_dump) {
    if (parsed && counters_) counters_->dump_entries.add();
    return parsed ? Answer::kDumpEntry : Answer::kNone;
  }
  const bool counts = answered();
  if (!parsed) {
    if (counts) count(LookupResult::kError);
    return Answer::kNone;
  }
  if (counts) {
    count(ct.original_scale_seen && ct.reply_scale_seen ? LookupResult::kFound
                                                        : LookupResult::kNoScale);
  }
  return Answer::kEntry;
}

}  // namespace rsfc
