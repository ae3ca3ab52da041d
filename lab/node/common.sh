#!/bin/sh
# Configures THIS host (a network namespace or a container) for the rsfcd lab.
# Namespace-agnostic: the same script runs under `ip netns exec` and inside docker.
#
# Environment (all optional):
#   RSFC_CC          TCP congestion control for locally originated connections (e.g. cubic).
#                    The algorithm must be allowed in the initial namespace first
#                    (net.ipv4.tcp_allowed_congestion_control), which this script cannot do.
#   RSFC_TIMESTAMPS  1/0: net.ipv4.tcp_timestamps (0 = a phone without TCP timestamps).
set -eu
# shellcheck source-path=SCRIPTDIR source=sysctl.sh
. "$(dirname "$0")/sysctl.sh"

sysctl_set net.ipv6.conf.all.accept_dad 0
sysctl_set net.ipv6.conf.default.accept_dad 0
sysctl_set net.ipv6.conf.all.accept_ra 0
sysctl_set net.ipv6.conf.default.accept_ra 0
# Crafted test packets use addresses that nobody owns; never let reverse-path filtering
# drop them.
sysctl_set net.ipv4.conf.all.rp_filter 0
sysctl_set net.ipv4.conf.default.rp_filter 0

if [ -n "${RSFC_CC:-}" ]; then
  sysctl_set net.ipv4.tcp_congestion_control "$RSFC_CC"
fi
if [ -n "${RSFC_TIMESTAMPS:-}" ]; then
  sysctl_set net.ipv4.tcp_timestamps "$RSFC_TIMESTAMPS"
fi

ip link set lo up
