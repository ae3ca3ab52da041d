#include "rsfc/io/decision_log.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>

#include "rsfc/io/log.h"

namespace rsfc {

namespace {

int open_append(const std::string& path) {
  return ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
}

// The file's size, 0 for what has none (a FIFO, a character device).
uint64_t file_size(int fd) {
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return 0;
  return static_cast<uint64_t>(st.st_size);
}

size_t count_lines(const char* p, size_t n) {
  return static_cast<size_t>(std::count(p, p + n, '\n'));
}

// Lines in the first `n` bytes of `p`.
size_t count_lines(const DecisionRing::Pending& p, size_t n) {
  const size_t a = std::min(n, p.a_len);
  return count_lines(p.a, a) + count_lines(p.b, n - a);
}

// The length of the longest prefix of `p` that ends a line and is at most `budget` long.
size_t whole_lines_within(const DecisionRing::Pending& p, size_t budget) {
  budget = std::min(budget, p.size());
  if (budget > p.a_len) {
    const void* nl = memrchr(p.b, '\n', budget - p.a_len);
    if (nl != nullptr) return p.a_len + static_cast<size_t>(static_cast<const char*>(nl) - p.b) + 1;
    budget = p.a_len;
  }
  const void* nl = memrchr(p.a, '\n', budget);
  return nl != nullptr ? static_cast<size_t>(static_cast<const char*>(nl) - p.a) + 1 : 0;
}

}  // namespace

// --- DecisionRing ----------------------------------------------------------------------------

DecisionRing::DecisionRing(DecisionLog& owner, size_t bytes)
    : owner_(owner),
      buf_(std::make_unique_for_overwrite<char[]>(std::bit_ceil(std::max(bytes, 2 * kMaxRecord)))),
      mask_(std::bit_ceil(std::max(bytes, 2 * kMaxRecord)) - 1) {}

void DecisionRing::on_decision(const DecisionRecord& r) {
  char line[kMaxRecord];
  const size_t n = format_decision_json(r, line, sizeof line);
  const size_t cap = mask_ + 1;
  const uint64_t head = head_.load(std::memory_order_relaxed);
  if (n == 0 || head + n - tail_seen_ > cap) {
    tail_seen_ = tail_.load(std::memory_order_acquire);  // the writer may have made room
    if (n == 0 || head + n - tail_seen_ > cap) {
      dropped_full_.add();  // n == 0 cannot happen: kMaxRecord is above the longest record
      return;
    }
  }
  const size_t at = head & mask_;
  const size_t first = std::min(n, cap - at);
  std::memcpy(buf_.get() + at, line, first);
  std::memcpy(buf_.get(), line + first, n - first);
  head_.store(head + n, std::memory_order_release);
  if (head + n - tail_seen_ >= cap / 2) {  // wake the writer early, if it is really behind
    tail_seen_ = tail_.load(std::memory_order_acquire);
    if (head + n - tail_seen_ >= cap / 2) owner_.kick();
  }
}

DecisionRing::Pending DecisionRing::pending() const {
  const uint64_t tail = tail_.load(std::memory_order_relaxed);
  const uint64_t head = head_.load(std::memory_order_acquire);
  const size_t n = head - tail;
  const size_t at = tail & mask_;
  const size_t first = std::min(n, mask_ + 1 - at);
  return {buf_.get() + at, first, buf_.get(), n - first};
}

// --- DecisionLog -----------------------------------------------------------------------------

DecisionLog::Fd& DecisionLog::Fd::operator=(Fd&& o) noexcept {
  if (this != &o) {
    if (fd >= 0) ::close(fd);
    fd = std::exchange(o.fd, -1);
  }
  return *this;
}

DecisionLog::Fd::~Fd() {
  if (fd >= 0) ::close(fd);
}

Expected<std::unique_ptr<DecisionLog>> DecisionLog::open(const std::string& path, size_t producers,
                                                         Options o) {
  Fd fd(open_append(path));
  if (fd.fd < 0) return Error::from_errno(errno, "decision log " + path);
  return std::unique_ptr<DecisionLog>(new DecisionLog(path, std::move(fd), producers, o));
}

DecisionLog::DecisionLog(std::string path, Fd fd, size_t producers, const Options& o)
    : path_(path),
      period_(o.period),
      fd_(std::move(fd)),
      file_path_(std::move(path)),
      max_bytes_(o.max_bytes) {
  size_ = file_size(fd_.fd);
  rings_.reserve(producers);
  for (size_t i = 0; i < producers; ++i)
    rings_.push_back(std::make_unique<DecisionRing>(*this, o.ring_bytes));
  thread_ = std::thread([this] { run(); });
}

DecisionLog::~DecisionLog() {
  (void)command(Command::kStop, kForever);
  if (thread_.joinable()) thread_.join();
}

uint64_t DecisionLog::dropped_queue_full() const {
  uint64_t n = 0;
  for (const auto& r : rings_) n += r->dropped_full();
  return n;
}

Expected<void> DecisionLog::flush() {
  return command(Command::kFlush, kForever);
}

Expected<void> DecisionLog::reopen(const std::string& path, uint64_t max_bytes,
                                   std::chrono::milliseconds wait) {
  auto r = command(Command::kReopen, wait, path, max_bytes);
  if (r) path_ = path;
  return r;
}

// Hands a command to the writer and waits until it has carried it out (after a drain), or
// until `wait` is over.
Expected<void> DecisionLog::command(Command c, std::chrono::milliseconds wait,
                                    const std::string& path, uint64_t max_bytes) {
  std::unique_lock lock(mu_);
  const auto until = std::chrono::steady_clock::now() +
                     std::min<std::chrono::milliseconds>(wait, std::chrono::hours(1));
  const auto wait_for = [&](auto done) {
    if (wait == kForever) {
      done_.wait(lock, done);
      return true;
    }
    return done_.wait_until(lock, until, done);
  };
  const auto stuck = [&] {
    return Error::msg("decision log " + path_ + ": the writer thread is stuck in a write" +
                      (c == Command::kReopen ? "; the reopen is queued" : ""));
  };
  if (!wait_for([&] { return cmd_ == Command::kNone; })) return stuck();  // one at a time
  cmd_ = c;
  cmd_path_ = path;
  cmd_max_ = max_bytes;
  cmd_waited_ = true;
  const uint64_t seq = ++cmd_seq_;
  wake_.notify_one();
  if (!wait_for([&] { return done_seq_ == seq; })) {
    cmd_waited_ = false;
    return stuck();
  }
  return std::move(cmd_result_);
}

// Called by a producer: no lock, so that a worker never waits for the writer. A wake-up
// lost between the writer's check and its sleep costs one period, not a record.
void DecisionLog::kick() {
  if (!kicked_.exchange(true, std::memory_order_relaxed)) wake_.notify_one();
}

void DecisionLog::run() {
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, nullptr);  // signals belong to the main thread
  pthread_setname_np(pthread_self(), "rsfcd-dlog");
  std::unique_lock lock(mu_);
  for (;;) {
    wake_.wait_for(lock, period_, [&] {
      return cmd_ != Command::kNone || kicked_.load(std::memory_order_relaxed);
    });
    kicked_.store(false, std::memory_order_relaxed);
    const Command c = cmd_;
    const std::string path = cmd_path_;
    const uint64_t max = cmd_max_;
    lock.unlock();
    drain_all();  // records from before a reopen belong to the old file
    Expected<void> result;
    if (c == Command::kReopen) result = do_reopen(path, max);
    lock.lock();
    if (c != Command::kNone) {
      if (!result && !cmd_waited_) log::error("%s", result.error().message.c_str());
      cmd_result_ = std::move(result);
      cmd_ = Command::kNone;
      done_seq_ = cmd_seq_;
      done_.notify_all();
    }
    if (c == Command::kStop) return;
  }
}

void DecisionLog::drain_all() {
  if (fd_.fd >= 0 && max_bytes_ != 0) size_ = file_size(fd_.fd);  // after a copytruncate
  for (auto& r : rings_) drain(*r);
}

// Appends the ring's whole lines that fit under the cap; drops (counts) the rest.
void DecisionLog::drain(DecisionRing& ring) {
  const DecisionRing::Pending p = ring.pending();
  const size_t n = p.size();
  if (n == 0) return;
  if (fd_.fd < 0) {  // closed: the log is off, nothing to count
    ring.release(n);
    return;
  }
  if (torn_ && !end_torn_line()) {  // still failing: nothing can be written
    counters_.dropped_write_error.add(count_lines(p, n));
    ring.release(n);
    return;
  }
  size_t fit = n;
  if (max_bytes_ != 0 && size_ + n > max_bytes_) {
    fit = whole_lines_within(p, max_bytes_ > size_ ? max_bytes_ - size_ : 0);
    counters_.dropped_size_cap.add(count_lines(p, n) - count_lines(p, fit));
    if (!std::exchange(cap_reported_, true)) {
      log::warn(
          "decision log %s: reached its cap of %llu bytes; records are dropped until it "
          "is rotated (SIGHUP)",
          file_path_.c_str(), static_cast<unsigned long long>(max_bytes_));
    }
  }
  const size_t written = write_out(p, fit);
  if (written < fit) {
    const size_t lost = count_lines(p, fit) - count_lines(p, written);
    counters_.dropped_write_error.add(lost);
  }
  counters_.records_written.add(count_lines(p, written));
  counters_.bytes_written.add(written);
  size_ += written;
  ring.release(n);
}

// Writes the first `n` bytes of `p` (whole lines); returns how many were written, fewer on
// an error (logged once per file). A short write leaves a partial line: it is completed,
// the loop goes on until everything is out or write fails.
size_t DecisionLog::write_out(const DecisionRing::Pending& p, size_t n) {
  size_t done = 0;
  while (done < n) {
    iovec iov[2];
    int cnt = 0;
    if (done < p.a_len) {
      iov[cnt++] = {const_cast<char*>(p.a + done), std::min(n, p.a_len) - done};
      if (n > p.a_len) iov[cnt++] = {const_cast<char*>(p.b), n - p.a_len};
    } else {
      iov[cnt++] = {const_cast<char*>(p.b + (done - p.a_len)), n - done};
    }
    const ssize_t w = ::writev(fd_.fd, iov, cnt);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      if (!std::exchange(error_reported_, true)) {
        log::warn("decision log %s: %s; records are dropped", file_path_.c_str(),
                  w < 0 ? std::strerror(errno) : "nothing written");
      }
      // A partial line that made it out (the disk filled up mid-line) is lost either way;
      // it is ended before the next write, so that it stays one bad line.
      const size_t whole = whole_lines_within(p, done);
      torn_ = whole < done;
      size_ += done - whole;  // on disk all the same
      return whole;
    }
    done += static_cast<size_t>(w);
  }
  return done;
}

// Ends the partial line a failed write left (the cap allows for the byte: the line's own
// newline, which never made it, was counted in).
bool DecisionLog::end_torn_line() {
  ssize_t w;
  do {
    w = ::write(fd_.fd, "\n", 1);
  } while (w < 0 && errno == EINTR);
  if (w != 1) return false;
  torn_ = false;
  ++size_;
  return true;
}

Expected<void> DecisionLog::do_reopen(const std::string& path, uint64_t max_bytes) {
  if (path.empty()) {
    fd_ = Fd();
    return {};
  }
  Fd fd(open_append(path));
  if (fd.fd < 0) {
    Error e = Error::from_errno(errno, "decision log " + path);
    e.message += fd_.fd < 0 ? " (the decision log stays off)"
                            : " (the decision log stays at " + file_path_ + ")";
    return e;
  }
  fd_ = std::move(fd);
  file_path_ = path;
  max_bytes_ = max_bytes;
  size_ = file_size(fd_.fd);
  cap_reported_ = error_reported_ = torn_ = false;
  return {};
}

}  // namespace rsfc
