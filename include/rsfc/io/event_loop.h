// Move-only RAII wrappers around libevent: an event base and events (fd, timer, user
// wake-up). Callbacks are std::function objects stored once per event (no allocation per
// firing); the event keeps its state on the heap so that moving the wrapper is safe while
// libevent holds a pointer to it.
#pragma once

#include <chrono>
#include <functional>
#include <memory>

#include "rsfc/core/expected.h"

struct event_base;
struct event;

namespace rsfc {

// Makes libevent thread-aware (locks, cross-thread wake-ups). Call once, before creating
// any EventBase that another thread will wake (Event::activate) or break.
Expected<void> enable_event_threads();

class EventBase {
 public:
  static Expected<EventBase> create();
  EventBase() = default;
  EventBase(EventBase&& o) noexcept;
  EventBase& operator=(EventBase&& o) noexcept;
  EventBase(const EventBase&) = delete;
  EventBase& operator=(const EventBase&) = delete;
  ~EventBase();

  event_base* get() const { return base_; }
  // Runs until loop_break() or no events are left. Returns an Error if libevent failed.
  Expected<void> run();
  // Makes run() return after the current callback (thread-safe with enable_event_threads).
  void loop_break();

 private:
  explicit EventBase(event_base* b) : base_(b) {}
  event_base* base_ = nullptr;
};

class Event {
 public:
  using Callback = std::function<void(short what)>;  // what: EV_READ / EV_TIMEOUT / ...

  // A persistent read event on `fd` (level-triggered).
  static Expected<Event> reader(EventBase& base, int fd, Callback cb);
  // A persistent timer, armed at once, firing every `period`.
  static Expected<Event> periodic(EventBase& base, std::chrono::nanoseconds period, Callback cb);
  // A user event with no fd, fired by activate() (from any thread) or, once, after a delay
  // set by arm().
  static Expected<Event> user(EventBase& base, Callback cb);

  Event();
  Event(Event&&) noexcept;
  Event& operator=(Event&&) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event();

  // Makes the event run its callback soon, on its base's thread. Thread-safe (see above).
  void activate();
  void remove();  // event_del
  // Fires the event once, `delay` from now (a pending firing is replaced). False if libevent
  // refused. On its base's thread.
  bool arm(std::chrono::nanoseconds delay);
  bool valid() const { return state_ != nullptr; }

 private:
  struct State;
  explicit Event(std::unique_ptr<State> s);
  std::unique_ptr<State> state_;
};

}  // namespace rsfc
