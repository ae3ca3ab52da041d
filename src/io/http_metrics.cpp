#include "rsfc/io/http_metrics.h"

#include <arpa/inet.h>
#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <charconv>
#include <cstring>

namespace rsfc {

Expected<ListenAddress> parse_listen_address(std::string_view text) {
  auto bad = [&](const char* why) {
    return Error{EINVAL, "metrics.listen \"" + std::string(text) + "\": " + why};
  };
  ListenAddress a;
  std::string_view port_text;
  if (!text.empty() && text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return bad("expected [ipv6]:port");
    }
    a.host = std::string(text.substr(1, close - 1));
    port_text = text.substr(close + 2);
    in6_addr tmp{};
    if (inet_pton(AF_INET6, a.host.c_str(), &tmp) != 1) return bad("not an IPv6 address");
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) return bad("expected host:port");
    a.host = std::string(text.substr(0, colon));
    port_text = text.substr(colon + 1);
    in_addr tmp{};
    if (inet_pton(AF_INET, a.host.c_str(), &tmp) != 1) return bad("not an IPv4 address");
  }
  unsigned port = 0;
  auto [p, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (port_text.empty() || ec != std::errc() || p != port_text.data() + port_text.size() ||
      port > 65535) {
    return bad("bad port");
  }
  a.port = static_cast<uint16_t>(port);
  return a;
}

struct MetricsHttpServer::State {
  Render render;
  evhttp* http = nullptr;
  uint16_t port = 0;
  ~State() {
    if (http != nullptr) evhttp_free(http);
  }

  static void handle(evhttp_request* req, void* arg) {
    auto* self = static_cast<State*>(arg);
    const evhttp_uri* uri = evhttp_request_get_evhttp_uri(req);
    const char* path = uri != nullptr ? evhttp_uri_get_path(uri) : nullptr;
    evbuffer* body = evbuffer_new();
    if (body == nullptr) {
      evhttp_send_error(req, HTTP_INTERNAL, nullptr);
      return;
    }
    evkeyvalq* headers = evhttp_request_get_output_headers(req);
    if (path != nullptr && std::strcmp(path, "/metrics") == 0) {
      const std::string text = self->render();
      evbuffer_add(body, text.data(), text.size());
      evhttp_add_header(headers, "Content-Type", "text/plain; version=0.0.4; charset=utf-8");
      evhttp_send_reply(req, HTTP_OK, "OK", body);
    } else {
      static constexpr char kNotFound[] = "not found; try /metrics\n";
      evbuffer_add(body, kNotFound, sizeof(kNotFound) - 1);
      evhttp_add_header(headers, "Content-Type", "text/plain; charset=utf-8");
      evhttp_send_reply(req, HTTP_NOTFOUND, "Not Found", body);
    }
    evbuffer_free(body);
  }
};

MetricsHttpServer::MetricsHttpServer(std::unique_ptr<State> s) : state_(std::move(s)) {}
MetricsHttpServer::MetricsHttpServer() = default;
MetricsHttpServer::MetricsHttpServer(MetricsHttpServer&&) noexcept = default;
MetricsHttpServer& MetricsHttpServer::operator=(MetricsHttpServer&&) noexcept = default;
MetricsHttpServer::~MetricsHttpServer() = default;

uint16_t MetricsHttpServer::port() const {
  return state_ ? state_->port : 0;
}

Expected<MetricsHttpServer> MetricsHttpServer::start(EventBase& base, std::string_view listen,
                                                     Render render) {
  auto addr = parse_listen_address(listen);
  if (!addr) return addr.error();
  auto s = std::make_unique<State>();
  s->render = std::move(render);
  s->http = evhttp_new(base.get());
  if (s->http == nullptr) return Error::msg("metrics: evhttp_new failed");
  evhttp_set_allowed_methods(s->http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD);
  evhttp_set_timeout(s->http, 10);
  evhttp_set_gencb(s->http, &State::handle, s.get());
  errno = 0;
  evhttp_bound_socket* bound =
      evhttp_bind_socket_with_handle(s->http, addr->host.c_str(), addr->port);
  if (bound == nullptr) {
    const int err = errno != 0 ? errno : EADDRNOTAVAIL;
    return Error{err,
                 "metrics: cannot listen on " + std::string(listen) + ": " + std::strerror(err)};
  }
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (getsockname(evhttp_bound_socket_get_fd(bound), reinterpret_cast<sockaddr*>(&ss), &len) == 0) {
    if (ss.ss_family == AF_INET) {
      s->port = ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
    } else if (ss.ss_family == AF_INET6) {
      s->port = ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
    }
  }
  return MetricsHttpServer(std::move(s));
}

}  // namespace rsfc
