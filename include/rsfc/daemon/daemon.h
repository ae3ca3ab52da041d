// The rsfcd daemon: one worker thread per NFQUEUE queue (own netlink socket, own libevent
// loop, own Engine; shared-nothing), signals and the /metrics HTTP endpoint on the main
// thread's loop, and with a decision log one writer thread draining a ring per worker.
#pragma once

#include <string>

namespace rsfc {

constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;  // start-up or runtime failure (queue bind, HTTP bind, ...)
constexpr int kExitConfig = 2;   // configuration error, bad command line

// Runs until SIGTERM/SIGINT (SIGHUP reloads `config_path`). Returns the exit code.
int run_daemon(const std::string& config_path);

// Sends `state` (e.g. "READY=1") to systemd's $NOTIFY_SOCKET, if set. No libsystemd.
void notify_systemd(const char* state);

}  // namespace rsfc
