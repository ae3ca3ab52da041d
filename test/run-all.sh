#!/usr/bin/env bash
# Runs every test: unit tests (release and ASan/UBSan builds), a short fuzz run of parse +
# engine (RSFC_FUZZ_SECONDS, default 60; test/fuzz/run.sh), then the integration tests
# (real daemon behind NFQUEUE in network namespaces, real kernel TCP, SIGHUP under load),
# the lab smoke scenario and the short docker lab (docker/run-lab.sh --short; skipped, saying
# why, when no Docker engine can be had). Needs root (namespaces, iptables). Run ./setup.sh
# first.
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $(id -u) == 0 ]] || { echo "run-all: needs root (network namespaces, iptables)" >&2; exit 1; }

echo "== unit tests (release) =="
ctest --test-dir build --output-on-failure -j2
if [[ -d build-asan ]]; then
  echo "== unit tests (ASan + UBSan) =="
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir build-asan --output-on-failure -j2
fi
echo "== fuzz: parse + engine =="
test/fuzz/run.sh --ci "${RSFC_FUZZ_SECONDS:-60}"
echo "== integration tests (namespaces, NFQUEUE, kernel TCP) =="
exec /usr/bin/python3 -m pytest -q -p no:cacheprovider test/integration "$@"
