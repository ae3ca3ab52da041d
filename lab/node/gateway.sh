#!/bin/sh
# Usage: gateway.sh QUEUES [PROTO [BALANCE]]   install the rsfcd NFQUEUE rules on THIS host
#        gateway.sh --flush                    remove them
# The rules are the shipped ones, conf/rsfcd-iptables.sh, for the packets that cross the
# gateway's interface towards the base station (ran0): every lab run and integration test
# exercises the script a deployment uses.
# QUEUES:  one queue number ("0") or a range ("0:1").
# PROTO:   tcp (default) or all (every forwarded packet).
# BALANCE: for a range, kernel (default: --queue-balance, a hash of both addresses) or
#          subscriber (by the phone's address alone; see conf/rsfcd-iptables.sh -b).
# RSFC_FAMILIES (env, default "4 6"): which of iptables/ip6tables get the rules.
# RSFC_CONNTRACK (env, default yes): no leaves out the rule that turns connection tracking on
#   (and with it the kernel's reassembly of fragments before FORWARD): flow adoption then
#   finds nothing.
# RSFC_KNOBS (env, default all): what is queued, conf/rsfcd-iptables.sh -k (all, uplink,
#   downlink or uplink,downlink; with -k flows reach rsfcd mid-stream and are adopted from
#   conntrack).
# --queue-bypass: packets pass while no process is bound to the queue (fail open).
set -eu

rules="$(dirname "$0")/../../conf/rsfcd-iptables.sh"
if [ "${1:-}" = "--flush" ]; then
  exec sh "$rules" del
fi
RSFCD_FAMILIES="${RSFC_FAMILIES:-4 6}" RSFCD_CONNTRACK="${RSFC_CONNTRACK:-yes}" exec sh "$rules" add -q "$1" -P "${2:-tcp}" \
  -b "${3:-kernel}" -i ran0 -k "${RSFC_KNOBS:-all}"
