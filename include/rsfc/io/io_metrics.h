// The I/O shell's own counters in Prometheus text format, appended by the daemon to the
// page render_prometheus() (core/metrics.h) writes: per queue, the verdict path's faults
// (nfqueue.h). Pure: no I/O, no clock.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "rsfc/io/nfqueue.h"

namespace rsfc {

struct QueueFaultsView {
  uint16_t queue = 0;
  const VerdictFaultCounters* faults = nullptr;  // may be null (queue not running)
};

std::string render_io_metrics(const std::vector<QueueFaultsView>& queues);

}  // namespace rsfc
