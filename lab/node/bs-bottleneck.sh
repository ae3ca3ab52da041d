#!/bin/sh
# Usage: bs-bottleneck.sh IFACE RATE_BIT_PER_S BUFFER_BYTES   rate-limit IFACE's egress
#        bs-bottleneck.sh IFACE --clear                      remove it
# The "base station" bottleneck of one direction of the emulated cellular link, on THIS
# host (the bs namespace or container): a TBF whose drop-tail byte FIFO is the deep
# per-device cellular buffer. Namespace-agnostic (also run by the docker lab).
#
# burst: at least two full-size frames (TBF cannot send a packet bigger than its burst),
# and ~2 ms of tokens so that timer latency does not cost rate.
set -eu

dev="$1"
if [ "${2:-}" = "--clear" ]; then
  tc qdisc del dev "$dev" root 2>/dev/null || true
  exit 0
fi
rate="$2"
buffer="$3"
burst=$((rate / 8 / 500))
[ "$burst" -ge 3100 ] || burst=3100
tc qdisc replace dev "$dev" root handle 1: tbf rate "${rate}bit" burst "$burst" limit "$buffer"
