#!/bin/sh
# Installs, removes or shows the NFQUEUE rules that feed rsfcd (iptables-legacy and
# ip6tables-legacy: nftables' own `queue` expression is not available on every kernel).
#
#   rsfcd-iptables.sh add  [-q QUEUES] [-i IFACE]... [-p PREFIX]...
#   rsfcd-iptables.sh del
#   rsfcd-iptables.sh show
#
#   -q QUEUES  "N" (--queue-num N) or "A:B" (--queue-balance A:B; one rsfcd worker per
#              queue, `queues: [A, ..., B]` in rsfcd.yaml). Default 0.
#   -i IFACE   queue forwarded TCP entering or leaving IFACE (repeatable).
#   -p PREFIX  queue forwarded TCP from or to PREFIX, e.g. the subscriber networks
#              (repeatable; IPv4 prefixes go to iptables, IPv6 ones to ip6tables).
#   With neither -i nor -p, all forwarded TCP is queued.
#
# The rules live in their own chain (RSFCD, or $RSFCD_CHAIN) jumped to from FORWARD, in
# both iptables and ip6tables. `add` is idempotent: it rewrites the chain and keeps one
# jump. `del` removes the jump and the chain. Needs root.
#
# Every rule has --queue-bypass: while no process is bound to the queue (rsfcd stopped,
# restarting, or killed with -9), the kernel accepts the packets instead of dropping them.
# While rsfcd runs, it binds its queues with fail-open (a full queue accepts instead of
# dropping). Note: --queue-balance hashes addresses only (no ports) and is symmetric
# between the directions of a flow, as rsfcd's per-flow state needs; do not use
# --queue-cpu-fanout (not direction-symmetric).
set -eu

CHAIN=${RSFCD_CHAIN:-RSFCD}
IPT4=${IPTABLES:-iptables-legacy}
IPT6=${IP6TABLES:-ip6tables-legacy}

usage() {
  sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

die() {
  echo "rsfcd-iptables: $*" >&2
  exit 1
}

[ $# -ge 1 ] || usage
cmd=$1
shift

QUEUES=0
IFACES=""
PREFIXES=""
while getopts "q:i:p:h" opt; do
  case $opt in
    q) QUEUES=$OPTARG ;;
    i) IFACES="$IFACES $OPTARG" ;;
    p) PREFIXES="$PREFIXES $OPTARG" ;;
    *) usage ;;
  esac
done
shift $((OPTIND - 1))
[ $# -eq 0 ] || die "unexpected argument: $1"

case $QUEUES in
  *[!0-9:]* | "" | :* | *: | *:*:*) die "bad -q '$QUEUES' (want N or A:B)" ;;
  *:*)
    a=${QUEUES%:*}
    b=${QUEUES#*:}
    [ "$a" -lt "$b" ] && [ "$b" -le 65535 ] || die "bad -q '$QUEUES' (want A < B <= 65535)"
    TARGET="NFQUEUE --queue-balance $QUEUES --queue-bypass"
    ;;
  *)
    [ "$QUEUES" -le 65535 ] || die "bad -q '$QUEUES' (want 0..65535)"
    TARGET="NFQUEUE --queue-num $QUEUES --queue-bypass"
    ;;
esac

for i in $IFACES; do
  case $i in *[!A-Za-z0-9_.@-]*) die "bad interface name '$i'" ;; esac
done
for p in $PREFIXES; do
  case $p in *[!0-9A-Fa-f.:/]*) die "bad prefix '$p'" ;; esac
done

command -v "$IPT4" >/dev/null 2>&1 || die "$IPT4 not found"
command -v "$IPT6" >/dev/null 2>&1 || die "$IPT6 not found"

# chain_reset IPT: the chain exists and is empty; FORWARD jumps to it exactly once.
chain_reset() {
  ipt=$1
  $ipt -w -N "$CHAIN" 2>/dev/null || $ipt -w -F "$CHAIN"
  $ipt -w -C FORWARD -p tcp -j "$CHAIN" 2>/dev/null || $ipt -w -I FORWARD 1 -p tcp -j "$CHAIN"
}

chain_remove() {
  ipt=$1
  while $ipt -w -C FORWARD -p tcp -j "$CHAIN" 2>/dev/null; do
    $ipt -w -D FORWARD -p tcp -j "$CHAIN"
  done
  if $ipt -w -n -L "$CHAIN" >/dev/null 2>&1; then
    $ipt -w -F "$CHAIN"
    $ipt -w -X "$CHAIN"
  fi
}

add_rules() {
  ipt=$1
  family=$2
  chain_reset "$ipt"
  if [ -z "$IFACES" ] && [ -z "$PREFIXES" ]; then
    # shellcheck disable=SC2086
    $ipt -w -A "$CHAIN" -p tcp -j $TARGET
    return
  fi
  for i in $IFACES; do
    # shellcheck disable=SC2086
    $ipt -w -A "$CHAIN" -p tcp -i "$i" -j $TARGET
    # shellcheck disable=SC2086
    $ipt -w -A "$CHAIN" -p tcp -o "$i" -j $TARGET
  done
  for p in $PREFIXES; do
    case $p in
      *:*) [ "$family" = 6 ] || continue ;;
      *) [ "$family" = 4 ] || continue ;;
    esac
    # shellcheck disable=SC2086
    $ipt -w -A "$CHAIN" -p tcp -s "$p" -j $TARGET
    # shellcheck disable=SC2086
    $ipt -w -A "$CHAIN" -p tcp -d "$p" -j $TARGET
  done
}

case $cmd in
  add)
    add_rules "$IPT4" 4
    add_rules "$IPT6" 6
    ;;
  del)
    chain_remove "$IPT4"
    chain_remove "$IPT6"
    ;;
  show)
    for ipt in "$IPT4" "$IPT6"; do
      echo "== $ipt"
      $ipt -w -S FORWARD | grep -- "-j $CHAIN\$" || echo "(no jump from FORWARD)"
      $ipt -w -n -v -L "$CHAIN" 2>/dev/null || echo "(no chain $CHAIN)"
    done
    ;;
  -h | --help | help) usage ;;
  *) usage ;;
esac
