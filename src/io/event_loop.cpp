#include "rsfc/io/event_loop.h"

#include <event2/event.h>
#include <event2/thread.h>

#include <algorithm>
#include <cerrno>
#include <mutex>
#include <utility>

namespace rsfc {

Expected<void> enable_event_threads() {
  static std::once_flag once;
  static int rc = 0;
  std::call_once(once, [] { rc = evthread_use_pthreads(); });
  if (rc != 0) return Error::msg("libevent: evthread_use_pthreads failed");
  return {};
}

Expected<EventBase> EventBase::create() {
  // Precise timers (epoll with a timerfd): the downlink pacer's releases are due a
  // millisecond or less apart; the default rounds timeouts to whole milliseconds.
  event_config* cfg = event_config_new();
  if (cfg == nullptr) return Error::msg("libevent: event_config_new failed");
  event_config_set_flag(cfg, EVENT_BASE_FLAG_PRECISE_TIMER);
  event_base* b = event_base_new_with_config(cfg);
  event_config_free(cfg);
  if (b == nullptr) return Error::msg("libevent: event_base_new failed");
  return EventBase(b);
}

EventBase::EventBase(EventBase&& o) noexcept : base_(std::exchange(o.base_, nullptr)) {}

EventBase& EventBase::operator=(EventBase&& o) noexcept {
  if (this != &o) {
    if (base_ != nullptr) event_base_free(base_);
    base_ = std::exchange(o.base_, nullptr);
  }
  return *this;
}

EventBase::~EventBase() {
  if (base_ != nullptr) event_base_free(base_);
}

Expected<void> EventBase::run() {
  if (event_base_dispatch(base_) < 0) return Error::msg("libevent: event_base_dispatch failed");
  return {};
}

void EventBase::loop_break() {
  if (base_ != nullptr) event_base_loopbreak(base_);
}

struct Event::State {
  Callback cb;
  event* ev = nullptr;
  ~State() {
    if (ev != nullptr) event_free(ev);  // event_free also removes it
  }
  static void trampoline(evutil_socket_t, short what, void* arg) {
    static_cast<State*>(arg)->cb(what);
  }
};

Event::Event(std::unique_ptr<State> s) : state_(std::move(s)) {}
Event::Event() = default;
Event::Event(Event&&) noexcept = default;
Event& Event::operator=(Event&&) noexcept = default;
Event::~Event() = default;

Expected<Event> Event::reader(EventBase& base, int fd, Callback cb) {
  auto s = std::make_unique<State>();
  s->cb = std::move(cb);
  s->ev = event_new(base.get(), fd, EV_READ | EV_PERSIST, &State::trampoline, s.get());
  if (s->ev == nullptr) return Error::msg("libevent: event_new failed");
  if (event_add(s->ev, nullptr) != 0) return Error::msg("libevent: event_add failed");
  return Event(std::move(s));
}

Expected<Event> Event::periodic(EventBase& base, std::chrono::nanoseconds period, Callback cb) {
  auto s = std::make_unique<State>();
  s->cb = std::move(cb);
  s->ev = event_new(base.get(), -1, EV_PERSIST, &State::trampoline, s.get());
  if (s->ev == nullptr) return Error::msg("libevent: event_new failed");
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(period).count();
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(us / 1'000'000);
  tv.tv_usec = static_cast<suseconds_t>(us % 1'000'000);
  if (event_add(s->ev, &tv) != 0) return Error::msg("libevent: event_add failed");
  return Event(std::move(s));
}

Expected<Event> Event::user(EventBase& base, Callback cb) {
  auto s = std::make_unique<State>();
  s->cb = std::move(cb);
  s->ev = event_new(base.get(), -1, 0, &State::trampoline, s.get());
  if (s->ev == nullptr) return Error::msg("libevent: event_new failed");
  return Event(std::move(s));
}

bool Event::arm(std::chrono::nanoseconds delay) {
  if (!state_ || state_->ev == nullptr) return false;
  const auto us =
      std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::microseconds>(delay).count());
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(us / 1'000'000);
  tv.tv_usec = static_cast<suseconds_t>(us % 1'000'000);
  return event_add(state_->ev, &tv) == 0;
}

void Event::activate() {
  if (state_ && state_->ev != nullptr) event_active(state_->ev, EV_TIMEOUT, 0);
}

void Event::remove() {
  if (state_ && state_->ev != nullptr) event_del(state_->ev);
}

}  // namespace rsfc
