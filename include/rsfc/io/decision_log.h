// A DecisionSink writing one JSON object per line (the fields of DecisionRecord) to a file.
// Buffered: records are formatted into a fixed buffer (no allocation per record) and
// written with one write(2) when the buffer fills or flush() is called (about once a
// second). Use one instance per worker thread: the file is opened O_APPEND, and each
// flush writes whole lines, so several workers can share one path.
#pragma once

#include <memory>
#include <string>

#include "rsfc/core/decision_record.h"
#include "rsfc/core/expected.h"

namespace rsfc {

class DecisionLogFile final : public DecisionSink {
 public:
  static Expected<std::unique_ptr<DecisionLogFile>> open(const std::string& path,
                                                         size_t buffer_bytes = 64 * 1024);
  ~DecisionLogFile() override;
  DecisionLogFile(const DecisionLogFile&) = delete;
  DecisionLogFile& operator=(const DecisionLogFile&) = delete;

  void on_decision(const DecisionRecord& r) override;
  // Writes buffered lines. On a write error the buffer is discarded (counted).
  Expected<void> flush();
  // Flushes, closes and opens the path again (log rotation, SIGHUP).
  Expected<void> reopen();

  const std::string& path() const { return path_; }
  uint64_t records() const { return records_; }
  uint64_t dropped() const { return dropped_; }  // records lost to write errors

 private:
  DecisionLogFile(std::string path, int fd, size_t buffer_bytes);
  std::string path_;
  int fd_ = -1;
  std::unique_ptr<char[]> buf_;
  size_t cap_ = 0, len_ = 0, pending_records_ = 0;
  uint64_t records_ = 0, dropped_ = 0;
};

}  // namespace rsfc
