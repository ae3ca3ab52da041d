#!/bin/sh
# Usage: link.sh IFACE [ADDR/LEN ...]
# Brings IFACE of THIS host up with the given IPv4/IPv6 addresses (IPv6 without DAD, so
# usable at once).
set -eu
# shellcheck source-path=SCRIPTDIR source=sysctl.sh
. "$(dirname "$0")/sysctl.sh"

dev="$1"
shift
sysctl_set "net.ipv6.conf.$dev.accept_dad" 0
sysctl_set "net.ipv4.conf.$dev.rp_filter" 0
for addr in "$@"; do
  case "$addr" in
    *:*) ip -6 addr replace "$addr" dev "$dev" nodad ;;
    *) ip -4 addr replace "$addr" dev "$dev" ;;
  esac
done
ip link set "$dev" up
