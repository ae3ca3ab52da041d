// GET /metrics over HTTP (libevent evhttp) on a given event base; every other path is 404.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "rsfc/core/expected.h"
#include "rsfc/io/event_loop.h"

namespace rsfc {

struct ListenAddress {
  std::string host;  // numeric IPv4 or IPv6 (without brackets)
  uint16_t port = 0;
};

// "127.0.0.1:9477" or "[::1]:9477". Port 0 is allowed (an ephemeral port, for tests).
Expected<ListenAddress> parse_listen_address(std::string_view text);

class MetricsHttpServer {
 public:
  using Render = std::function<std::string()>;  // the body of /metrics, called per request

  // Binds and starts serving on `base` (the caller runs the loop). A bind failure is an
  // Error naming the address.
  static Expected<MetricsHttpServer> start(EventBase& base, std::string_view listen, Render render);

  MetricsHttpServer();
  MetricsHttpServer(MetricsHttpServer&&) noexcept;
  MetricsHttpServer& operator=(MetricsHttpServer&&) noexcept;
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;
  ~MetricsHttpServer();

  uint16_t port() const;  // the bound port (useful with port 0)

 private:
  struct State;
  explicit MetricsHttpServer(std::unique_ptr<State> s);
  std::unique_ptr<State> state_;
};

}  // namespace rsfc
