// GET /metrics over HTTP/1.x on a given event base; every other path is 404. A small
// server of its own (libevent listener + bufferevents, not evhttp) so that it can hold its
// limits: at most `max_connections` open at once (more are closed at once), a request head
// of at most `max_request_bytes` (larger: 431), and a deadline by which a connection must
// have sent its request and taken the reply (slow clients are cut off). One request per
// connection ("Connection: close").
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "rsfc/core/expected.h"
#include "rsfc/core/metrics.h"
#include "rsfc/io/event_loop.h"

namespace rsfc {

struct ListenAddress {
  std::string host;  // numeric IPv4 or IPv6 (without brackets)
  uint16_t port = 0;
};

// "127.0.0.1:9477" or "[::1]:9477". Port 0 is allowed (an ephemeral port, for tests).
Expected<ListenAddress> parse_listen_address(std::string_view text);

struct HttpLimits {
  uint32_t max_connections = 16;
  size_t max_request_bytes = 8192;  // request line + headers
  std::chrono::milliseconds deadline{5000};
};

// The server's own counters (one writer: the loop's thread), rendered by render_io_metrics.
struct HttpServerCounters {
  Counter connections_accepted;
  Counter connections_rejected;  // over max_connections: closed unanswered
  Counter requests_too_large;    // 431
  Counter deadlines_missed;      // closed at the deadline (slow or idle clients)
  Counter bad_requests;          // 400 / 405
  Counter connections_open;      // gauge
};

class MetricsHttpServer {
 public:
  using Render = std::function<std::string()>;  // the body of /metrics, called per request

  // Binds and starts serving on `base` (the caller runs the loop). A bind failure is an
  // Error naming the address.
  static Expected<MetricsHttpServer> start(EventBase& base, std::string_view listen, Render render,
                                           HttpLimits limits = {});

  MetricsHttpServer();
  MetricsHttpServer(MetricsHttpServer&&) noexcept;
  MetricsHttpServer& operator=(MetricsHttpServer&&) noexcept;
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;
  ~MetricsHttpServer();

  uint16_t port() const;                       // the bound port (useful with port 0)
  const HttpServerCounters* counters() const;  // null on a server that was never started

 private:
  struct State;
  explicit MetricsHttpServer(std::unique_ptr<State> s);
  std::unique_ptr<State> state_;
};

}  // namespace rsfc
