// Tests of the I/O shell's pieces: address parsing, /proc stats parsing, log lines, the
// decision log, the /metrics HTTP server, libevent wrappers, and NfQueue against the real
// kernel inside a private network namespace (skipped when that is not possible).
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "rsfc/io/decision_log.h"
#include "rsfc/io/event_loop.h"
#include "rsfc/io/http_metrics.h"
#include "rsfc/io/io_metrics.h"
#include "rsfc/io/log.h"
#include "rsfc/io/nfqueue.h"

namespace rsfc {
namespace {

// ---- metrics.listen parsing ---------------------------------------------------------------
struct ListenCase {
  const char* text;
  bool ok;
  const char* host;
  uint16_t port;
};

class ListenAddressTest : public ::testing::TestWithParam<ListenCase> {};

TEST_P(ListenAddressTest, Parses) {
  const ListenCase& c = GetParam();
  auto r = parse_listen_address(c.text);
  ASSERT_EQ(r.has_value(), c.ok) << c.text;
  if (c.ok) {
    EXPECT_EQ(r->host, c.host);
    EXPECT_EQ(r->port, c.port);
  } else {
    EXPECT_NE(r.error().message.find(c.text), std::string::npos) << r.error().message;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Table, ListenAddressTest,
    ::testing::Values(
        ListenCase{"127.0.0.1:9477", true, "127.0.0.1", 9477},
        ListenCase{"0.0.0.0:1", true, "0.0.0.0", 1}, ListenCase{"[::1]:9477", true, "::1", 9477},
        ListenCase{"[2001:db8::5]:65535", true, "2001:db8::5", 65535},
        ListenCase{"127.0.0.1:0", true, "127.0.0.1", 0}, ListenCase{"127.0.0.1", false, "", 0},
        ListenCase{"127.0.0.1:", false, "", 0}, ListenCase{"127.0.0.1:65536", false, "", 0},
        ListenCase{"127.0.0.1:9x", false, "", 0}, ListenCase{"localhost:9477", false, "", 0},
        ListenCase{"::1:9477", false, "", 0}, ListenCase{"[::1]9477", false, "", 0},
        ListenCase{"[127.0.0.1]:9477", false, "", 0}),
    [](const auto& p) { return "case" + std::to_string(p.index); });

// ---- /proc/net/netfilter/nfnetlink_queue ----------------------------------------------------
TEST(KernelQueueStats, ParsesKernelLines) {
  const char* text =
      "    0  16868  5187 2 65531     0     0    10106  1\n"
      "    1 4126225580     0 2 65531     7     9        0  1\n"
      "garbage line\n";
  auto v = parse_kernel_queue_stats(text);
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(v[0].queue_num, 0);
  EXPECT_EQ(v[0].portid, 16868u);
  EXPECT_EQ(v[0].queue_total, 5187u);
  EXPECT_EQ(v[0].copy_mode, 2u);
  EXPECT_EQ(v[0].copy_range, 65531u);
  EXPECT_EQ(v[0].id_sequence, 10106u);
  EXPECT_EQ(v[1].portid, 4126225580u);
  EXPECT_EQ(v[1].queue_dropped, 7u);
  EXPECT_EQ(v[1].queue_user_dropped, 9u);
  EXPECT_TRUE(parse_kernel_queue_stats("").empty());
}

// ---- log lines -------------------------------------------------------------------------------
TEST(Log, FormatsOneTimestampedLine) {
  char buf[256];
  // 2021-01-02T03:04:05.678Z
  const long long ns = 1609556645678LL * 1'000'000 + 999;
  const size_t n = log::format_line(buf, sizeof(buf), ns, LogLevel::kWarn, "two\nlines\n");
  EXPECT_EQ(std::string(buf, n), "2021-01-02T03:04:05.678Z warn: two lines\n");
}

TEST(Log, TruncatesButKeepsTheNewline) {
  char buf[80];
  const std::string long_msg(500, 'x');
  const size_t n = log::format_line(buf, sizeof(buf), 0, LogLevel::kError, long_msg);
  ASSERT_EQ(n, sizeof(buf));  // full line, no NUL needed: the length is returned
  EXPECT_EQ(buf[n - 1], '\n');
  EXPECT_EQ(std::string(buf, n).find('\n'), n - 1);
}

TEST(Log, FiltersByLevel) {
  const LogLevel saved = log::level();
  log::set_level(LogLevel::kWarn);
  ::testing::internal::CaptureStderr();
  log::info("hidden %d", 1);
  log::warn("shown %d", 2);
  log::error("shown %s", "three");
  const std::string out = ::testing::internal::GetCapturedStderr();
  log::set_level(saved);
  EXPECT_EQ(out.find("hidden"), std::string::npos) << out;
  EXPECT_NE(out.find(" warn: shown 2\n"), std::string::npos) << out;
  EXPECT_NE(out.find(" error: shown three\n"), std::string::npos) << out;
}

// ---- decision log ----------------------------------------------------------------------------
DecisionRecord sample_record() {
  DecisionRecord r;
  r.time = 123456789;
  const uint8_t sub[4] = {198, 18, 0, 2};
  r.subscriber = IpAddr::v4(sub);
  uint8_t peer[16] = {0x20, 0x01, 0x0d, 0xb8};
  peer[15] = 1;
  r.peer = IpAddr::v6(peer);
  r.subscriber_port = 40000;
  r.peer_port = 443;
  r.knob = "uplink";
  r.state = "fast";
  r.tick_ms = 4;
  r.t_buff_ms = 12.5;
  r.rate_bps = 250000;
  r.rtt_min_ms = 30;
  r.rtt_ms = NAN;
  r.window_bytes = 65536;  // advertised: 512 << 7 ...
  r.target_bytes = 65000;  // ... for this target (rounded up to the scale)
  r.timestamps = true;
  return r;
}

TEST(DecisionLog, FormatsJsonLine) {
  char buf[1024];
  const size_t n = format_decision_json(sample_record(), buf, sizeof(buf));
  ASSERT_GT(n, 0u);
  EXPECT_EQ(std::string(buf, n),
            "{\"time_ns\":123456789,\"subscriber\":\"198.18.0.2\",\"subscriber_port\":40000,"
            "\"peer\":\"2001:db8::1\",\"peer_port\":443,\"knob\":\"uplink\",\"state\":\"fast\","
            "\"tick_ms\":4,\"t_buff_ms\":12.5,\"rate_bps\":250000,\"rtt_min_ms\":30,"
            "\"rtt_ms\":null,\"window_bytes\":65536,\"target_bytes\":65000,\"timestamps\":true,"
            "\"enforced\":true}\n");
  EXPECT_EQ(format_decision_json(sample_record(), buf, 40), 0u);  // too small: nothing
}

TEST(DecisionLog, EscapesStrings) {
  DecisionRecord r = sample_record();
  r.state = "a\"b\\c\n";
  char buf[1024];
  const size_t n = format_decision_json(r, buf, sizeof(buf));
  EXPECT_NE(std::string(buf, n).find("\"state\":\"a\\\"b\\\\c\\u000a\""), std::string::npos)
      << std::string(buf, n);
}

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

// The record `i` of producer `p`: time and port tell them apart.
DecisionRecord numbered(int p, int i) {
  DecisionRecord r = sample_record();
  r.time = i;
  r.subscriber_port = static_cast<uint16_t>(40000 + p);
  return r;
}

std::string line_of(const DecisionRecord& r) {
  char buf[DecisionRing::kMaxRecord];
  const size_t n = format_decision_json(r, buf, sizeof buf);
  return std::string(buf, n - 1);  // without its newline
}

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/rsfc_io_test_XXXXXX";
    if (mkdtemp(tmpl) != nullptr) path = tmpl;
  }
  ~TempDir() { (void)!std::system(("rm -rf '" + path + "'").c_str()); }
};

off_t size_of(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 ? st.st_size : -1;
}

// The worst case of every field: two full IPv6 addresses, the longest numbers, the downlink
// queue field. The ring's record buffer must hold it with room to spare.
TEST(DecisionLog, LongestRecordFitsTheRingsRecordBuffer) {
  DecisionRecord r = sample_record();
  uint8_t a[16];
  std::memset(a, 0xfe, sizeof a);
  r.subscriber = r.peer = IpAddr::v6(a);
  r.time = INT64_MIN;
  r.subscriber_port = r.peer_port = 65535;
  r.knob = "downlink";
  r.state = "no_timestamps";
  r.tick_ms = r.t_buff_ms = r.rate_bps = r.rtt_min_ms = r.rtt_ms = r.q_down_ms = -1.23456e-300;
  r.has_q_down = true;
  r.window_bytes = r.target_bytes = UINT64_MAX;
  char buf[DecisionRing::kMaxRecord];
  const size_t n = format_decision_json(r, buf, sizeof buf);
  ASSERT_GT(n, 0u);
  EXPECT_LT(n, DecisionRing::kMaxRecord / 2) << buf;
}

TEST(DecisionLog, WritesWholeLinesOffThePacketPathAndReopensAfterRotation) {
  TempDir dir;
  const std::string path = dir.path + "/decisions.jsonl";
  std::vector<std::string> want;
  {
    // A period of an hour: only flush(), reopen() and the destructor write.
    auto f = DecisionLog::open(path, 1, {.period = std::chrono::hours(1)});
    ASSERT_TRUE(f.has_value()) << f.error().message;
    DecisionLog& log_file = *f.value();
    DecisionSink& sink = *log_file.sink(0);
    for (int i = 0; i < 3; ++i) sink.on_decision(numbered(0, i));
    EXPECT_TRUE(read_lines(path).empty()) << "queued for the writer thread";
    ASSERT_TRUE(log_file.flush().has_value());
    EXPECT_EQ(read_lines(path),
              (std::vector<std::string>{line_of(numbered(0, 0)), line_of(numbered(0, 1)),
                                        line_of(numbered(0, 2))}));
    ASSERT_EQ(std::rename(path.c_str(), (path + ".1").c_str()), 0);  // logrotate
    sink.on_decision(numbered(0, 3));
    ASSERT_TRUE(log_file.reopen(path, 0).has_value());  // what was queued: the old file
    sink.on_decision(numbered(0, 4));
    sink.on_decision(numbered(0, 5));
    // A path that cannot be opened leaves the log where it was.
    EXPECT_FALSE(log_file.reopen(dir.path + "/no/such/dir.jsonl", 0).has_value());
    EXPECT_EQ(log_file.path(), path);
  }  // the destructor writes what is queued
  EXPECT_EQ(read_lines(path + ".1").size(), 4u);
  EXPECT_EQ(read_lines(path + ".1").back(), line_of(numbered(0, 3)));
  EXPECT_EQ(read_lines(path),
            (std::vector<std::string>{line_of(numbered(0, 4)), line_of(numbered(0, 5))}));
  EXPECT_FALSE(DecisionLog::open("/nonexistent-dir/x.jsonl", 1, {}).has_value());
}

// Two workers writing at full speed into small rings: every line in the file is one whole
// record, each worker's in its order, and every record is either written or counted.
TEST(DecisionLog, WorkersLinesNeverInterleaveAndEveryRecordIsAccountedFor) {
  TempDir dir;
  const std::string path = dir.path + "/decisions.jsonl";
  constexpr int kRecords = 20000;
  uint64_t full = 0;
  uint64_t written = 0;
  {
    auto f = DecisionLog::open(path, 2,
                               {.ring_bytes = 16 << 10, .period = std::chrono::milliseconds(1)});
    ASSERT_TRUE(f.has_value()) << f.error().message;
    std::vector<std::thread> workers;
    for (int p = 0; p < 2; ++p) {
      workers.emplace_back([&, p] {
        for (int i = 0; i < kRecords; ++i) f.value()->sink(p)->on_decision(numbered(p, i));
      });
    }
    for (auto& w : workers) w.join();
    ASSERT_TRUE(f.value()->flush().has_value());
    full = f.value()->dropped_queue_full();
    written = f.value()->counters().records_written.get();
    EXPECT_EQ(f.value()->counters().bytes_written.get(), static_cast<uint64_t>(size_of(path)));
  }
  const std::vector<std::string> lines = read_lines(path);
  EXPECT_EQ(lines.size(), written);
  EXPECT_EQ(written + full, 2u * kRecords);
  int next[2] = {0, 0};
  for (const std::string& l : lines) {
    const int p = l.find("\"subscriber_port\":40001") != std::string::npos ? 1 : 0;
    const long long t = std::atoll(l.c_str() + std::strlen("{\"time_ns\":"));
    ASSERT_GE(t, next[p]) << "out of order: " << l;
    ASSERT_EQ(l, line_of(numbered(p, static_cast<int>(t))));
    next[p] = static_cast<int>(t) + 1;
  }
}

// The writer stuck in write(2) (a FIFO nobody reads: a hung disk): the worker's ring fills,
// further records are dropped and counted, and the worker is never held up. Once the
// reader drains the FIFO everything queued arrives intact.
TEST(DecisionLog, FullRingDropsAndCountsWhileTheWriterIsStuck) {
  TempDir dir;
  const std::string fifo = dir.path + "/stuck";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const int rd = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);  // so that open() does not wait
  ASSERT_GE(rd, 0);
  constexpr int kRecords = 10000;  // ~3 MB: far more than the pipe (64 KiB) and ring hold
  auto f =
      DecisionLog::open(fifo, 1, {.ring_bytes = 16 << 10, .period = std::chrono::milliseconds(1)});
  ASSERT_TRUE(f.has_value()) << f.error().message;
  for (int i = 0; i < kRecords; ++i) f.value()->sink(0)->on_decision(numbered(0, i));
  const uint64_t full = f.value()->dropped_queue_full();
  EXPECT_GT(full, static_cast<uint64_t>(kRecords) * 9 / 10);
  // A reload meanwhile (SIGHUP) waits a bounded time, and its reopen stays queued.
  const std::string other = dir.path + "/after-reload.jsonl";
  auto reopened = f.value()->reopen(other, 0, std::chrono::milliseconds(100));
  ASSERT_FALSE(reopened.has_value());
  EXPECT_NE(reopened.error().message.find("stuck"), std::string::npos) << reopened.error().message;
  EXPECT_EQ(size_of(other), -1);
  // Now read: the writer gets unstuck, the destructor writes the rest and closes.
  std::string got;
  std::thread reader([&] {
    const int flags = fcntl(rd, F_GETFL);
    fcntl(rd, F_SETFL, flags & ~O_NONBLOCK);
    char buf[65536];
    for (ssize_t n; (n = ::read(rd, buf, sizeof buf)) != 0;) {
      if (n > 0) got.append(buf, static_cast<size_t>(n));
    }
  });
  const uint64_t before_close = f.value()->counters().records_written.get();
  f.value().reset();
  reader.join();
  ::close(rd);
  std::istringstream in(got);
  uint64_t lines = 0;
  long long last = -1;
  for (std::string l; std::getline(in, l); ++lines) {
    const long long t = std::atoll(l.c_str() + std::strlen("{\"time_ns\":"));
    ASSERT_GT(t, last);
    ASSERT_EQ(l, line_of(numbered(0, static_cast<int>(t))));
    last = t;
  }
  EXPECT_EQ(lines + full, static_cast<uint64_t>(kRecords));
  EXPECT_GE(lines, before_close);
  EXPECT_EQ(got.back(), '\n');
  EXPECT_EQ(size_of(other), 0) << "the queued reopen was carried out once the writer could";
}

// decision_log_max_bytes: the file stops growing below the cap, with whole lines only, and
// counts what it leaves out; after a rotation (or a truncation) it is written to again.
TEST(DecisionLog, SizeCapIsNeverExceededAndRotationResumesWriting) {
  TempDir dir;
  const std::string path = dir.path + "/decisions.jsonl";
  const size_t len = line_of(numbered(0, 0)).size() + 1;  // times 0..9 are one digit
  const uint64_t cap = 5 * len + len / 2;
  auto f = DecisionLog::open(path, 1, {.max_bytes = cap, .period = std::chrono::hours(1)});
  ASSERT_TRUE(f.has_value()) << f.error().message;
  DecisionLog& dl = *f.value();
  for (int i = 0; i < 3; ++i) dl.sink(0)->on_decision(numbered(0, i));
  ASSERT_TRUE(dl.flush().has_value());
  for (int i = 3; i < 9; ++i) dl.sink(0)->on_decision(numbered(0, i));
  ASSERT_TRUE(dl.flush().has_value());
  EXPECT_EQ(read_lines(path).size(), 5u);
  EXPECT_EQ(read_lines(path).back(), line_of(numbered(0, 4)));
  EXPECT_LE(size_of(path), static_cast<off_t>(cap));
  EXPECT_EQ(dl.counters().dropped_size_cap.get(), 4u);
  dl.sink(0)->on_decision(numbered(0, 9));
  ASSERT_TRUE(dl.flush().has_value());
  EXPECT_EQ(dl.counters().dropped_size_cap.get(), 5u);
  EXPECT_EQ(dl.counters().records_written.get(), 5u);
  // logrotate and SIGHUP: a new file, written again.
  ASSERT_EQ(std::rename(path.c_str(), (path + ".1").c_str()), 0);
  ASSERT_TRUE(dl.reopen(path, cap).has_value());
  for (int i = 0; i < 2; ++i) dl.sink(0)->on_decision(numbered(0, i));
  ASSERT_TRUE(dl.flush().has_value());
  EXPECT_EQ(read_lines(path).size(), 2u);
  // copytruncate: the file shrinks under the writer, which sees it at its next wake-up.
  for (int i = 0; i < 6; ++i) dl.sink(0)->on_decision(numbered(0, i));
  ASSERT_TRUE(dl.flush().has_value());
  EXPECT_EQ(read_lines(path).size(), 5u);
  ASSERT_EQ(truncate(path.c_str(), 0), 0);
  dl.sink(0)->on_decision(numbered(0, 7));
  ASSERT_TRUE(dl.flush().has_value());
  EXPECT_EQ(read_lines(path), std::vector<std::string>{line_of(numbered(0, 7))});
  // A cap of 0 is no cap.
  ASSERT_TRUE(dl.reopen(path, 0).has_value());
  for (int i = 0; i < 9; ++i) dl.sink(0)->on_decision(numbered(0, i));
  ASSERT_TRUE(dl.flush().has_value());
  EXPECT_EQ(read_lines(path).size(), 10u);
}

// A failed write (here the file size limit, as a full disk would: a short write, then an
// error) loses the records it could not write, counted; the partial line it left is ended
// before the next write, so that every later line is whole again.
TEST(DecisionLog, WriteErrorsAreCountedAndLeaveLaterLinesWhole) {
  TempDir dir;
  const std::string path = dir.path + "/decisions.jsonl";
  const size_t len = line_of(numbered(0, 0)).size() + 1;
  auto f = DecisionLog::open(path, 1, {.period = std::chrono::hours(1)});
  ASSERT_TRUE(f.has_value());
  DecisionLog& dl = *f.value();
  struct sigaction ign {
  }, old_action{};
  ign.sa_handler = SIG_IGN;
  ASSERT_EQ(sigaction(SIGXFSZ, &ign, &old_action), 0);
  rlimit old_limit{};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  rlimit limit = old_limit;
  limit.rlim_cur = 2 * len + len / 2;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &limit), 0);
  for (int i = 0; i < 5; ++i) dl.sink(0)->on_decision(numbered(0, i));
  const bool flushed = dl.flush().has_value();
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &old_limit), 0);
  ASSERT_EQ(sigaction(SIGXFSZ, &old_action, nullptr), 0);
  ASSERT_TRUE(flushed);
  EXPECT_EQ(dl.counters().records_written.get(), 2u);
  EXPECT_EQ(dl.counters().dropped_write_error.get(), 3u);
  dl.sink(0)->on_decision(numbered(0, 7));
  ASSERT_TRUE(dl.flush().has_value());
  const std::vector<std::string> lines = read_lines(path);
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0], line_of(numbered(0, 0)));
  EXPECT_EQ(lines[1], line_of(numbered(0, 1)));
  EXPECT_EQ(lines[2], line_of(numbered(0, 2)).substr(0, len / 2)) << "the torn line, ended";
  EXPECT_EQ(lines[3], line_of(numbered(0, 7)));
  EXPECT_EQ(dl.counters().records_written.get(), 3u);
}

// decision_log: "" on SIGHUP closes the file; records still arriving are discarded.
TEST(DecisionLog, EmptyPathClosesAndAPathOpensAgain) {
  TempDir dir;
  const std::string path = dir.path + "/decisions.jsonl";
  auto f = DecisionLog::open(path, 1, {.period = std::chrono::hours(1)});
  ASSERT_TRUE(f.has_value());
  DecisionLog& dl = *f.value();
  dl.sink(0)->on_decision(numbered(0, 1));
  ASSERT_TRUE(dl.reopen("", 0).has_value());
  dl.sink(0)->on_decision(numbered(0, 2));
  ASSERT_TRUE(dl.flush().has_value());
  EXPECT_EQ(read_lines(path), std::vector<std::string>{line_of(numbered(0, 1))});
  ASSERT_TRUE(dl.reopen(path, 0).has_value());
  dl.sink(0)->on_decision(numbered(0, 3));
  ASSERT_TRUE(dl.flush().has_value());
  EXPECT_EQ(read_lines(path),
            (std::vector<std::string>{line_of(numbered(0, 1)), line_of(numbered(0, 3))}));
}

TEST(DecisionLog, CountersOnTheMetricsPage) {
  const std::string page = render_io_metrics({}, nullptr,
                                             {.records = 7,
                                              .bytes = 2100,
                                              .dropped_queue_full = 3,
                                              .dropped_size_cap = 2,
                                              .dropped_write_error = 1});
  for (const char* line :
       {"rsfcd_decision_log_records_total 7\n", "rsfcd_decision_log_bytes_total 2100\n",
        "rsfcd_decision_log_dropped_total{reason=\"queue_full\"} 3\n",
        "rsfcd_decision_log_dropped_total{reason=\"size_cap\"} 2\n",
        "rsfcd_decision_log_dropped_total{reason=\"write_error\"} 1\n",
        "# TYPE rsfcd_decision_log_dropped_total counter\n"}) {
    EXPECT_NE(page.find(line), std::string::npos) << line;
  }
}

// ---- libevent wrappers + HTTP ---------------------------------------------------------------
std::string http_get(uint16_t port, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
    close(fd);
    return "connect failed";
  }
  const std::string req = "GET " + path + " HTTP/1.0\r\nHost: x\r\n\r\n";
  (void)!write(fd, req.data(), req.size());
  std::string resp;
  char buf[4096];
  for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) resp.append(buf, static_cast<size_t>(n));
  close(fd);
  return resp;
}

TEST(MetricsHttp, ServesMetricsAnd404) {
  ASSERT_TRUE(enable_event_threads().has_value());
  auto base = EventBase::create();
  ASSERT_TRUE(base.has_value());
  int renders = 0;
  auto server = MetricsHttpServer::start(*base, "127.0.0.1:0", [&] {
    ++renders;
    return std::string("rsfcd_test_metric 42\n");
  });
  ASSERT_TRUE(server.has_value()) << server.error().message;
  const uint16_t port = server->port();
  ASSERT_NE(port, 0);

  // A second server on the same port fails with a message naming the address.
  auto clash = MetricsHttpServer::start(*base, "127.0.0.1:" + std::to_string(port),
                                        [] { return std::string(); });
  ASSERT_FALSE(clash.has_value());
  EXPECT_NE(clash.error().message.find("127.0.0.1:" + std::to_string(port)), std::string::npos)
      << clash.error().message;

  std::string metrics, missing;
  std::thread client([&] {
    metrics = http_get(port, "/metrics");
    missing = http_get(port, "/other");
    base->loop_break();
  });
  ASSERT_TRUE(base->run().has_value());
  client.join();
  EXPECT_EQ(metrics.substr(0, 15), "HTTP/1.0 200 OK") << metrics;
  EXPECT_NE(metrics.find("Content-Type: text/plain; version=0.0.4"), std::string::npos);
  EXPECT_NE(metrics.find("\r\n\r\nrsfcd_test_metric 42\n"), std::string::npos) << metrics;
  EXPECT_EQ(missing.substr(0, 12), "HTTP/1.0 404") << missing;
  EXPECT_EQ(renders, 1);
}

TEST(EventLoop, TimerAndCrossThreadWakeUp) {
  ASSERT_TRUE(enable_event_threads().has_value());
  auto base = EventBase::create();
  ASSERT_TRUE(base.has_value());
  int ticks = 0;
  std::atomic<int> wakes{0};
  auto timer = Event::periodic(*base, std::chrono::milliseconds(5), [&](short) { ++ticks; });
  ASSERT_TRUE(timer.has_value());
  auto wake = Event::user(*base, [&](short) {
    if (++wakes == 1) base->loop_break();
  });
  ASSERT_TRUE(wake.has_value());
  Event moved = std::move(wake).value();  // callbacks survive a move of the wrapper
  std::thread other([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(60));
    moved.activate();
  });
  ASSERT_TRUE(base->run().has_value());
  other.join();
  EXPECT_EQ(wakes.load(), 1);
  EXPECT_GE(ticks, 3);
}

// ---- NfQueue against the kernel, in a private network namespace --------------------------
// The whole scenario runs on one thread that unshares its network namespace (children it
// forks, such as iptables, inherit it), so nothing outside the test is affected.
struct Udp {
  int fd = -1;
  explicit Udp(uint16_t bind_port) {
    fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (bind_port != 0) {
      sockaddr_in sa{};
      sa.sin_family = AF_INET;
      sa.sin_port = htons(bind_port);
      sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      if (bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
        close(fd);
        fd = -1;
      }
    }
  }
  ~Udp() {
    if (fd >= 0) close(fd);
  }
  void send_to(uint16_t port, const std::string& s) const {
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    (void)sendto(fd, s.data(), s.size(), 0, reinterpret_cast<sockaddr*>(&sa), sizeof(sa));
  }
  std::vector<std::string> recv_all(int wait_ms) const {
    std::vector<std::string> out;
    pollfd p{fd, POLLIN, 0};
    while (poll(&p, 1, wait_ms) > 0) {
      char buf[2048];
      const ssize_t n = recv(fd, buf, sizeof(buf), 0);
      if (n < 0) break;
      out.emplace_back(buf, static_cast<size_t>(n));
    }
    return out;
  }
};

// Collects packets the queue hands out.
std::vector<std::pair<NfqPacket, std::vector<uint8_t>>> receive_n(NfQueue& q, size_t n) {
  std::vector<std::pair<NfqPacket, std::vector<uint8_t>>> got;
  for (int i = 0; i < 100 && got.size() < n; ++i) {
    pollfd p{q.fd(), POLLIN, 0};
    poll(&p, 1, 20);
    auto r = q.receive(64, [&](const NfqPacket& pk) {
      got.emplace_back(pk, std::vector<uint8_t>(pk.data.begin(), pk.data.end()));
    });
    if (!r) break;
  }
  return got;
}

TEST(NfQueueKernel, BindVerdictModifyDropDrain) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root";
  std::string skip, failure;
  std::thread t([&] {
    if (unshare(CLONE_NEWNET) != 0) {
      skip = std::string("unshare(CLONE_NEWNET): ") + std::strerror(errno);
      return;
    }
    if (std::system("ip link set lo up") != 0 ||
        std::system("iptables-legacy -w -A OUTPUT -o lo -p udp --dport 9 "
                    "-j NFQUEUE --queue-num 7 2>/dev/null") != 0) {
      skip = "ip / iptables-legacy NFQUEUE not available";
      return;
    }
    QueueCounters counters;
    NfQueue::Options o;
    o.queue_num = 7;
    o.batch_size = 16;
    o.counters = &counters;
    auto q = NfQueue::open(o);
    if (!q) {
      failure = q.error().message;
      return;
    }
    // The queue is visible in the kernel's table with our port id, copying whole packets.
    auto stats = read_kernel_queue_stats();
    bool listed = false;
    if (stats) {
      for (const auto& s : *stats) {
        listed |= s.queue_num == 7 && s.portid == q->portid() && s.copy_mode == 2;
      }
    }
    EXPECT_TRUE(listed);
    // A second bind of the same queue is a clear error naming the queue.
    auto again = NfQueue::open(o);
    EXPECT_FALSE(again.has_value());
    if (!again) {
      EXPECT_NE(again.error().message.find("nfqueue 7"), std::string::npos)
          << again.error().message;
    }

    Udp rx(9), tx(0);
    ASSERT_GE(rx.fd, 0);
    for (int i = 1; i <= 5; ++i) tx.send_to(9, "packet-" + std::to_string(i));
    auto got = receive_n(*q, 5);
    ASSERT_EQ(got.size(), 5u);
    for (size_t i = 0; i < got.size(); ++i) {
      const auto& [p, bytes] = got[i];
      EXPECT_EQ(p.hw_protocol, 0x0800);
      EXPECT_EQ(bytes.size(), 20u + 8u + 8u);  // IPv4 + UDP + "packet-N"
      EXPECT_EQ(p.orig_len, bytes.size());
      EXPECT_FALSE(p.truncated());
      EXPECT_EQ(bytes[0] >> 4, 4);
      if (i > 0) {
        EXPECT_EQ(p.id, got[i - 1].first.id + 1);
      }
    }
    // 1, 2: unchanged; 3: modified payload (UDP checksum 0 = none); 4: dropped; 5: unchanged.
    ASSERT_TRUE(q->add_verdict(got[0].first.id, kNfAccept).has_value());
    ASSERT_TRUE(q->add_verdict(got[1].first.id, kNfAccept).has_value());
    std::vector<uint8_t> mod = got[2].second;
    mod[mod.size() - 1] = 'X';
    mod[26] = mod[27] = 0;
    ASSERT_TRUE(q->add_verdict(got[2].first.id, kNfAccept, mod).has_value());
    ASSERT_TRUE(q->add_verdict(got[3].first.id, kNfDrop).has_value());
    ASSERT_TRUE(q->add_verdict(got[4].first.id, kNfAccept).has_value());
    EXPECT_EQ(q->pending_verdicts(), 5u);
    ASSERT_TRUE(q->flush().has_value());
    EXPECT_EQ(q->pending_verdicts(), 0u);
    EXPECT_EQ(rx.recv_all(200),
              (std::vector<std::string>{"packet-1", "packet-2", "packet-X", "packet-5"}));

    // Shutdown path: packets queued but not yet read are drained and get verdicts.
    for (int i = 6; i <= 8; ++i) tx.send_to(9, "packet-" + std::to_string(i));
    auto drained =
        q->drain_and_close([&](const NfqPacket& p) { (void)q->add_verdict(p.id, kNfAccept); });
    ASSERT_TRUE(drained.has_value()) << drained.error().message;
    EXPECT_EQ(*drained, 3u);
    EXPECT_FALSE(q->is_open());
    EXPECT_EQ(rx.recv_all(200), (std::vector<std::string>{"packet-6", "packet-7", "packet-8"}));
    EXPECT_EQ(counters.packets_received.get(), 8u);
    EXPECT_EQ(counters.verdicts_sent.get(), 8u);
    EXPECT_EQ(counters.verdicts_with_payload.get(), 1u);
    EXPECT_EQ(counters.send_errors.get(), 0u);
    EXPECT_EQ(counters.overruns.get(), 0u);
    // Unbound: the kernel no longer lists the queue.
    auto after = read_kernel_queue_stats();
    ASSERT_TRUE(after.has_value());
    for (const auto& s : *after) EXPECT_NE(s.queue_num, 7);
  });
  t.join();
  if (!skip.empty()) GTEST_SKIP() << skip;
  EXPECT_TRUE(failure.empty()) << failure;
}

}  // namespace
}  // namespace rsfc
