#include "rsfc/io/io_metrics.h"

#include <string_view>

namespace rsfc {

namespace {

struct FaultFamily {
  const char* name;
  const char* help;
  Counter VerdictFaultCounters::*counter;
};

constexpr FaultFamily kFaultFamilies[] = {
    {"rsfcd_verdict_send_failures_total",
     "Verdict sends (sendmsg of a batch) that failed; each try is counted.",
     &VerdictFaultCounters::send_failures},
    {"rsfcd_verdict_payload_fallbacks_total",
     "Rewritten packets released unchanged (plain ACCEPT) because their verdict could not be "
     "sent with the new bytes.",
     &VerdictFaultCounters::payload_fallbacks},
    {"rsfcd_verdicts_lost_total",
     "Verdicts given up after every retry; the kernel keeps those packets until the queue is "
     "unbound.",
     &VerdictFaultCounters::verdicts_lost},
    {"rsfcd_queue_truncated_datagrams_total",
     "Datagrams from the queue larger than a receive buffer (MSG_TRUNC).",
     &VerdictFaultCounters::truncated_datagrams},
    {"rsfcd_queue_truncated_packets_accepted_total",
     "Packets named in truncated datagrams, accepted unchanged without being processed.",
     &VerdictFaultCounters::truncated_accepted},
};

struct HttpFamily {
  const char* name;
  const char* type;
  const char* help;
  Counter HttpServerCounters::*counter;
};

constexpr HttpFamily kHttpFamilies[] = {
    {"rsfcd_metrics_http_connections_accepted_total", "counter",
     "Connections the metrics server accepted.", &HttpServerCounters::connections_accepted},
    {"rsfcd_metrics_http_connections_rejected_total", "counter",
     "Connections closed unanswered because the server already had its maximum open.",
     &HttpServerCounters::connections_rejected},
    {"rsfcd_metrics_http_requests_too_large_total", "counter",
     "Requests refused with 431: request line and headers over the limit.",
     &HttpServerCounters::requests_too_large},
    {"rsfcd_metrics_http_deadlines_missed_total", "counter",
     "Connections closed because the client had not sent its request (or taken the reply) "
     "by the deadline.",
     &HttpServerCounters::deadlines_missed},
    {"rsfcd_metrics_http_bad_requests_total", "counter",
     "Requests answered 400 (malformed) or 405 (not GET or HEAD).",
     &HttpServerCounters::bad_requests},
    {"rsfcd_metrics_http_connections_open", "gauge", "Connections open now.",
     &HttpServerCounters::connections_open},
};

void append_help_type(std::string& out, std::string_view name, std::string_view type,
                      std::string_view help) {
  out.append("# HELP ").append(name).append(" ").append(help).append("\n# TYPE ");
  out.append(name).append(" ").append(type).append("\n");
}

void append_decision_log(std::string& out, const DecisionLogStats& d) {
  const auto sample = [&](std::string_view name, std::string_view labels, uint64_t v) {
    out.append(name).append(labels).append(" ").append(std::to_string(v)).append("\n");
  };
  append_help_type(out, "rsfcd_decision_log_records_total", "counter",
                   "Records written to the decision log file.");
  sample("rsfcd_decision_log_records_total", "", d.records);
  append_help_type(out, "rsfcd_decision_log_bytes_total", "counter",
                   "Bytes written to the decision log file.");
  sample("rsfcd_decision_log_bytes_total", "", d.bytes);
  append_help_type(out, "rsfcd_decision_log_dropped_total", "counter",
                   "Decision records not written: queue_full, a worker's queue to the writer "
                   "thread was full (the packet path never waits); size_cap, the file was at "
                   "decision_log_max_bytes; write_error, the write failed.");
  constexpr std::string_view kName = "rsfcd_decision_log_dropped_total";
  sample(kName, "{reason=\"queue_full\"}", d.dropped_queue_full);
  sample(kName, "{reason=\"size_cap\"}", d.dropped_size_cap);
  sample(kName, "{reason=\"write_error\"}", d.dropped_write_error);
}

void append_sample(std::string& out, std::string_view name, const std::string& labels, uint64_t v) {
  out.append(name).append("{").append(labels).append("} ").append(std::to_string(v)).append("\n");
}

// Lookups by result, and the start-up dump's entries, per queue with a conntrack socket.
void append_conntrack(std::string& out, const std::vector<QueueFaultsView>& queues) {
  const char* lookups = "rsfcd_conntrack_lookups_total";
  append_help_type(out, lookups, "counter",
                   "Conntrack lookups of flows first seen mid-stream, by result: found (both "
                   "window scales known), not_found, no_scale (conntrack did not see a scale "
                   "either: the flow stays unregulated), error, dropped (too many outstanding).");
  for (const QueueFaultsView& q : queues) {
    if (q.conntrack == nullptr) continue;
    for (size_t r = 0; r < q.conntrack->lookups.size(); ++r) {
      append_sample(out, lookups,
                    "queue=\"" + std::to_string(q.queue) + "\",result=\"" +
                        to_string(static_cast<LookupResult>(r)) + "\"",
                    q.conntrack->lookups[r].get());
    }
  }
  const char* dumped = "rsfcd_conntrack_dump_entries_total";
  append_help_type(out, dumped, "counter",
                   "TCP connections read from the conntrack table at start-up (one queue only).");
  for (const QueueFaultsView& q : queues) {
    if (q.conntrack == nullptr) continue;
    append_sample(out, dumped, "queue=\"" + std::to_string(q.queue) + "\"",
                  q.conntrack->dump_entries.get());
  }
}

}  // namespace

std::string render_io_metrics(const std::vector<QueueFaultsView>& queues,
                              const HttpServerCounters* http, const DecisionLogStats& dlog) {
  std::string out;
  for (const FaultFamily& f : kFaultFamilies) {
    append_help_type(out, f.name, "counter", f.help);
    for (const QueueFaultsView& q : queues) {
      if (q.faults == nullptr) continue;
      out.append(f.name).append("{queue=\"").append(std::to_string(q.queue)).append("\"} ");
      out.append(std::to_string((q.faults->*f.counter).get())).append("\n");
    }
  }
  append_decision_log(out, dlog);
  append_conntrack(out, queues);
  if (http == nullptr) return out;
  for (const HttpFamily& f : kHttpFamilies) {
    append_help_type(out, f.name, f.type, f.help);
    out.append(f.name).append(" ").append(std::to_string((http->*f.counter).get())).append("\n");
  }
  return out;
}

}  // namespace rsfc
