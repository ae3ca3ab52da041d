// The decision log: one JSON object per line (the fields of DecisionRecord) in one file,
// written off the packet path.
//
// Each worker formats its records into its own DecisionRing, a bounded single-producer
// single-consumer byte ring allocated once: no lock, no allocation and no system call per
// record, and a full ring drops the record (counted) instead of waiting. One writer thread
// per log drains every ring into the file with one write per ring per wake-up (every
// `period`, or at once when a ring is half full). One writer, not one per worker: the file
// is one resource, and one thread that owns its descriptor keeps its size cap exact (two
// writers appending to one file would each see the other's bytes only after the fact),
// keeps lines whole (a ring only ever holds whole records) and does rotation in one place.
//
// Size cap: when the file reaches `max_bytes` the writer stops appending (whole lines only:
// the file never exceeds the cap) and counts what it drops, until reopen() gives it a new
// file (SIGHUP after logrotate); the size is re-read from the file on each wake-up, so a
// truncation (copytruncate) frees room too. Stopping, not rotating itself, keeps one
// owner of the file's names (logrotate) and a bounded disk footprint.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "rsfc/core/decision_record.h"
#include "rsfc/core/expected.h"
#include "rsfc/core/metrics.h"

namespace rsfc {

class DecisionLog;

// The writer thread's counters (one writer each: relaxed, read by the metrics page).
struct DecisionLogCounters {
  Counter records_written, bytes_written;
  Counter dropped_size_cap;     // whole records left out because the file was at its cap
  Counter dropped_write_error;  // records lost to a failed write(2)
};

// One worker's queue of formatted records. on_decision() runs on the worker (the one
// producer), the drain side on the writer thread (the one consumer).
class DecisionRing final : public DecisionSink {
 public:
  // Longer than any record (two IPv6 addresses, every number at its longest: ~500 bytes).
  static constexpr size_t kMaxRecord = 1024;

  DecisionRing(DecisionLog& owner, size_t bytes);  // rounded up to a power of two
  DecisionRing(const DecisionRing&) = delete;
  DecisionRing& operator=(const DecisionRing&) = delete;

  // Formats the record and appends it, or drops it (counted) when the ring is full. Never
  // blocks.
  void on_decision(const DecisionRecord& r) override;
  uint64_t dropped_full() const { return dropped_full_.get(); }  // reason "queue_full"
  size_t capacity() const { return mask_ + 1; }

  // Consumer side: the bytes [tail, head) hold whole lines; the two pieces they occupy.
  struct Pending {
    const char* a;
    size_t a_len;
    const char* b;
    size_t b_len;
    size_t size() const { return a_len + b_len; }
  };

 private:
  friend class DecisionLog;
  Pending pending() const;
  void release(size_t n) {
    tail_.store(tail_.load(std::memory_order_relaxed) + n, std::memory_order_release);
  }

  DecisionLog& owner_;
  std::unique_ptr<char[]> buf_;
  size_t mask_;
  Counter dropped_full_;
  uint64_t tail_seen_ = 0;  // producer's last read of tail_ (re-read only when it looks full)
  alignas(64) std::atomic<uint64_t> head_{0};  // written by the producer
  alignas(64) std::atomic<uint64_t> tail_{0};  // written by the consumer
};

class DecisionLog {
 public:
  struct Options {
    uint64_t max_bytes = 0;                 // size cap of the file; 0 = none
    size_t ring_bytes = 1 << 20;            // per producer
    std::chrono::milliseconds period{100};  // the writer's wake-up interval
  };

  // Opens (creates, appends to) `path` on the calling thread, so that an error is reported
  // here, allocates one ring per producer and starts the writer thread.
  static Expected<std::unique_ptr<DecisionLog>> open(const std::string& path, size_t producers,
                                                     Options o);
  // Writes everything the rings hold, closes the file, stops the writer. The producers
  // must be done (the rings go away).
  ~DecisionLog();
  DecisionLog(const DecisionLog&) = delete;
  DecisionLog& operator=(const DecisionLog&) = delete;

  DecisionSink* sink(size_t producer) { return rings_[producer].get(); }

  static constexpr std::chrono::milliseconds kForever = std::chrono::milliseconds::max();

  // From any thread but a producer; both wait for the writer. flush() writes what the rings
  // hold now. reopen() writes it to the current file, then opens `path` (the same one after
  // a rotation, or another) with the cap `max_bytes`; on failure the current file stays.
  // An empty path closes the file: records still arriving are discarded until the next
  // reopen. `wait` bounds the wait (the daemon's main thread must keep serving signals,
  // metrics and the watchdog while the writer is stuck in write(2) on a hung disk): on
  // time-out the reopen stays queued, an error says so, and the writer logs its failure.
  Expected<void> flush();
  Expected<void> reopen(const std::string& path, uint64_t max_bytes,
                        std::chrono::milliseconds wait = kForever);

  const std::string& path() const { return path_; }  // as last set by open()/reopen()
  const DecisionLogCounters& counters() const { return counters_; }
  uint64_t dropped_queue_full() const;  // over all rings

 private:
  friend class DecisionRing;
  struct Fd {  // the file's descriptor, closed on destruction
    int fd = -1;
    explicit Fd(int f = -1) : fd(f) {}
    Fd(Fd&& o) noexcept : fd(std::exchange(o.fd, -1)) {}
    Fd& operator=(Fd&& o) noexcept;
    ~Fd();
  };
  enum class Command : uint8_t { kNone, kFlush, kReopen, kStop };

  DecisionLog(std::string path, Fd fd, size_t producers, const Options& o);
  Expected<void> command(Command c, std::chrono::milliseconds wait, const std::string& path = {},
                         uint64_t max_bytes = 0);
  void kick();  // producer side: a ring is half full
  void run();
  void drain_all();
  void drain(DecisionRing& ring);
  size_t write_out(const DecisionRing::Pending& p, size_t n);
  bool end_torn_line();
  Expected<void> do_reopen(const std::string& path, uint64_t max_bytes);

  std::string path_;  // the callers' copy (open(), reopen())
  std::vector<std::unique_ptr<DecisionRing>> rings_;
  DecisionLogCounters counters_;
  const std::chrono::milliseconds period_;

  // Writer thread only.
  Fd fd_;
  std::string file_path_;  // for log messages
  uint64_t max_bytes_ = 0;
  uint64_t size_ = 0;          // the file's size as of the last fstat plus what was written
  bool cap_reported_ = false;  // the cap was logged for this file
  bool error_reported_ = false;
  bool torn_ = false;  // a failed write left a partial line at the end of the file

  std::mutex mu_;
  std::condition_variable wake_, done_;
  Command cmd_ = Command::kNone;
  std::string cmd_path_;
  uint64_t cmd_max_ = 0;
  uint64_t cmd_seq_ = 0, done_seq_ = 0;
  bool cmd_waited_ = false;  // false: the caller gave up, the writer reports a failure
  Expected<void> cmd_result_;
  std::atomic<bool> kicked_{false};
  std::thread thread_;  // last: started once everything above exists
};

}  // namespace rsfc
