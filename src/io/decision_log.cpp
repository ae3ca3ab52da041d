#include "rsfc/io/decision_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace rsfc {

namespace {

int open_append(const std::string& path) {
  return ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
}

}  // namespace

Expected<std::unique_ptr<DecisionLogFile>> DecisionLogFile::open(const std::string& path,
                                                                 size_t buffer_bytes) {
  const int fd = open_append(path);
  if (fd < 0) return Error::from_errno(errno, "decision log " + path);
  return std::unique_ptr<DecisionLogFile>(
      new DecisionLogFile(path, fd, std::max<size_t>(buffer_bytes, 4096)));
}

DecisionLogFile::DecisionLogFile(std::string path, int fd, size_t buffer_bytes)
    : path_(std::move(path)),
      fd_(fd),
      buf_(std::make_unique_for_overwrite<char[]>(buffer_bytes)),
      cap_(buffer_bytes) {}

DecisionLogFile::~DecisionLogFile() {
  (void)flush();
  if (fd_ >= 0) ::close(fd_);
}

void DecisionLogFile::on_decision(const DecisionRecord& r) {
  constexpr size_t kMaxRecord = 1024;
  if (cap_ - len_ < kMaxRecord) (void)flush();
  const size_t n = format_decision_json(r, buf_.get() + len_, cap_ - len_);
  if (n == 0) {
    ++dropped_;
    return;
  }
  len_ += n;
  ++pending_records_;
  ++records_;
}

Expected<void> DecisionLogFile::flush() {
  size_t off = 0;
  while (off < len_) {
    const ssize_t w = ::write(fd_, buf_.get() + off, len_ - off);
    if (w < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      dropped_ += pending_records_;
      len_ = pending_records_ = 0;
      return Error::from_errno(err, "decision log " + path_);
    }
    off += static_cast<size_t>(w);
  }
  len_ = pending_records_ = 0;
  return {};
}

Expected<void> DecisionLogFile::reopen() {
  auto r = flush();
  const int fd = open_append(path_);
  if (fd < 0) return Error::from_errno(errno, "decision log " + path_);
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
  return r;
}

}  // namespace rsfc
