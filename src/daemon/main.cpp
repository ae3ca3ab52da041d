// rsfcd command line: run, check or print a configuration file, version, help.
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>

#include "rsfc/daemon/daemon.h"
#include "rsfc/io/config.h"
#include "rsfc/version.h"

namespace {

constexpr char kUsage[] =
    "Usage: rsfcd --config FILE        run (logs on stderr; SIGHUP reloads FILE,\n"
    "                                  SIGTERM/SIGINT drain the queues and exit)\n"
    "       rsfcd --check-config FILE  check FILE: prints \"FILE: OK\" or the error\n"
    "       rsfcd --print-config [--tuning]\n"
    "                                  print the default configuration, every key commented\n"
    "                                  (conf/rsfcd.yaml); --tuning adds the experimental\n"
    "                                  block rsfc.tuning\n"
    "       rsfcd --version\n"
    "       rsfcd --help\n"
    "\n"
    "rsfcd regulates TCP receive windows of packets it receives from netfilter NFQUEUE,\n"
    "e.g. iptables-legacy -A FORWARD -p tcp -j NFQUEUE --queue-num 0 --queue-bypass\n"
    "\n"
    "Exit status: 0 success, 1 start-up or runtime failure, 2 configuration or usage error.\n";

int usage_error(const char* what) {
  std::fprintf(stderr, "rsfcd: %s\n%s", what, kUsage);
  return rsfc::kExitConfig;
}

int check_config(const std::string& path) {
  try {
    (void)rsfc::load_config_file(path);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return rsfc::kExitConfig;
  }
  std::printf("%s: OK\n", path.c_str());
  return rsfc::kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "--help") == 0) {
    std::fputs(kUsage, stdout);
    return rsfc::kExitOk;
  }
  if (argc == 2 && std::strcmp(argv[1], "--version") == 0) {
    std::printf("rsfcd %s\n", RSFC_VERSION);
    return rsfc::kExitOk;
  }
  if (argc == 3 && std::strcmp(argv[1], "--check-config") == 0) return check_config(argv[2]);
  if (argc >= 2 && argc <= 3 && std::strcmp(argv[1], "--print-config") == 0) {
    if (argc == 3 && std::strcmp(argv[2], "--tuning") != 0)
      return usage_error("unrecognised arguments");
    std::fputs(rsfc::format_config(rsfc::example_config(), argc == 3).c_str(), stdout);
    return rsfc::kExitOk;
  }
  if (argc == 3 && std::strcmp(argv[1], "--config") == 0) return rsfc::run_daemon(argv[2]);
  // --config=FILE / --check-config=FILE spellings.
  if (argc == 2) {
    const std::string_view a = argv[1];
    if (a.starts_with("--config=")) return rsfc::run_daemon(std::string(a.substr(9)));
    if (a.starts_with("--check-config=")) return check_config(std::string(a.substr(15)));
  }
  if (argc == 1) return usage_error("missing --config FILE");
  return usage_error("unrecognised arguments");
}
