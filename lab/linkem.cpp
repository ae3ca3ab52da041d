// rsfc-linkem: a link emulator on NFQUEUE for kernels without netem. Each --link binds one
// queue (only the first 64 bytes are copied) and holds the packets' ids in the kernel until
// the LinkModel says they may go: a one-way delay, optionally behind a constant-rate or
// trace-driven drop-tail bottleneck. A full kernel queue drops (no fail-open), like a link.
//
//   rsfc-linkem --link queue=10,delay=20ms --link queue=11,delay=20ms
//   rsfc-linkem --link queue=10,delay=20ms,rate=2mbit,buffer=1000000
//   rsfc-linkem --link queue=11,delay=20ms,trace=lab/traces/Verizon-LTE-short.down,buffer=..
//
// Prints "ready" on stdout once every queue is bound, and one JSON line of counters per
// link on exit (SIGINT/SIGTERM) and on SIGUSR1.
#include <sched.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "link_model.h"
#include "rsfc/io/nfqueue.h"

namespace rsfc::lab {
namespace {

// An owned file descriptor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

Nanos monotonic_now() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<Nanos>(ts.tv_sec) * kSecond + ts.tv_nsec;
}

[[noreturn]] void die(const std::string& msg) {
  std::fprintf(stderr, "rsfc-linkem: %s\n", msg.c_str());
  std::exit(2);
}

void usage() {
  std::fprintf(stderr,
               "usage: rsfc-linkem --link queue=N,delay=D[,rate=R|trace=FILE][,buffer=BYTES]\n"
               "                   [--link ...] [--maxlen N] [--realtime]\n"
               "  D: 20ms, 500us, 0.5s or a plain number of ms\n"
               "  R: 2mbit, 7.2mbit, 500kbit or a plain number of bit/s\n"
               "  trace: Mahimahi format (one line per 1500-byte delivery opportunity, ms)\n"
               "  buffer: drop-tail limit of the bottleneck in bytes (0 = unlimited)\n");
}

std::optional<double> parse_number(std::string_view s, std::string_view* rest) {
  double v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p == s.data()) return std::nullopt;
  *rest = s.substr(static_cast<size_t>(p - s.data()));
  return v;
}

std::optional<Nanos> parse_duration(std::string_view s) {
  std::string_view unit;
  auto v = parse_number(s, &unit);
  if (!v || *v < 0) return std::nullopt;
  double scale = 0;
  if (unit.empty() || unit == "ms") {
    scale = kMilli;
  } else if (unit == "us") {
    scale = kMicro;
  } else if (unit == "s") {
    scale = kSecond;
  } else {
    return std::nullopt;
  }
  return static_cast<Nanos>(*v * scale + 0.5);
}

std::optional<uint64_t> parse_rate(std::string_view s) {
  std::string_view unit;
  auto v = parse_number(s, &unit);
  if (!v || *v <= 0) return std::nullopt;
  double scale = 0;
  if (unit.empty() || unit == "bit") {
    scale = 1;
  } else if (unit == "kbit") {
    scale = 1e3;
  } else if (unit == "mbit") {
    scale = 1e6;
  } else if (unit == "gbit") {
    scale = 1e9;
  } else {
    return std::nullopt;
  }
  return static_cast<uint64_t>(*v * scale + 0.5);
}

template <class T>
std::optional<T> parse_uint(std::string_view s) {
  T v{};
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

struct LinkSpec {
  uint16_t queue = 0;
  LinkParams params;
  std::string trace_path;
};

LinkSpec parse_link(std::string_view text) {
  LinkSpec spec;
  bool have_queue = false;
  while (!text.empty()) {
    const size_t comma = text.find(',');
    std::string_view item = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos)
      die("--link: expected key=value, got '" + std::string(item) + "'");
    const std::string_view key = item.substr(0, eq);
    const std::string_view value = item.substr(eq + 1);
    const std::string bad = "--link: bad " + std::string(key) + " '" + std::string(value) + "'";
    if (key == "queue") {
      auto q = parse_uint<uint16_t>(value);
      if (!q) die(bad);
      spec.queue = *q;
      have_queue = true;
    } else if (key == "delay") {
      auto d = parse_duration(value);
      if (!d) die(bad);
      spec.params.delay = *d;
    } else if (key == "rate") {
      auto r = parse_rate(value);
      if (!r) die(bad);
      spec.params.rate_bps = *r;
    } else if (key == "buffer") {
      auto b = parse_uint<uint64_t>(value);
      if (!b) die(bad);
      spec.params.buffer_bytes = *b;
    } else if (key == "trace") {
      spec.trace_path = std::string(value);
    } else {
      die("--link: unknown key '" + std::string(key) + "'");
    }
  }
  if (!have_queue) die("--link: queue= is required");
  if (!spec.trace_path.empty()) {
    if (spec.params.rate_bps > 0) die("--link: rate and trace exclude each other");
    std::ifstream in(spec.trace_path);
    if (!in) die("cannot read trace " + spec.trace_path);
    std::stringstream ss;
    ss << in.rdbuf();
    std::string err;
    spec.params.trace = Trace::parse(ss.str(), &err);
    if (!spec.params.trace) die(spec.trace_path + ": " + err);
  }
  return spec;
}

struct Link {
  LinkSpec spec;
  LinkModel model;
  NfQueue queue;
  uint64_t verdict_errors = 0;
};

std::string stats_json(const Link& l, Nanos now) {
  const LinkStats& s = l.model.stats();
  char buf[512];
  std::snprintf(
      buf, sizeof buf,
      "{\"queue\":%u,\"delay_ms\":%.3f,\"rate_bps\":%llu,\"trace\":\"%s\","
      "\"buffer_bytes\":%llu,\"arrived\":%llu,\"arrived_bytes\":%llu,\"dropped\":%llu,"
      "\"dropped_bytes\":%llu,\"released\":%llu,\"released_bytes\":%llu,"
      "\"max_buffer_bytes\":%llu,\"held\":%zu,\"verdict_errors\":%llu,\"t\":%.3f}",
      l.spec.queue, static_cast<double>(l.spec.params.delay) / kMilli,
      static_cast<unsigned long long>(l.spec.params.rate_bps), l.spec.trace_path.c_str(),
      static_cast<unsigned long long>(l.spec.params.buffer_bytes),
      static_cast<unsigned long long>(s.arrived), static_cast<unsigned long long>(s.arrived_bytes),
      static_cast<unsigned long long>(s.dropped), static_cast<unsigned long long>(s.dropped_bytes),
      static_cast<unsigned long long>(s.released),
      static_cast<unsigned long long>(s.released_bytes),
      static_cast<unsigned long long>(s.max_buffer_bytes), l.model.held_packets(),
      static_cast<unsigned long long>(l.verdict_errors), static_cast<double>(now) / kSecond);
  return buf;
}

void print_stats(const std::vector<Link>& links) {
  const Nanos now = monotonic_now();
  for (const Link& l : links) std::printf("%s\n", stats_json(l, now).c_str());
  std::fflush(stdout);
}

int run(int argc, char** argv) {
  std::vector<LinkSpec> specs;
  uint32_t maxlen = 100000;
  bool realtime = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    auto next = [&]() -> std::string_view {
      if (i + 1 >= argc) die(std::string(a) + " needs a value");
      return argv[++i];
    };
    if (a == "--link") {
      specs.push_back(parse_link(next()));
    } else if (a == "--maxlen") {
      auto v = parse_uint<uint32_t>(next());
      if (!v || *v == 0) die("bad --maxlen");
      maxlen = *v;
    } else if (a == "--realtime") {
      realtime = true;
    } else if (a == "-h" || a == "--help") {
      usage();
      return 0;
    } else {
      usage();
      die("unknown argument '" + std::string(a) + "'");
    }
  }
  if (specs.empty()) {
    usage();
    die("at least one --link is needed");
  }

  // Timers as sharp as the kernel can make them: the delay line is the product.
  prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
  if (realtime) {
    sched_param sp{};
    sp.sched_priority = 10;
    if (sched_setscheduler(0, SCHED_FIFO, &sp) != 0) {
      std::fprintf(stderr, "rsfc-linkem: SCHED_FIFO: %s (continuing)\n", std::strerror(errno));
    }
  }

  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGINT);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGUSR1);
  if (sigprocmask(SIG_BLOCK, &mask, nullptr) != 0) die("sigprocmask failed");
  Fd sigfd(signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK));
  Fd timer(timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK));
  Fd ep(epoll_create1(EPOLL_CLOEXEC));
  if (!sigfd.valid() || !timer.valid() || !ep.valid()) die("signalfd/timerfd/epoll failed");

  const Nanos start = monotonic_now();
  std::vector<Link> links;
  links.reserve(specs.size());
  for (LinkSpec& spec : specs) {
    NfQueue::Options o;
    o.queue_num = spec.queue;
    o.maxlen = maxlen;
    o.rcvbuf_bytes = 64u << 20;
    // Not copy-meta: the kernel reports NFQA_CAP_LEN (the packet length) only in copy-packet
    // mode. 64 bytes cover an IPv4/IPv6 header; nothing is ever sent back.
    o.copy_range = 64;
    o.fail_open = false;
    o.gso = false;  // the kernel segments GSO packets: the model sees wire-sized packets
    o.batch_size = 256;
    auto q = NfQueue::open(o);
    if (!q) die(q.error().message);
    LinkModel model(spec.params, start);
    links.push_back(Link{std::move(spec), std::move(model), std::move(*q), 0});
  }
  auto watch = [&](int fd, uint64_t tag) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = tag;
    if (epoll_ctl(ep.get(), EPOLL_CTL_ADD, fd, &ev) != 0) die("epoll_ctl failed");
  };
  constexpr uint64_t kTagSignal = 1000;
  constexpr uint64_t kTagTimer = 1001;
  for (size_t i = 0; i < links.size(); ++i) watch(links[i].queue.fd(), i);
  watch(sigfd.get(), kTagSignal);
  watch(timer.get(), kTagTimer);

  std::printf("ready\n");
  std::fflush(stdout);

  std::vector<uint32_t> released;
  released.reserve(4096);
  epoll_event events[16];
  bool stop = false;
  while (!stop) {
    const int n = epoll_wait(ep.get(), events, 16, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      die(std::string("epoll_wait: ") + std::strerror(errno));
    }
    for (int e = 0; e < n; ++e) {
      const uint64_t tag = events[e].data.u64;
      if (tag == kTagSignal) {
        signalfd_siginfo si{};
        while (read(sigfd.get(), &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
          if (si.ssi_signo == SIGUSR1) {
            print_stats(links);
          } else {
            stop = true;
          }
        }
      } else if (tag == kTagTimer) {
        uint64_t expirations = 0;
        [[maybe_unused]] ssize_t r = read(timer.get(), &expirations, sizeof expirations);
      } else if (tag < links.size()) {
        Link& l = links[tag];
        // A bounded number of batches, so that due releases are never starved.
        for (int batch = 0; batch < 16; ++batch) {
          const Nanos now = monotonic_now();
          auto r = l.queue.receive(256, [&](const NfqPacket& p) {
            if (!l.model.arrive(p.id, p.orig_len, now)) {
              if (!l.queue.add_verdict(p.id, kNfDrop)) ++l.verdict_errors;
            }
          });
          if (!r) die(r.error().message);
          if (r->would_block) break;
        }
      }
    }
    const Nanos now = monotonic_now();
    std::optional<Nanos> next;
    for (Link& l : links) {
      released.clear();
      l.model.advance(now, released);
      for (uint32_t id : released) {
        if (!l.queue.add_verdict(id, kNfAccept)) ++l.verdict_errors;
      }
      if (l.queue.pending_verdicts() > 0 && !l.queue.flush()) ++l.verdict_errors;
      if (auto t = l.model.next_event()) next = next ? std::min(*next, *t) : *t;
    }
    itimerspec its{};
    if (next) {
      // Already due: fire at once (a zero it_value would disarm the timer).
      const Nanos at = std::max(*next, now + 1);
      its.it_value.tv_sec = static_cast<time_t>(at / kSecond);
      its.it_value.tv_nsec = static_cast<long>(at % kSecond);
    }
    if (timerfd_settime(timer.get(), TFD_TIMER_ABSTIME, &its, nullptr) != 0) {
      die(std::string("timerfd_settime: ") + std::strerror(errno));
    }
  }
  print_stats(links);
  return 0;
}

}  // namespace
}  // namespace rsfc::lab

int main(int argc, char** argv) {
  return rsfc::lab::run(argc, argv);
}
