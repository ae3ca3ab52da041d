#!/bin/sh
# Makes THIS host forward IPv4 and IPv6. Set explicitly: new namespaces copy IPv4 devconf
# from the initial namespace, so nothing can be assumed.
set -eu

sysctl -qw net.ipv4.ip_forward=1
sysctl -qw net.ipv4.conf.all.forwarding=1
sysctl -qw net.ipv4.conf.default.forwarding=1
sysctl -qw net.ipv6.conf.all.forwarding=1
sysctl -qw net.ipv6.conf.default.forwarding=1
for dev in $(ls /sys/class/net); do
  [ "$dev" = lo ] && continue
  sysctl -qw "net.ipv4.conf.$dev.forwarding=1"
  sysctl -qw "net.ipv6.conf.$dev.forwarding=1"
  sysctl -qw "net.ipv4.conf.$dev.rp_filter=0"
done
