#!/bin/sh
# Usage: bs-delay.sh UPLINK_QUEUE DOWNLINK_QUEUE [PHONE_IFACE [CORE_IFACE]]
#        bs-delay.sh --flush
# Sends every packet forwarded by THIS host (the "base station") to rsfc-linkem through
# NFQUEUE: packets coming in from the phone side to UPLINK_QUEUE, packets coming in from the
# core (gateway) side to DOWNLINK_QUEUE. Interfaces default to phone0 / gw0.
# No --queue-bypass: without a running link emulator the link is down, as it should be.
# Uses the -legacy binaries (nftables' queue expression is not in every kernel).
set -eu

chain=LINKEM
if [ "${1:-}" = "--flush" ]; then
  for ipt in iptables-legacy ip6tables-legacy; do
    $ipt -D FORWARD -j $chain 2>/dev/null || true
    $ipt -F $chain 2>/dev/null || true
    $ipt -X $chain 2>/dev/null || true
  done
  exit 0
fi

upq="$1"
downq="$2"
phone_if="${3:-phone0}"
core_if="${4:-gw0}"
for ipt in iptables-legacy ip6tables-legacy; do
  $ipt -N $chain 2>/dev/null || $ipt -F $chain
  $ipt -A $chain -i "$phone_if" -j NFQUEUE --queue-num "$upq"
  $ipt -A $chain -i "$core_if" -j NFQUEUE --queue-num "$downq"
  $ipt -C FORWARD -j $chain 2>/dev/null || $ipt -I FORWARD 1 -j $chain
done
