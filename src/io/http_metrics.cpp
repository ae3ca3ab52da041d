#include "rsfc/io/http_metrics.h"

#include <arpa/inet.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <utility>

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

namespace {

// A listening TCP socket on `a`, close-on-exec and non-blocking: the fd or an errno.
Expected<int> listen_on(const ListenAddress& a) {
  sockaddr_storage ss{};
  socklen_t len = 0;
  int family = AF_INET;
  if (a.host.find(':') != std::string::npos) {
    family = AF_INET6;
    auto* sa = reinterpret_cast<sockaddr_in6*>(&ss);
    sa->sin6_family = AF_INET6;
    sa->sin6_port = htons(a.port);
    inet_pton(AF_INET6, a.host.c_str(), &sa->sin6_addr);
    len = sizeof(sockaddr_in6);
  } else {
    auto* sa = reinterpret_cast<sockaddr_in*>(&ss);
    sa->sin_family = AF_INET;
    sa->sin_port = htons(a.port);
    inet_pton(AF_INET, a.host.c_str(), &sa->sin_addr);
    len = sizeof(sockaddr_in);
  }
  const int fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return Error::from_errno(errno, "socket");
  const int one = 1;
  (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0 || listen(fd, 64) != 0) {
    const int err = errno;
    ::close(fd);
    return Error{err, std::strerror(err)};
  }
  return fd;
}

uint16_t bound_port(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return 0;
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  return 0;
}

// The end of the request head (the blank line), counted from the start; npos if not there.
size_t head_end(std::string_view in) {
  const size_t crlf = in.find("\r\n\r\n");
  const size_t lf = in.find("\n\n");
  if (crlf != std::string_view::npos && (lf == std::string_view::npos || crlf < lf)) {
    return crlf + 4;
  }
  return lf == std::string_view::npos ? lf : lf + 2;
}

struct Reply {
  int status = 200;
  const char* reason = "OK";
  const char* content_type = "text/plain; charset=utf-8";
  std::string body = {};
  bool head_only = false;  // HEAD: headers (with the body's length) only
  const char* extra_header = nullptr;
};

}  // namespace

struct MetricsHttpServer::State {
  // One client connection: its bufferevent and its deadline.
  struct Conn {
    State* server = nullptr;
    bufferevent* bev = nullptr;
    event* deadline = nullptr;
  };

  Render render;
  HttpLimits limits;
  HttpServerCounters counters;
  event_base* base = nullptr;
  evconnlistener* listener = nullptr;
  uint16_t port = 0;
  std::vector<Conn*> conns;  // at most limits.max_connections

  ~State() {
    if (listener != nullptr) evconnlistener_free(listener);
    while (!conns.empty()) drop(conns.back());
  }

  void drop(Conn* c) {
    bufferevent_free(c->bev);  // closes the socket
    event_free(c->deadline);
    std::erase(conns, c);
    delete c;
    counters.connections_open.set(conns.size());
  }

  static void on_accept(evconnlistener*, evutil_socket_t fd, sockaddr*, int, void* arg) {
    auto* self = static_cast<State*>(arg);
    if (self->conns.size() >= self->limits.max_connections) {
      self->counters.connections_rejected.add();
      ::close(fd);
      return;
    }
    auto* c = new Conn{self, nullptr, nullptr};
    c->bev = bufferevent_socket_new(self->base, fd, BEV_OPT_CLOSE_ON_FREE);
    c->deadline = evtimer_new(self->base, &State::on_deadline, c);
    if (c->bev == nullptr || c->deadline == nullptr) {
      if (c->bev != nullptr) bufferevent_free(c->bev);
      if (c->deadline != nullptr) event_free(c->deadline);
      if (c->bev == nullptr) ::close(fd);
      delete c;
      return;
    }
    self->conns.push_back(c);
    self->counters.connections_accepted.add();
    self->counters.connections_open.set(self->conns.size());
    const auto ms = self->limits.deadline.count();
    const timeval tv{static_cast<time_t>(ms / 1000), static_cast<suseconds_t>(ms % 1000 * 1000)};
    evtimer_add(c->deadline, &tv);
    // Never buffer more than one byte past the limit: that byte is how we know it is over.
    bufferevent_setwatermark(c->bev, EV_READ, 0, self->limits.max_request_bytes + 1);
    bufferevent_setcb(c->bev, &State::on_read, nullptr, &State::on_event, c);
    bufferevent_enable(c->bev, EV_READ);
  }

  static void on_deadline(evutil_socket_t, short, void* arg) {
    auto* c = static_cast<Conn*>(arg);
    c->server->counters.deadlines_missed.add();
    c->server->drop(c);
  }

  static void on_event(bufferevent*, short, void* arg) {  // EOF or error: the client left
    auto* c = static_cast<Conn*>(arg);
    c->server->drop(c);
  }

  static void on_written(bufferevent* bev, void* arg) {
    if (evbuffer_get_length(bufferevent_get_output(bev)) == 0) {
      auto* c = static_cast<Conn*>(arg);
      c->server->drop(c);
    }
  }

  static void on_read(bufferevent* bev, void* arg) {
    auto* c = static_cast<Conn*>(arg);
    State& self = *c->server;
    evbuffer* in = bufferevent_get_input(bev);
    const size_t len = evbuffer_get_length(in);
    const std::string_view data(reinterpret_cast<const char*>(evbuffer_pullup(in, -1)), len);
    const size_t end = head_end(data);
    if (end == std::string_view::npos || end > self.limits.max_request_bytes) {
      if (len <= self.limits.max_request_bytes && end == std::string_view::npos) return;
      self.counters.requests_too_large.add();
      self.send(c, "HTTP/1.1",
                {.status = 431,
                 .reason = "Request Header Fields Too Large",
                 .body = "request head over " + std::to_string(self.limits.max_request_bytes) +
                         " bytes\n"});
      return;
    }
    self.answer(c, data.substr(0, data.find('\n')));
  }

  // Answers the request line "METHOD TARGET HTTP/1.x".
  void answer(Conn* c, std::string_view line) {
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    const size_t sp1 = line.find(' ');
    const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
    const std::string_view method = line.substr(0, sp1);
    const std::string_view target =
        sp2 == std::string_view::npos ? std::string_view() : line.substr(sp1 + 1, sp2 - sp1 - 1);
    const std::string_view version =
        sp2 == std::string_view::npos ? std::string_view() : line.substr(sp2 + 1);
    if (version != "HTTP/1.0" && version != "HTTP/1.1") {
      counters.bad_requests.add();
      send(c, "HTTP/1.0", {.status = 400, .reason = "Bad Request", .body = "bad request\n"});
      return;
    }
    if (method != "GET" && method != "HEAD") {
      counters.bad_requests.add();
      send(c, version,
           {.status = 405,
            .reason = "Method Not Allowed",
            .body = "GET or HEAD only\n",
            .extra_header = "Allow: GET, HEAD\r\n"});
      return;
    }
    Reply r{.head_only = method == "HEAD"};
    if (target.substr(0, target.find('?')) == "/metrics") {
      r.content_type = "text/plain; version=0.0.4; charset=utf-8";
      r.body = render();
    } else {
      r.status = 404;
      r.reason = "Not Found";
      r.body = "not found; try /metrics\n";
    }
    send(c, version, r);
  }

  // Queues the reply, stops reading, and closes once it is written (or at the deadline).
  void send(Conn* c, std::string_view version, const Reply& r) {
    std::string head(version);
    head += ' ' + std::to_string(r.status) + ' ' + r.reason +
            "\r\nContent-Type: " + r.content_type +
            "\r\nContent-Length: " + std::to_string(r.body.size()) + "\r\nConnection: close\r\n";
    if (r.extra_header != nullptr) head += r.extra_header;
    head += "\r\n";
    bufferevent_disable(c->bev, EV_READ);
    evbuffer* out = bufferevent_get_output(c->bev);
    evbuffer_add(out, head.data(), head.size());
    if (!r.head_only) evbuffer_add(out, r.body.data(), r.body.size());
    bufferevent_setcb(c->bev, nullptr, &State::on_written, &State::on_event, c);
    bufferevent_enable(c->bev, EV_WRITE);
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

const HttpServerCounters* MetricsHttpServer::counters() const {
  return state_ ? &state_->counters : nullptr;
}

Expected<MetricsHttpServer> MetricsHttpServer::start(EventBase& base, std::string_view listen,
                                                     Render render, HttpLimits limits) {
  auto addr = parse_listen_address(listen);
  if (!addr) return addr.error();
  auto fd = listen_on(*addr);
  if (!fd) {
    return Error{fd.error().code,
                 "metrics: cannot listen on " + std::string(listen) + ": " + fd.error().message};
  }
  auto s = std::make_unique<State>();
  s->render = std::move(render);
  s->limits = limits;
  s->limits.max_connections = std::max<uint32_t>(1, limits.max_connections);
  s->base = base.get();
  s->port = bound_port(*fd);
  s->listener = evconnlistener_new(s->base, &State::on_accept, s.get(),
                                   LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, -1, *fd);
  if (s->listener == nullptr) {
    ::close(*fd);
    return Error::msg("metrics: evconnlistener_new failed");
  }
  return MetricsHttpServer(std::move(s));
}

}  // namespace rsfc
