#!/bin/sh
# Makes THIS host forward IPv4 and IPv6. Set explicitly: new namespaces copy IPv4 devconf
# from the initial namespace, so nothing can be assumed.
set -eu
# shellcheck source-path=SCRIPTDIR source=sysctl.sh
. "$(dirname "$0")/sysctl.sh"

sysctl_set net.ipv4.ip_forward 1
sysctl_set net.ipv4.conf.all.forwarding 1
sysctl_set net.ipv4.conf.default.forwarding 1
sysctl_set net.ipv6.conf.all.forwarding 1
sysctl_set net.ipv6.conf.default.forwarding 1
for path in /sys/class/net/*; do
  dev="${path##*/}"
  [ "$dev" = lo ] && continue
  sysctl_set "net.ipv4.conf.$dev.forwarding" 1
  sysctl_set "net.ipv6.conf.$dev.forwarding" 1
  sysctl_set "net.ipv4.conf.$dev.rp_filter" 0
done
