#!/bin/sh
# Usage: routes.sh PREFIX NEXTHOP [PREFIX NEXTHOP ...]
# Static routes of THIS host. PREFIX may be "default" (then the family follows NEXTHOP).
set -eu

while [ $# -ge 2 ]; do
  case "$2" in
    *:*) ip -6 route replace "$1" via "$2" ;;
    *) ip -4 route replace "$1" via "$2" ;;
  esac
  shift 2
done
[ $# -eq 0 ] || { echo "routes.sh: odd number of arguments" >&2; exit 2; }
