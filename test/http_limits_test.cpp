// The /metrics server's limits, over real loopback sockets: connections beyond the cap are
// closed at once, an oversized request head gets 431, a client too slow to send its request
// is cut off at the deadline; and what the server answers to well-formed requests.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "rsfc/io/event_loop.h"
#include "rsfc/io/http_metrics.h"
#include "rsfc/io/io_metrics.h"

namespace rsfc {
namespace {

using std::chrono::milliseconds;

// A server on 127.0.0.1 whose loop runs on its own thread for the test's lifetime.
class LoopbackServer {
 public:
  explicit LoopbackServer(HttpLimits limits = {}) {
    EXPECT_TRUE(enable_event_threads().has_value());
    auto b = EventBase::create();
    EXPECT_TRUE(b.has_value());
    base_ = std::move(b).value();
    auto s = MetricsHttpServer::start(
        base_, "127.0.0.1:0", [] { return std::string("rsfcd_test_metric 42\n"); }, limits);
    EXPECT_TRUE(s.has_value()) << (s ? "" : s.error().message);
    if (s) server_ = std::move(s).value();
    // A wake-up breaks the loop even if it fires before run() starts (loopbreak would not).
    auto stop = Event::user(base_, [this](short) { base_.loop_break(); });
    EXPECT_TRUE(stop.has_value());
    stop_ = std::move(stop).value();
    thread_ = std::thread([this] { (void)base_.run(); });
  }
  ~LoopbackServer() {
    stop_.activate();
    thread_.join();
  }
  uint16_t port() const { return server_.port(); }
  const HttpServerCounters& counters() const { return *server_.counters(); }

 private:
  EventBase base_;
  MetricsHttpServer server_;
  Event stop_;
  std::thread thread_;
};

int connect_to(uint16_t port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

void send_text(int fd, const std::string& s) {
  ASSERT_EQ(send(fd, s.data(), s.size(), MSG_NOSIGNAL), static_cast<ssize_t>(s.size()));
}

struct ReadResult {
  std::string data;
  bool closed = false;  // the server closed (EOF or reset) within the wait
};

// Reads until the server closes the connection or `wait` passes without anything new.
ReadResult read_until_closed(int fd, milliseconds wait = milliseconds(3000)) {
  ReadResult r;
  char buf[4096];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(wait.count())) <= 0) return r;
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) {
      r.closed = true;
      return r;
    }
    r.data.append(buf, static_cast<size_t>(n));
  }
}

std::string request(uint16_t port, const std::string& text) {
  const int fd = connect_to(port);
  EXPECT_GE(fd, 0);
  send_text(fd, text);
  ReadResult r = read_until_closed(fd);
  close(fd);
  EXPECT_TRUE(r.closed) << "one request per connection";
  return r.data;
}

// Polls `done` until it holds (bounded, so that a bug fails instead of hanging).
bool eventually(const std::function<bool()>& done) {
  for (int i = 0; i < 3000 && !done(); ++i) std::this_thread::sleep_for(milliseconds(1));
  return done();
}

TEST(MetricsHttpLimits, ConnectionsBeyondTheCapAreClosedAtOnce) {
  LoopbackServer srv;  // the default cap: 16
  std::vector<int> idle;
  for (int i = 0; i < 16; ++i) idle.push_back(connect_to(srv.port()));
  ASSERT_TRUE(eventually([&] { return srv.counters().connections_open.get() == 16; }));
  const int extra = connect_to(srv.port());
  ASSERT_GE(extra, 0);
  const ReadResult r = read_until_closed(extra);
  EXPECT_TRUE(r.closed) << "the 17th connection is closed without waiting for its request";
  EXPECT_TRUE(r.data.empty());
  close(extra);
  EXPECT_EQ(srv.counters().connections_rejected.get(), 1u);

  // One idle client leaves: there is room again.
  close(idle.back());
  idle.pop_back();
  ASSERT_TRUE(eventually([&] { return srv.counters().connections_open.get() == 15; }));
  EXPECT_EQ(request(srv.port(), "GET /metrics HTTP/1.0\r\n\r\n").substr(0, 15), "HTTP/1.0 200 OK");
  for (int fd : idle) close(fd);
  EXPECT_EQ(srv.counters().connections_accepted.get(), 17u);
}

TEST(MetricsHttpLimits, OversizedRequestHeadGets431) {
  LoopbackServer srv;  // the default limit: 8 KiB
  const std::string pad(9000, 'a');
  const std::string big =
      request(srv.port(), "GET /metrics HTTP/1.1\r\nX-Pad: " + pad + "\r\n\r\n");
  EXPECT_EQ(big.substr(0, 45), "HTTP/1.1 431 Request Header Fields Too Large\r") << big;
  // Headers that never end are cut at the limit too, not buffered without bound.
  const int fd = connect_to(srv.port());
  send_text(fd, "GET /metrics HTTP/1.1\r\n");
  // The server may answer and close as soon as the limit is passed: a later send then fails
  // (EPIPE/ECONNRESET), which is the point, so stop sending there.
  for (int i = 0; i < 40; ++i) {
    const std::string line = "X-Pad: " + std::string(500, 'b') + "\r\n";
    if (send(fd, line.data(), line.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(line.size())) {
      break;
    }
  }
  const ReadResult r = read_until_closed(fd);
  close(fd);
  EXPECT_TRUE(r.closed);
  // The 431 is sent, but a reset (the server closed with our unread bytes in its buffer) may
  // reach the client first and discard it; the server's counter says what it decided.
  if (!r.data.empty()) {
    EXPECT_EQ(r.data.substr(0, 12), "HTTP/1.1 431");
  }
  EXPECT_EQ(srv.counters().requests_too_large.get(), 2u);
  // Just under the limit is fine.
  const std::string ok =
      request(srv.port(), "GET /metrics HTTP/1.1\r\nX-Pad: " + std::string(8000, 'c') + "\r\n\r\n");
  EXPECT_EQ(ok.substr(0, 15), "HTTP/1.1 200 OK") << ok.substr(0, 100);
}

TEST(MetricsHttpLimits, SlowClientsAreCutOffAtTheDeadline) {
  LoopbackServer srv({.deadline = milliseconds(200)});
  // A client that trickles its request a byte at a time never completes it in time; each
  // byte would have reset an inactivity timeout.
  const int slow = connect_to(srv.port());
  const std::string req = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
  bool cut = false;
  for (size_t i = 0; i + 1 < req.size() && !cut; ++i) {
    if (send(slow, &req[i], 1, MSG_NOSIGNAL) != 1) break;
    pollfd p{slow, POLLIN, 0};
    cut = poll(&p, 1, 50) > 0;
  }
  const ReadResult r = read_until_closed(slow);
  close(slow);
  EXPECT_TRUE(r.closed);
  EXPECT_TRUE(r.data.empty()) << r.data;
  // A client that connects and says nothing.
  const int mute = connect_to(srv.port());
  EXPECT_TRUE(read_until_closed(mute).closed);
  close(mute);
  EXPECT_EQ(srv.counters().deadlines_missed.get(), 2u);
  EXPECT_TRUE(eventually([&] { return srv.counters().connections_open.get() == 0; }));
}

TEST(MetricsHttpLimits, AnswersWellFormedRequests) {
  LoopbackServer srv;
  const std::string get = request(srv.port(), "GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\n\r\n");
  EXPECT_EQ(get.substr(0, 17), "HTTP/1.1 200 OK\r\n") << get;
  EXPECT_NE(get.find("\r\nContent-Type: text/plain; version=0.0.4"), std::string::npos);
  EXPECT_NE(get.find("\r\nContent-Length: 21\r\n"), std::string::npos) << get;
  EXPECT_NE(get.find("\r\nConnection: close\r\n"), std::string::npos);
  EXPECT_EQ(get.substr(get.size() - 21), "rsfcd_test_metric 42\n");

  const std::string head = request(srv.port(), "HEAD /metrics HTTP/1.0\r\n\r\n");
  EXPECT_EQ(head.substr(0, 15), "HTTP/1.0 200 OK");
  EXPECT_NE(head.find("\r\nContent-Length: 21\r\n"), std::string::npos);
  EXPECT_EQ(head.substr(head.size() - 4), "\r\n\r\n") << "no body";

  EXPECT_EQ(request(srv.port(), "GET / HTTP/1.1\n\n").substr(0, 12), "HTTP/1.1 404");
  const std::string post = request(srv.port(), "POST /metrics HTTP/1.1\r\n\r\n");
  EXPECT_EQ(post.substr(0, 12), "HTTP/1.1 405");
  EXPECT_NE(post.find("\r\nAllow: GET, HEAD\r\n"), std::string::npos);
  EXPECT_EQ(request(srv.port(), "hello\r\n\r\n").substr(0, 12), "HTTP/1.0 400");
  EXPECT_EQ(srv.counters().bad_requests.get(), 2u);
}

TEST(MetricsHttpLimits, CountersAreOnTheMetricsPage) {
  HttpServerCounters c;
  c.connections_rejected.add(3);
  c.requests_too_large.add(2);
  c.connections_open.set(5);
  const std::string page = render_io_metrics({}, &c);
  EXPECT_NE(page.find("\nrsfcd_metrics_http_connections_rejected_total 3\n"), std::string::npos)
      << page;
  EXPECT_NE(page.find("\nrsfcd_metrics_http_requests_too_large_total 2\n"), std::string::npos);
  EXPECT_NE(page.find("# TYPE rsfcd_metrics_http_connections_open gauge\n"), std::string::npos);
  EXPECT_NE(page.find("\nrsfcd_metrics_http_connections_open 5\n"), std::string::npos);
  EXPECT_EQ(render_io_metrics({}, nullptr).find("rsfcd_metrics_http"), std::string::npos);
}

}  // namespace
}  // namespace rsfc
