#!/bin/sh
# Installs, removes or shows the NFQUEUE rules that feed rsfcd (iptables-legacy and
# ip6tables-legacy: nftables' own `queue` expression is not available on every kernel).
#
#   rsfcd-iptables.sh add  [-q QUEUES] [-b subscriber|kernel] [-i IFACE]... [-p PREFIX]...
#                          [-P PROTO]
#   rsfcd-iptables.sh del
#   rsfcd-iptables.sh show
#
#   -q QUEUES  "N" (one queue) or "A:B" (one rsfcd worker per queue, `queues: [A, ..., B]`
#              in rsfcd.yaml). Default 0.
#   -b MODE    how A:B spreads packets over the queues:
#              subscriber  by the subscriber's address alone (the default with -i or -p):
#                          every flow of one phone reaches the same worker, so its uploads
#                          share one per-subscriber state (rsfc.per_subscriber);
#              kernel      --queue-balance, a hash of both addresses (the default with
#                          neither -i nor -p, where the subscriber's side is unknown): one
#                          phone's flows to different servers may land on different workers.
#   -i IFACE   queue forwarded packets entering or leaving IFACE, the interface towards the
#              subscribers (repeatable).
#   -p PREFIX  queue forwarded packets from or to PREFIX, the subscriber networks
#              (repeatable; IPv4 prefixes go to iptables, IPv6 ones to ip6tables).
#              With neither -i nor -p, all forwarded packets of PROTO are queued.
#              -b subscriber takes -i or -p, not both.
#   -P PROTO   the protocol to queue: tcp (default, the only one rsfcd regulates) or all
#              (every forwarded packet; rsfcd passes what is not TCP through untouched).
#
# The rules live in their own chain (RSFCD, or $RSFCD_CHAIN) jumped to from FORWARD, in
# both iptables and ip6tables ($RSFCD_FAMILIES, default "4 6"). The chain's first rule, a
# conntrack match without a target, turns connection tracking on for rsfcd's flow adoption
# ($RSFCD_CONNTRACK=no leaves it out). `add` is idempotent: it rewrites the chain and keeps
# one jump. `del` removes the jump and the chain. Needs root.
#
# Every rule has --queue-bypass: while no process is bound to the queue (rsfcd stopped,
# restarting, or killed with -9), the kernel accepts the packets instead of dropping them.
# While rsfcd runs, it binds its queues with fail-open (a full queue accepts instead of
# dropping). Both balancing modes send the two directions of a flow to the same queue, as
# rsfcd's per-flow state needs; do not use --queue-cpu-fanout (not direction-symmetric).
#
# -b subscriber uses the u32 match, not HMARK: it leaves the packet's mark alone. The key
# is the subscriber address's low bits (IPv4: the lowest bits of the address; IPv6: the
# lowest bits of the /64 prefix, so all addresses of a phone's /64 go together), queue
# A + key mod N for N = B - A + 1 queues. A power-of-two N takes one rule per queue and
# direction; any other N takes the key's low 6 bits in rules of at most 10 values each
# (N = 3: 9 rules per direction and prefix or interface). Packets between two subscribers
# (both sides match) use --queue-balance, the one key both directions share.
set -eu

CHAIN=${RSFCD_CHAIN:-RSFCD}
IPT4=${IPTABLES:-iptables-legacy}
IPT6=${IP6TABLES:-ip6tables-legacy}
FAMILIES=${RSFCD_FAMILIES:-4 6}
CONNTRACK=${RSFCD_CONNTRACK:-yes}
for f in $FAMILIES; do
  case $f in 4 | 6) ;; *) echo "rsfcd-iptables: bad RSFCD_FAMILIES '$FAMILIES' (want 4 and/or 6)" >&2; exit 1 ;; esac
done

usage() {
  sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//' >&2
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
BALANCE=""
IFACES=""
PREFIXES=""
PROTO=tcp
while getopts "q:b:i:p:P:h" opt; do
  case $opt in
    q) QUEUES=$OPTARG ;;
    b) BALANCE=$OPTARG ;;
    i) IFACES="$IFACES $OPTARG" ;;
    p) PREFIXES="$PREFIXES $OPTARG" ;;
    P) PROTO=$OPTARG ;;
    *) usage ;;
  esac
done
shift $((OPTIND - 1))
[ $# -eq 0 ] || die "unexpected argument: $1"

QFIRST=$QUEUES
NQ=1
case $QUEUES in
  *[!0-9:]* | "" | :* | *: | *:*:*) die "bad -q '$QUEUES' (want N or A:B)" ;;
  *:*)
    a=${QUEUES%:*}
    b=${QUEUES#*:}
    [ "$a" -lt "$b" ] && [ "$b" -le 65535 ] || die "bad -q '$QUEUES' (want A < B <= 65535)"
    TARGET="NFQUEUE --queue-balance $QUEUES --queue-bypass"
    QFIRST=$a
    NQ=$((b - a + 1))
    ;;
  *)
    [ "$QUEUES" -le 65535 ] || die "bad -q '$QUEUES' (want 0..65535)"
    TARGET="NFQUEUE --queue-num $QUEUES --queue-bypass"
    ;;
esac

case $PROTO in
  tcp) PMATCH="-p tcp" ;;
  all) PMATCH="" ;;
  *) die "bad -P '$PROTO' (want tcp or all)" ;;
esac

case $BALANCE in
  "")
    BALANCE=kernel
    if [ -n "$IFACES" ] || [ -n "$PREFIXES" ]; then BALANCE=subscriber; fi
    ;;
  kernel) ;;
  subscriber)
    [ -n "$IFACES" ] || [ -n "$PREFIXES" ] ||
      die "-b subscriber needs -i or -p (which side of a packet is the subscriber)"
    ;;
  *) die "bad -b '$BALANCE' (want subscriber or kernel)" ;;
esac
# One queue: nothing to spread.
[ "$NQ" -gt 1 ] || BALANCE=kernel
if [ "$BALANCE" = subscriber ] && [ -n "$IFACES" ] && [ -n "$PREFIXES" ]; then
  die "-b subscriber takes -i or -p, not both"
fi
[ "$NQ" -le 256 ] || [ "$BALANCE" = kernel ] || die "-b subscriber spreads over at most 256 queues"

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
  # An older version jumped for TCP only; the protocol is matched inside the chain now.
  while $ipt -w -C FORWARD -p tcp -j "$CHAIN" 2>/dev/null; do
    $ipt -w -D FORWARD -p tcp -j "$CHAIN"
  done
  $ipt -w -C FORWARD -j "$CHAIN" 2>/dev/null || $ipt -w -I FORWARD 1 -j "$CHAIN"
}

chain_remove() {
  ipt=$1
  while $ipt -w -C FORWARD -p tcp -j "$CHAIN" 2>/dev/null; do
    $ipt -w -D FORWARD -p tcp -j "$CHAIN"
  done
  while $ipt -w -C FORWARD -j "$CHAIN" 2>/dev/null; do
    $ipt -w -D FORWARD -j "$CHAIN"
  done
  if $ipt -w -n -L "$CHAIN" >/dev/null 2>&1; then
    $ipt -w -F "$CHAIN"
    $ipt -w -X "$CHAIN"
  fi
}

# key_tests FAMILY SIDE: one u32 test list per line, "QUEUE TESTS", that sends a packet
# whose subscriber address is on SIDE (src or dst) to queue A + key mod N.
key_tests() {
  # Offsets into the IP header of the 32-bit word whose low bits are the key: IPv4 the
  # address itself (src 12, dst 16); IPv6 the second half of the /64 prefix (src 8 + 4,
  # dst 24 + 4).
  case $1/$2 in
    4/src | 6/src) off=12 ;;
    4/dst) off=16 ;;
    6/dst) off=28 ;;
  esac
  if [ $((NQ & (NQ - 1))) -eq 0 ]; then
    qi=0
    while [ "$qi" -lt "$NQ" ]; do
      echo "$((QFIRST + qi)) $off&$((NQ - 1))=$qi"
      qi=$((qi + 1))
    done
    return
  fi
  # Any other N: the low 6 bits (8 above 64 queues), bucket k to queue A + k mod N, at most
  # 10 values per rule (the u32 match's limit). 64 buckets over N queues: no queue gets more
  # than one bucket above its share (N = 3: 22/21/21).
  buckets=64
  [ "$NQ" -le 64 ] || buckets=256
  qi=0
  while [ "$qi" -lt "$NQ" ]; do
    k=$qi
    vals=""
    n=0
    while [ "$k" -lt "$buckets" ]; do
      vals="${vals:+$vals,}$k"
      n=$((n + 1))
      k=$((k + NQ))
      if [ "$n" -eq 10 ]; then
        echo "$((QFIRST + qi)) $off&$((buckets - 1))=$vals"
        vals=""
        n=0
      fi
    done
    [ -z "$vals" ] || echo "$((QFIRST + qi)) $off&$((buckets - 1))=$vals"
    qi=$((qi + 1))
  done
}

# queue_by_key IPT FAMILY SIDE MATCH...: the rules for packets matching MATCH whose
# subscriber address is on SIDE.
queue_by_key() {
  ipt=$1
  fam=$2
  side=$3
  shift 3
  key_tests "$fam" "$side" | while read -r q tests; do
    # shellcheck disable=SC2086
    $ipt -w -A "$CHAIN" $PMATCH "$@" -m u32 --u32 "$tests" -j NFQUEUE --queue-num "$q" --queue-bypass
  done
}

in_family() {
  case $1 in
    *:*) [ "$2" = 6 ] ;;
    *) [ "$2" = 4 ] ;;
  esac
}

add_rules() {
  ipt=$1
  family=$2
  chain_reset "$ipt"
  # rsfcd adopts flows older than itself (a restart, an upgrade) with the window scales the
  # kernel's connection tracking recorded (flows.adopt_from_conntrack). A network namespace
  # tracks connections only once a rule needs it: this one does, and does nothing else (no
  # target: it only counts). RSFCD_CONNTRACK=no leaves it out.
  if [ "$CONNTRACK" != no ]; then
    $ipt -w -A "$CHAIN" -m conntrack --ctstate INVALID
  fi
  if [ -z "$IFACES" ] && [ -z "$PREFIXES" ]; then
    # shellcheck disable=SC2086
    $ipt -w -A "$CHAIN" $PMATCH -j $TARGET
    return
  fi
  if [ "$BALANCE" = subscriber ]; then
    # Subscriber to subscriber: both sides qualify, and each direction would key on its
    # own source; the symmetric kernel hash keeps the flow on one queue.
    for i in $IFACES; do
      for o in $IFACES; do
        # shellcheck disable=SC2086
        $ipt -w -A "$CHAIN" $PMATCH -i "$i" -o "$o" -j $TARGET
      done
    done
    for p in $PREFIXES; do
      in_family "$p" "$family" || continue
      for d in $PREFIXES; do
        in_family "$d" "$family" || continue
        # shellcheck disable=SC2086
        $ipt -w -A "$CHAIN" $PMATCH -s "$p" -d "$d" -j $TARGET
      done
    done
    for i in $IFACES; do
      queue_by_key "$ipt" "$family" src -i "$i"
      queue_by_key "$ipt" "$family" dst -o "$i"
    done
    for p in $PREFIXES; do
      in_family "$p" "$family" || continue
      queue_by_key "$ipt" "$family" src -s "$p"
      queue_by_key "$ipt" "$family" dst -d "$p"
    done
    return
  fi
  for i in $IFACES; do
    # shellcheck disable=SC2086
    $ipt -w -A "$CHAIN" $PMATCH -i "$i" -j $TARGET
    # shellcheck disable=SC2086
    $ipt -w -A "$CHAIN" $PMATCH -o "$i" -j $TARGET
  done
  for p in $PREFIXES; do
    in_family "$p" "$family" || continue
    # shellcheck disable=SC2086
    $ipt -w -A "$CHAIN" $PMATCH -s "$p" -j $TARGET
    # shellcheck disable=SC2086
    $ipt -w -A "$CHAIN" $PMATCH -d "$p" -j $TARGET
  done
}

case $cmd in
  add)
    for f in $FAMILIES; do
      if [ "$f" = 4 ]; then add_rules "$IPT4" 4; else add_rules "$IPT6" 6; fi
    done
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
