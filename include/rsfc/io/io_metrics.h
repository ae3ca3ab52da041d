// The I/O shell's own counters in Prometheus text format, appended by the daemon to the
// page render_prometheus() (core/metrics.h) writes: per queue, the verdict path's faults
// (nfqueue.h) and the conntrack lookups (conntrack.h); once, the metrics server's own limits
// (http_metrics.h) and the decision log's (decision_log.h). Pure: no I/O.
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

// The decision log's counters (decision_log.h), summed over its rings; all 0 while it was
// never on.
struct DecisionLogStats {
  uint64_t records = 0, bytes = 0;
  uint64_t dropped_queue_full = 0, dropped_size_cap = 0, dropped_write_error = 0;
};

// `http` may be null (no metrics server): its families are left out. The decision log's
// families are always there.
std::string render_io_metrics(const std::vector<QueueFaultsView>& queues,
                              const HttpServerCounters* http, const DecisionLogStats& dlog = {});

}  // namespace rsfc
