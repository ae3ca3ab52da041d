#!/bin/sh
# Usage: gateway.sh QUEUES [PROTO]   install the rsfcd NFQUEUE rules on THIS host
#        gateway.sh --flush          remove them
# QUEUES: one queue number ("0") or a balanced range ("0:1", uses --queue-balance).
# PROTO:  iptables protocol to queue (default tcp; "all" queues every forwarded packet).
# RSFC_FAMILIES (env, default "4 6"): which of iptables/ip6tables get the rule.
# Uses the -legacy binaries: nftables' own queue expression is not in every kernel.
# --queue-bypass: packets pass while no process is bound to the queue (fail open).
set -eu

ipt4=iptables-legacy
ipt6=ip6tables-legacy
chain=RSFCD

if [ "${1:-}" = "--flush" ]; then
  for ipt in $ipt4 $ipt6; do
    $ipt -D FORWARD -j $chain 2>/dev/null || true
    $ipt -F $chain 2>/dev/null || true
    $ipt -X $chain 2>/dev/null || true
  done
  exit 0
fi

ipts=""
for f in ${RSFC_FAMILIES:-4 6}; do
  case "$f" in 4) ipts="$ipts $ipt4" ;; 6) ipts="$ipts $ipt6" ;; esac
done

queues="$1"
proto="${2:-tcp}"
case "$queues" in
  *:*) target="--queue-balance $queues" ;;
  *) target="--queue-num $queues" ;;
esac
if [ "$proto" = all ]; then match=""; else match="-p $proto"; fi

for ipt in $ipts; do
  $ipt -N $chain 2>/dev/null || $ipt -F $chain
  # shellcheck disable=SC2086
  $ipt -A $chain $match -j NFQUEUE $target --queue-bypass
  $ipt -C FORWARD -j $chain 2>/dev/null || $ipt -A FORWARD -j $chain
done
