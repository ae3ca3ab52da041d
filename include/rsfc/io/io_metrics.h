// The I/O shell's own counters in Prometheus text format, appended by the daemon to the
// page render_prometheus() (core/metrics.h) writes: per queue, the verdict path's faults
// (nfqueue.h) and the conntrack lookups (conntrack.h); once, the metrics server's own limits
// (http_metrics.h). Pure: no I/O.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "rsfc/io/conntrack.h"
#include "rsfc/io/http_metrics.h"
#include "rsfc/io/nfqueue.h"

namespace rsfc {

struct QueueFaultsView {
  uint16_t queue = 0;
  const VerdictFaultCounters* faults = nullptr;  // may be null (queue not running)
  const ConntrackCounters* conntrack = nullptr;  // may be null (no conntrack socket)
};

// `http` may be null (no metrics server): its families are left out.
std::string render_io_metrics(const std::vector<QueueFaultsView>& queues,
                              const HttpServerCounters* http);

}  // namespace rsfc
