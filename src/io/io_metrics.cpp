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

void append_help_type(std::string& out, std::string_view name, std::string_view help) {
  out.append("# HELP ").append(name).append(" ").append(help).append("\n# TYPE ");
  out.append(name).append(" counter\n");
}

}  // namespace

std::string render_io_metrics(const std::vector<QueueFaultsView>& queues) {
  std::string out;
  for (const FaultFamily& f : kFaultFamilies) {
    append_help_type(out, f.name, f.help);
    for (const QueueFaultsView& q : queues) {
      if (q.faults == nullptr) continue;
      out.append(f.name).append("{queue=\"").append(std::to_string(q.queue)).append("\"} ");
      out.append(std::to_string((q.faults->*f.counter).get())).append("\n");
    }
  }
  return out;
}

}  // namespace rsfc
