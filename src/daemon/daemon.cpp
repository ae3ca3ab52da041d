#include "rsfc/daemon/daemon.h"

#include <pthread.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "rsfc/core/engine.h"
#include "rsfc/core/metrics.h"
#include "rsfc/io/config.h"
#include "rsfc/io/conntrack.h"
#include "rsfc/io/decision_log.h"
#include "rsfc/io/event_loop.h"
#include "rsfc/io/held_verdicts.h"
#include "rsfc/io/http_metrics.h"
#include "rsfc/io/io_metrics.h"
#include "rsfc/io/log.h"
#include "rsfc/io/nfqueue.h"
#include "rsfc/io/privileges.h"
#include "rsfc/io/systemd_notify.h"
#include "rsfc/version.h"

namespace rsfc {

namespace {

// The daemon's one clock: CLOCK_MONOTONIC, read by the shell and passed to the core.
Nanos monotonic_now() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<Nanos>(ts.tv_sec) * kSecond + ts.tv_nsec;
}

// Keys the flow hash so that nobody outside can aim collisions at the table.
uint64_t random_seed() {
  uint64_t seed = 0;
  if (getrandom(&seed, sizeof seed, 0) != static_cast<ssize_t>(sizeof seed)) {
    seed = static_cast<uint64_t>(monotonic_now()) ^ (static_cast<uint64_t>(getpid()) << 32);
  }
  return seed;
}

// At most one message per interval; says how many were suppressed in between.
class RateLimit {
 public:
  explicit RateLimit(Nanos interval) : interval_(interval) {}
  // True if a message may be logged now; `suppressed` gets the count held back since.
  bool allow(Nanos now, uint64_t& suppressed) {
    if (last_ != 0 && now - last_ < interval_) {
      ++suppressed_;
      return false;
    }
    last_ = now;
    suppressed = std::exchange(suppressed_, 0);
    return true;
  }

 private:
  Nanos interval_;
  Nanos last_ = 0;
  uint64_t suppressed_ = 0;
};

// Gives the packet an ACCEPT verdict without payload when it leaves scope without one, so
// that every id gets exactly one verdict on every path.
class VerdictGuard {
 public:
  VerdictGuard(NfQueue& q, uint32_t id) : q_(q), id_(id) {}
  VerdictGuard(const VerdictGuard&) = delete;
  VerdictGuard& operator=(const VerdictGuard&) = delete;
  ~VerdictGuard() {
    if (!done_) (void)q_.add_verdict(id_, kNfAccept);
  }
  // ACCEPT; a non-empty payload replaces the packet.
  void accept(std::span<const uint8_t> payload) {
    done_ = true;
    (void)q_.add_verdict(id_, kNfAccept, payload);
  }
  // The verdict is given later (HeldVerdicts), by the owner of the hold.
  void hold() { done_ = true; }

 private:
  NfQueue& q_;
  uint32_t id_;
  bool done_ = false;
};

class Worker {
 public:
  Worker(uint16_t queue, uint32_t flows_max, const Config& cfg)
      : queue_(queue),
        batch_(cfg.batch_size),
        engine_(flows_max, cfg.params, random_seed(), regulated_per_worker(cfg)),
        // Nothing is ever held unless the engine reserved pacing's state at start.
        held_(cfg.params.pacing.enabled ? std::min<size_t>(cfg.queue_maxlen, kHeldMax) : 0) {}
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;
  ~Worker() { join(); }

  uint16_t queue() const { return queue_; }
  uint32_t portid() const { return portid_; }
  const CoreCounters& core_counters() const { return engine_.counters(); }
  QueueCounters& io_counters() { return io_; }
  const VerdictFaultCounters& faults() const { return faults_; }
  // Null when the worker has no conntrack socket.
  const ConntrackCounters* conntrack_counters() const {
    return ct_.is_open() ? &ct_counters_ : nullptr;
  }
  const Heartbeat& heartbeat() const { return heartbeat_; }

  // Start-up, on the main thread: opens the queue and the event loop; decisions go to
  // `decisions` (this worker's ring of the decision log, or null).
  Expected<void> open(const Config& cfg, DecisionSink* decisions) {
    NfQueue::Options o;
    o.queue_num = queue_;
    o.maxlen = cfg.queue_maxlen;
    o.rcvbuf_bytes = cfg.socket_rcvbuf;
    o.copy_range = 0xffff;
    o.fail_open = true;
    o.gso = false;  // see nfqueue.cpp: the kernel segments and completes checksums for us
    o.batch_size = cfg.batch_size;
    o.counters = &io_;
    o.faults = &faults_;
    auto base = EventBase::create();
    if (!base) return base.error();
    base_ = std::move(base).value();
    engine_.set_decision_sink(decisions);
    auto q = NfQueue::open(o);
    if (!q) return q.error();
    nfq_ = std::move(q).value();
    portid_ = nfq_.portid();
    if (nfq_.rcvbuf_bytes() < static_cast<int>(cfg.socket_rcvbuf)) {
      log::warn("queue %u: socket receive buffer is %d bytes, less than the %u configured",
                unsigned{queue_}, nfq_.rcvbuf_bytes(), cfg.socket_rcvbuf);
    }
    auto rd = Event::reader(base_, nfq_.fd(), [this](short) { on_readable(); });
    if (!rd) return rd.error();
    read_ev_ = std::move(rd).value();
    auto tick = Event::periodic(base_, std::chrono::seconds(1), [this](short) { on_tick(); });
    if (!tick) return tick.error();
    tick_ev_ = std::move(tick).value();
    auto wake = Event::user(base_, [this](short) { on_wake(); });
    if (!wake) return wake.error();
    wake_ev_ = std::move(wake).value();
    auto release = Event::user(base_, [this](short) { on_release(); });
    if (!release) return release.error();
    release_ev_ = std::move(release).value();
    open_conntrack(cfg);
    return {};
  }

  // Flow adoption (docs/DESIGN.md §5a): a socket to conntrack in the worker's
  // loop. Without it rsfcd runs on, and flows first seen mid-stream stay unregulated. The
  // start-up dump needs to know which flows this worker's queue gets; that is only sure with
  // one queue (--queue-balance hashes with a boot-time secret, and the u32 spreading of
  // rsfcd-iptables.sh is not known to the daemon): with more, each worker adopts its flows at
  // their first packet.
  void open_conntrack(const Config& cfg) {
    auto ct = ConntrackClient::open(&ct_counters_);
    if (!ct) {
      log::warn("queue %u: %s; flows first seen mid-stream stay unregulated", unsigned{queue_},
                ct.error().message.c_str());
      return;
    }
    auto ev = Event::reader(base_, ct->fd(), [this](short) { on_conntrack(); });
    if (!ev) {
      log::warn("queue %u: conntrack: %s", unsigned{queue_}, ev.error().message.c_str());
      return;
    }
    ct_ = std::move(ct).value();
    ct_ev_ = std::move(ev).value();
    if (cfg.queues.size() == 1 && cfg.params.adopt_from_conntrack) {
      if (auto d = ct_.dump(); !d) {
        log::warn("queue %u: conntrack dump: %s", unsigned{queue_}, d.error().message.c_str());
      }
    }
  }

  void start() {
    thread_ = std::thread([this] { run(); });
  }

  // Start-up failed elsewhere: give every packet queued so far its verdict, then close.
  void abandon() {
    if (!nfq_.is_open()) return;
    stopping_ = true;  // nothing is held from here on
    (void)nfq_.drain_and_close([this](const NfqPacket& p) {
      fresh_batch_ = true;
      handle(p);
    });
  }

  // Thread-safe: hands new parameters and decision sink to the worker (applied between
  // batches). The sink outlives the worker (Daemon::dlog_).
  void post_params(std::shared_ptr<const EngineParams> p, DecisionSink* decisions) {
    {
      std::lock_guard lock(mu_);
      pending_ = std::move(p);
      pending_sink_ = decisions;
    }
    wake_ev_.activate();
  }

  // Thread-safe: drain the queue and stop the thread.
  void request_stop() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    wake_ev_.activate();
  }

  void join() {
    if (thread_.joinable()) thread_.join();
  }

 private:
  void run() {
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, nullptr);  // signals belong to the main thread
    const std::string name = "rsfcd-q" + std::to_string(queue_);
    pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
    log::debug("queue %u: worker running", unsigned{queue_});
    if (auto r = base_.run(); !r)
      log::error("queue %u: %s", unsigned{queue_}, r.error().message.c_str());
  }

  void handle(const NfqPacket& p) {
    VerdictGuard guard(nfq_, p.id);
    // One clock read per packet: the read that ends this packet's processing time starts
    // the next one's (and is its `now`). The first packet of a batch reads its own, so the
    // receive syscall is not counted as processing.
    if (std::exchange(fresh_batch_, false)) clock_ = monotonic_now();
    const Nanos t0 = clock_;
    const PacketMeta meta{
        .checksum = p.checksum_not_ready ? ChecksumState::kNotReady : ChecksumState::kComplete,
        .truncated = p.truncated()};
    PacketResult res;
    try {
      res = engine_.process(p.data, t0, meta);
      // Asked after this batch's verdicts (on_readable): the packet never waits for it.
      if (res.adopt_request && ct_.is_open()) (void)ct_.lookup(engine_.flow(res.flow).key);
    } catch (const std::exception& e) {  // the engine never throws; never lose a packet anyway
      uint64_t suppressed = 0;
      if (error_log_.allow(t0, suppressed)) {
        log::error(
            "queue %u: engine exception: %s (packet accepted unchanged; %llu more suppressed)",
            unsigned{queue_}, e.what(), static_cast<unsigned long long>(suppressed));
      }
      res = {};
    }
    // A modified packet goes back with its bytes; a truncated copy never does. A packet the
    // downlink pacer holds (never a modified one) gets its verdict from on_release().
    bool held = false;
    if (res.release_at > t0 && !res.modified && !stopping_) {
      held = held_.hold(p.id, res.release_at);
      if (!held) io_.held_overflow.add();  // the store is full: it leaves now, unpaced
    }
    if (held) {
      guard.hold();
      io_.packets_held_total.add();
      io_.packets_held.set(held_.size());
      if (release_armed_at_ == 0 || res.release_at < release_armed_at_) {
        arm_release(res.release_at, t0);
      }
    } else if (res.modified && !p.truncated()) {
      guard.accept(p.data);
    } else {
      guard.accept({});
    }
    clock_ = monotonic_now();
    io_.processing_time.observe(static_cast<uint64_t>(clock_ - t0));
  }

  void on_readable() {
    heartbeat_.beat();
    fresh_batch_ = true;
    auto r = nfq_.receive(batch_, [this](const NfqPacket& p) { handle(p); });
    auto f = nfq_.flush();
    if (ct_.is_open()) {
      if (auto c = ct_.flush(); !c) log_error(c.error().message.c_str());
    }
    if (!r || !f) {
      uint64_t suppressed = 0;
      if (error_log_.allow(monotonic_now(), suppressed)) {
        log::error("%s (%llu similar messages suppressed)",
                   (!r ? r.error() : f.error()).message.c_str(),
                   static_cast<unsigned long long>(suppressed));
      }
    }
  }

  // Downlink pacing: the verdicts whose time has come (within kReleaseSlack, so that packets
  // due a few microseconds apart leave in one batch), then the timer for the next.
  void on_release() {
    release_armed_at_ = 0;
    const Nanos now = monotonic_now();
    held_.release_due(now + kReleaseSlack,
                      [this](uint32_t id) { (void)nfq_.add_verdict(id, kNfAccept); });
    io_.packets_held.set(held_.size());
    if (auto f = nfq_.flush(); !f) log_error(f.error().message.c_str());
    if (!held_.empty()) arm_release(held_.next(), now);
  }

  void arm_release(Nanos at, Nanos now) {
    release_armed_at_ = at;
    if (!release_ev_.arm(std::chrono::nanoseconds(std::max<Nanos>(0, at - now)))) {
      // libevent refused the timer: nothing may wait on it, so everything held leaves now.
      release_armed_at_ = 0;
      release_all();
      log_error("the pacing timer could not be armed: held packets released");
    }
  }

  // Every held packet's verdict, now (shutdown, a timer that cannot be armed).
  void release_all() {
    held_.release_due(INT64_MAX, [this](uint32_t id) { (void)nfq_.add_verdict(id, kNfAccept); });
    io_.packets_held.set(0);
    (void)nfq_.flush();
  }

  // Answers of conntrack: lookups and the start-up dump (established connections only).
  void on_conntrack() {
    const bool was_dumping = ct_.dumping();
    const bool ok = ct_.receive([this](const ConntrackTcp& ct, bool from_dump, bool established) {
      if (from_dump && !established) return;
      const AdoptResult a = engine_.adopt(ct, monotonic_now());
      if (from_dump && a == AdoptResult::kAdopted) ++dump_adopted_;
    });
    if (!ok) log_error("conntrack receive failed");
    if (was_dumping && !ct_.dumping()) {
      log::info("queue %u: adopted %llu flows from the conntrack table", unsigned{queue_},
                static_cast<unsigned long long>(dump_adopted_));
    }
  }

  void log_error(const char* what) {
    uint64_t suppressed = 0;
    if (error_log_.allow(monotonic_now(), suppressed)) {
      log::error("queue %u: %s (%llu similar messages suppressed)", unsigned{queue_}, what,
                 static_cast<unsigned long long>(suppressed));
    }
  }

  void on_tick() {
    heartbeat_.beat();  // an idle worker still proves its loop runs, once a second
    if (ct_.is_open()) ct_.expire();
    (void)nfq_.flush();  // verdicts a failed flush kept get their next try (counted if lost)
    engine_.expire(monotonic_now());
    if (const int err = nfq_.last_kernel_error(); err != 0 && err != last_reported_kernel_error_) {
      log::warn("queue %u: the kernel rejected a verdict or config message: %s", unsigned{queue_},
                std::strerror(err));
      last_reported_kernel_error_ = err;
    }
  }

  void on_wake() {
    std::shared_ptr<const EngineParams> params;
    DecisionSink* decisions = nullptr;
    bool stop = false;
    {
      std::lock_guard lock(mu_);
      params = std::move(pending_);
      decisions = pending_sink_;
      stop = stop_;
    }
    if (params) {
      engine_.set_params(*params);
      engine_.set_decision_sink(decisions);
    }
    if (stop) shutdown();
  }

  void shutdown() {
    read_ev_.remove();
    tick_ev_.remove();
    ct_ev_.remove();
    release_ev_.remove();
    stopping_ = true;  // the drain below holds nothing
    release_all();
    // maxlen 0: the kernel (fail-open) accepts new packets itself; we verdict the rest.
    auto d = nfq_.drain_and_close([this](const NfqPacket& p) {
      fresh_batch_ = true;  // batches are not visible here: read per packet
      handle(p);
    });
    if (d) {
      log::info("queue %u: drained %zu packets, unbound", unsigned{queue_}, *d);
    } else {
      log::error("queue %u: drain: %s", unsigned{queue_}, d.error().message.c_str());
    }
    engine_.set_decision_sink(nullptr);
    base_.loop_break();
  }

  const uint16_t queue_;
  const uint32_t batch_;
  uint32_t portid_ = 0;
  QueueCounters io_;
  VerdictFaultCounters faults_;
  Heartbeat heartbeat_;
  Engine engine_;
  NfQueue nfq_;
  ConntrackCounters ct_counters_;
  ConntrackClient ct_;
  uint64_t dump_adopted_ = 0;
  // Held verdicts at most per worker (and at most queue.maxlen): 24 bytes each, reserved.
  static constexpr size_t kHeldMax = size_t{1} << 16;
  static constexpr Nanos kReleaseSlack = 50 * kMicro;
  HeldVerdicts held_;
  Nanos release_armed_at_ = 0;  // when release_ev_ fires; 0 = not armed
  bool stopping_ = false;
  EventBase base_;
  Event read_ev_, tick_ev_, wake_ev_, ct_ev_, release_ev_;
  RateLimit error_log_{kSecond};
  Nanos clock_ = 0;  // CLOCK_MONOTONIC at the start of the packet being handled
  bool fresh_batch_ = true;
  int last_reported_kernel_error_ = 0;

  std::mutex mu_;
  std::shared_ptr<const EngineParams> pending_;
  DecisionSink* pending_sink_ = nullptr;
  bool stop_ = false;

  std::thread thread_;
};

class Daemon {
 public:
  Daemon(std::string path, Config cfg)
      : path_(std::move(path)),
        running_(std::move(cfg)),
        pacing_reserved_(running_.params.pacing.enabled) {}

  int run() {
    // Signals: blocked here before any thread exists (threads inherit the mask), then read
    // from a signalfd on the main loop.
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
    signal(SIGPIPE, SIG_IGN);
    sigfd_ = signalfd(-1, &sigs, SFD_NONBLOCK | SFD_CLOEXEC);
    if (sigfd_ < 0) return fail(Error::from_errno(errno, "signalfd"));

    if (auto r = enable_event_threads(); !r) return fail(r.error());
    auto base = EventBase::create();
    if (!base) return fail(base.error());
    base_ = std::move(base).value();
    auto sig_ev = Event::reader(base_, sigfd_, [this](short) { on_signal(); });
    if (!sig_ev) return fail(sig_ev.error());
    sig_ev_ = std::move(sig_ev).value();

    // HTTP first: a bind failure must not leave queues bound.
    if (!running_.metrics_listen.empty()) {
      auto http = MetricsHttpServer::start(base_, running_.metrics_listen,
                                           [this] { return render_metrics(); });
      if (!http) return fail(http.error());
      http_ = std::move(http).value();
    }

    // One worker per queue; flows.max is shared out between them (checked at load).
    const uint32_t flows_per_worker = rsfc::flows_per_worker(running_);
    try {
      for (uint16_t q : running_.queues) {
        workers_.push_back(std::make_unique<Worker>(q, flows_per_worker, running_));
      }
    } catch (const std::exception& e) {
      return fail(Error::msg(std::string("cannot create the flow tables: ") + e.what()));
    }
    if (!running_.decision_log.empty()) {
      auto d = open_decision_log(running_);
      if (!d) return fail(d.error());
      dlog_ = std::move(d).value();
    }
    for (size_t i = 0; i < workers_.size(); ++i) {
      if (auto r = workers_[i]->open(running_, decision_sink(i)); !r) {
        for (auto& o : workers_) o->abandon();
        return fail(r.error());
      }
    }
    drop_privileges_after_bind();  // before any thread starts: threads inherit the sets
    for (auto& w : workers_) w->start();

    std::string qs;
    for (uint16_t q : running_.queues) {
      if (!qs.empty()) qs += ',';
      qs += std::to_string(q);
    }
    log::info("rsfcd %s: serving nfqueue %s (%u flows per queue, batch %u); metrics %s%s",
              RSFC_VERSION, qs.c_str(), flows_per_worker, running_.batch_size,
              running_.metrics_listen.empty() ? "off" : "on http://",
              running_.metrics_listen.c_str());
    notify_systemd("READY=1");
    if (auto w = start_watchdog(); !w) return fail(w.error());

    auto r = base_.run();

    notify_systemd("STOPPING=1");
    log::info("rsfcd: stopping (draining %zu queue(s))", workers_.size());
    for (auto& w : workers_) w->request_stop();
    for (auto& w : workers_) w->join();
    http_ = MetricsHttpServer();  // before the counters it reads go away
    workers_.clear();
    dlog_.reset();  // the workers are done: writes what their rings still hold, closes
    if (!r) return fail(r.error());
    log::info("rsfcd: stopped");
    return kExitOk;
  }

  ~Daemon() {
    if (sigfd_ >= 0) ::close(sigfd_);
  }

 private:
  int fail(const Error& e) {
    log::error("%s", e.message.c_str());
    return kExitFailure;
  }

  // Queues and the metrics socket are bound: keep CAP_NET_ADMIN only (and the metrics port's
  // CAP_NET_BIND_SERVICE), the uid unchanged (see privileges.h).
  void drop_privileges_after_bind() {
    const auto addr = parse_listen_address(running_.metrics_listen);
    const bool low_port = addr && addr->port != 0 && addr->port < 1024;
    auto p = drop_privileges({.keep_bind_service = low_port});
    if (!p) {
      log::error("%s; running on with the privileges it was started with",
                 p.error().message.c_str());
      return;
    }
    log::info("privileges: kept %s, bounding set %s, no_new_privs",
              capability_names(p->effective).c_str(), capability_names(p->bounding).c_str());
  }

  // Type=notify with WatchdogSec=: WATCHDOG=1 every quarter interval, but only while every
  // worker's heartbeat moves (a stuck worker gets rsfcd restarted, not silently bypassed).
  Expected<void> start_watchdog() {
    const auto interval = watchdog_interval_from_environment();
    if (interval.count() == 0) return {};
    if (interval < std::chrono::seconds(2)) {
      log::warn("WatchdogSec below 2 s: an idle worker shows progress once a second only");
    }
    auto ev = Event::periodic(base_, interval / 4, [this](short) { on_watchdog(); });
    if (!ev) return ev.error();
    watchdog_ev_ = std::move(ev).value();
    return {};
  }

  void on_watchdog() {
    std::vector<uint64_t> beats;
    for (auto& w : workers_) beats.push_back(w->heartbeat().count());
    const auto stalled = watchdog_gate_.check(beats);
    if (!stalled) {
      stall_logged_ = false;
      notify_systemd("WATCHDOG=1");
    } else if (!std::exchange(stall_logged_, true)) {
      log::error("queue %u: worker made no progress; watchdog pings withheld",
                 unsigned{workers_[*stalled]->queue()});
    }
  }

  void on_signal() {
    signalfd_siginfo si{};
    while (::read(sigfd_, &si, sizeof(si)) == static_cast<ssize_t>(sizeof(si))) {
      switch (si.ssi_signo) {
        case SIGHUP:
          reload();
          break;
        case SIGTERM:
        case SIGINT:
          log::info("rsfcd: %s received", si.ssi_signo == SIGTERM ? "SIGTERM" : "SIGINT");
          base_.loop_break();
          return;
        default:
          break;
      }
    }
  }

  void reload() {
    // MONOTONIC_USEC lets systemd match the READY=1 that ends this reload to it.
    const std::string reloading =
        "RELOADING=1\nMONOTONIC_USEC=" + std::to_string(monotonic_now() / kMicro);
    notify_systemd(reloading.c_str());
    Config loaded;
    try {
      loaded = load_config_file(path_);
    } catch (const std::exception& e) {
      log::error("reload: %s (keeping the running configuration)", e.what());
      notify_systemd("READY=1");
      return;
    }
    for (const auto& key : restart_only_differences(running_, loaded)) {
      log::warn("reload: %s changed; it needs a restart and is ignored until then", key.c_str());
    }
    if (loaded.params.pacing.enabled && !pacing_reserved_) {
      log::warn(
          "reload: pacing.enabled is true, but rsfcd started without it: downloads stay unpaced "
          "until a restart (pacing's state is reserved at start)");
    }
    running_.params = loaded.params;
    running_.log_level = loaded.log_level;
    log::set_level(running_.log_level);
    auto p = std::make_shared<const EngineParams>(running_.params);
    update_decision_log(loaded);
    for (size_t i = 0; i < workers_.size(); ++i) workers_[i]->post_params(p, decision_sink(i));
    log::info("reload: %s applied", path_.c_str());
    notify_systemd("READY=1");
  }

  // One writer thread for all workers, one ring each (decision_log.h).
  Expected<std::unique_ptr<DecisionLog>> open_decision_log(const Config& c) const {
    return DecisionLog::open(c.decision_log, workers_.size(),
                             {.max_bytes = c.decision_log_max_bytes});
  }

  // Worker i's sink: its ring while the log is on, else none.
  DecisionSink* decision_sink(size_t i) {
    return dlog_ && !running_.decision_log.empty() ? dlog_->sink(i) : nullptr;
  }

  // How long a reload waits for the decision log's writer (stuck on a hung disk, it would
  // hold signals, metrics and the watchdog).
  static constexpr std::chrono::milliseconds kReopenWait{2000};

  // SIGHUP: reopens the decision log (after a rotation, or at a new path, with the new cap),
  // opens it for the first time, or closes it. A path that cannot be opened leaves the log
  // as it was.
  void update_decision_log(const Config& loaded) {
    const std::string& path = loaded.decision_log;
    if (path.empty()) {
      if (dlog_) (void)dlog_->reopen("", 0, kReopenWait);  // the workers drop their sinks next
    } else if (!dlog_) {
      auto d = open_decision_log(loaded);
      if (!d) {
        log::error("reload: %s (the decision log stays off)", d.error().message.c_str());
        return;
      }
      dlog_ = std::move(d).value();
    } else if (auto r = dlog_->reopen(path, loaded.decision_log_max_bytes, kReopenWait); !r) {
      log::error("reload: %s", r.error().message.c_str());
      return;
    }
    running_.decision_log = path;
    running_.decision_log_max_bytes = loaded.decision_log_max_bytes;
  }

  // On the main thread, per scrape: the kernel's queue counters, then everything rendered.
  std::string render_metrics() {
    auto stats = read_kernel_queue_stats();
    if (stats) {
      for (auto& w : workers_) {
        for (const auto& s : *stats) {
          if (s.queue_num == w->queue() && s.portid == w->portid()) {
            QueueCounters& c = w->io_counters();
            c.kernel_queue_dropped.set(s.queue_dropped);
            c.kernel_queue_user_dropped.set(s.queue_user_dropped);
            c.kernel_queue_total.set(s.queue_total);
          }
        }
      }
    }
    std::vector<QueueMetricsView> views;
    views.reserve(workers_.size());
    for (auto& w : workers_) views.push_back({w->queue(), &w->core_counters(), &w->io_counters()});
    std::vector<QueueFaultsView> faults;
    for (auto& w : workers_) faults.push_back({w->queue(), &w->faults(), w->conntrack_counters()});
    DecisionLogStats dlog;
    if (dlog_) {
      const DecisionLogCounters& c = dlog_->counters();
      dlog = {.records = c.records_written.get(),
              .bytes = c.bytes_written.get(),
              .dropped_queue_full = dlog_->dropped_queue_full(),
              .dropped_size_cap = c.dropped_size_cap.get(),
              .dropped_write_error = c.dropped_write_error.get()};
    }
    return render_prometheus(views, RSFC_VERSION) +
           render_io_metrics(faults, http_.counters(), dlog);
  }

  std::string path_;
  Config running_;
  const bool pacing_reserved_;  // the workers' engines were built with pacing.enabled
  int sigfd_ = -1;
  EventBase base_;
  Event sig_ev_;
  Event watchdog_ev_;
  WatchdogGate watchdog_gate_;
  bool stall_logged_ = false;
  std::unique_ptr<DecisionLog> dlog_;  // outlives the workers, which write into its rings
  std::vector<std::unique_ptr<Worker>> workers_;
  MetricsHttpServer http_;  // destroyed first (declared last)
};

}  // namespace

int run_daemon(const std::string& config_path) {
  Config cfg;
  try {
    cfg = load_config_file(config_path);
  } catch (const std::exception& e) {
    log::error("%s", e.what());
    return kExitConfig;
  }
  log::set_level(cfg.log_level);
  Daemon d(config_path, std::move(cfg));
  return d.run();
}

void notify_systemd(const char* state) {
  (void)SystemdNotifier::from_environment().notify(state);
}

}  // namespace rsfc
