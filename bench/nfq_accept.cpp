// nfq-accept: the floor for rsfcd's cost per queued packet. It binds NFQUEUE queues with
// the daemon's own I/O code (rsfc::NfQueue: same socket options, copy range, batch size,
// fail-open, batched verdicts) and accepts every packet unread, one thread per queue, until
// SIGINT or SIGTERM. What rsfcd spends per packet above this is the engine's and the
// daemon's own work; bench/forwarding.py measures both in one run.
//
//   nfq-accept QUEUE...
#include <poll.h>
#include <pthread.h>
#include <signal.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "rsfc/io/nfqueue.h"

namespace {

// Accepts until `stop` (a signal blocked in every thread, delivered through sigwait in
// main) is set; polls with a timeout so the flag is seen without a packet.
void serve(rsfc::NfQueue& q, const volatile sig_atomic_t& stop) {
  pollfd pfd{.fd = q.fd(), .events = POLLIN, .revents = 0};
  while (stop == 0) {
    if (poll(&pfd, 1, 100) <= 0) continue;
    auto r = q.receive(
        64, [&q](const rsfc::NfqPacket& p) { (void)q.add_verdict(p.id, rsfc::kNfAccept); });
    auto f = q.flush();
    if (!r || !f) {
      std::fprintf(stderr, "nfq-accept: queue %u: %s\n", unsigned{q.queue_num()},
                   (!r ? r.error() : f.error()).message.c_str());
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: nfq-accept QUEUE...\n");
    return 2;
  }
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);  // inherited by the workers

  std::vector<rsfc::NfQueue> queues;
  for (int i = 1; i < argc; ++i) {
    char* end = nullptr;
    const unsigned long num = std::strtoul(argv[i], &end, 10);
    if (end == argv[i] || *end != '\0' || num > 65535) {
      std::fprintf(stderr, "nfq-accept: bad queue number '%s'\n", argv[i]);
      return 2;
    }
    rsfc::NfQueue::Options opts;
    opts.queue_num = static_cast<uint16_t>(num);
    auto q = rsfc::NfQueue::open(opts);
    if (!q) {
      std::fprintf(stderr, "nfq-accept: %s\n", q.error().message.c_str());
      return 1;
    }
    queues.push_back(std::move(q.value()));
  }
  static volatile sig_atomic_t stop = 0;
  std::vector<std::thread> workers;
  workers.reserve(queues.size());
  for (auto& q : queues) workers.emplace_back([&q] { serve(q, stop); });
  std::printf("nfq-accept: serving %zu queue(s)\n", queues.size());
  std::fflush(stdout);
  int sig = 0;
  sigwait(&sigs, &sig);
  stop = 1;
  for (auto& w : workers) w.join();
  return 0;
}
