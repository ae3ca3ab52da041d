#!/bin/sh
# Installs, removes or shows the NFQUEUE rules that feed rsfcd (iptables-legacy and
# ip6tables-legacy: nftables' own `queue` expression is not available on every kernel).
#
#   rsfcd-iptables.sh add  [-q QUEUES] [-b subscriber|kernel] [-i IFACE]... [-p PREFIX]...
#                          [-P PROTO] [-k KNOBS [-t BYTES] [-H]]
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
#   -k KNOBS   which packets: all (default: every packet of PROTO, handshakes included), or
#              only what the enabled knobs of rsfcd.yaml read, a comma list of
#              uplink    both directions of the flows that upload: more than BYTES from the
#                        phone, at an average of at least 200 bytes a packet (a download's
#                        pure ACKs, 40-100 bytes, never qualify it);
#              downlink  both directions of the flows that download: the same test on the
#                        bytes towards the phone.
#              Needs -i or -p (which side is the phone) and -P tcp. A knob whose flows are
#              not queued does nothing to them, so KNOBS must name every knob whose policy
#              is not off. Flows reach rsfcd mid-stream; it regulates them once it knows
#              their window scales (from conntrack, or from the handshake with -H).
#   -t BYTES   the threshold of -k (IP bytes in the knob's direction, headers included, as
#              conntrack counts them). Default 65536 (64 KB, the most a handshake offers).
#   -H         with -k: queue every flow's SYN and SYN-ACK too (2 packets a flow), so rsfcd
#              learns the window scales, MSS and timestamp use from the handshake.
#
# The rules live in their own chain (RSFCD, or $RSFCD_CHAIN) jumped to from FORWARD, in
# both iptables and ip6tables ($RSFCD_FAMILIES, default "4 6"); with -k the chain selects
# and a second one ($RSFCD_CHAIN-Q) queues. `add` is idempotent: it rewrites the chains and
# keeps one jump. `del` removes the jump and the chains. Needs root. -k uses conntrack's
# byte counters (the connbytes match turns nf_conntrack_acct on): connections older than the
# rules have none and are never queued.
# The chain's first rule, a conntrack match without a target, turns connection tracking on
# for rsfcd's flow adoption ($RSFCD_CONNTRACK=no leaves it out; -k needs it anyway).
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
QCHAIN=$CHAIN-Q
IPT4=${IPTABLES:-iptables-legacy}
IPT6=${IP6TABLES:-ip6tables-legacy}
FAMILIES=${RSFCD_FAMILIES:-4 6}
CONNTRACK=${RSFCD_CONNTRACK:-yes}
for f in $FAMILIES; do
  case $f in 4 | 6) ;; *) echo "rsfcd-iptables: bad RSFCD_FAMILIES '$FAMILIES' (want 4 and/or 6)" >&2; exit 1 ;; esac
done

usage() {
  sed -n '2,42p' "$0" | sed 's/^# \{0,1\}//' >&2
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
KNOBS=all
THRESHOLD=65536
HANDSHAKE=no
while getopts "q:b:i:p:P:k:t:Hh" opt; do
  case $opt in
    q) QUEUES=$OPTARG ;;
    b) BALANCE=$OPTARG ;;
    i) IFACES="$IFACES $OPTARG" ;;
    p) PREFIXES="$PREFIXES $OPTARG" ;;
    P) PROTO=$OPTARG ;;
    k) KNOBS=$OPTARG ;;
    t) THRESHOLD=$OPTARG ;;
    H) HANDSHAKE=yes ;;
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

# -k: UPLINK / DOWNLINK say which knobs' flows are queued; both no means everything.
UPLINK=no
DOWNLINK=no
case $KNOBS in
  all) ;;
  uplink) UPLINK=yes ;;
  downlink) DOWNLINK=yes ;;
  uplink,downlink | downlink,uplink) UPLINK=yes DOWNLINK=yes ;;
  *) die "bad -k '$KNOBS' (want all, uplink, downlink or uplink,downlink)" ;;
esac
case $THRESHOLD in
  "" | *[!0-9]* | 0?*) die "bad -t '$THRESHOLD' (want a byte count)" ;;
esac
[ ${#THRESHOLD} -le 18 ] || die "bad -t '$THRESHOLD' (want a byte count)"
if [ "$KNOBS" = all ]; then
  [ "$HANDSHAKE" = no ] || die "-H goes with -k (with -k all every handshake is queued)"
else
  [ -n "$IFACES" ] || [ -n "$PREFIXES" ] ||
    die "-k $KNOBS needs -i or -p (which side of a packet is the phone)"
  [ "$PROTO" = tcp ] || die "-k $KNOBS queues TCP flows only (-P tcp)"
fi

for i in $IFACES; do
  case $i in *[!A-Za-z0-9_.@-]*) die "bad interface name '$i'" ;; esac
done
for p in $PREFIXES; do
  case $p in *[!0-9A-Fa-f.:/]*) die "bad prefix '$p'" ;; esac
done

command -v "$IPT4" >/dev/null 2>&1 || die "$IPT4 not found"
command -v "$IPT6" >/dev/null 2>&1 || die "$IPT6 not found"

# chain_exists IPT NAME
chain_exists() {
  $1 -w -n -L "$2" >/dev/null 2>&1
}

# chain_reset IPT: the chain exists and is empty, and so does the queueing chain with -k
# (without -k an earlier one is removed); FORWARD jumps to the chain exactly once.
chain_reset() {
  ipt=$1
  $ipt -w -N "$CHAIN" 2>/dev/null || $ipt -w -F "$CHAIN"
  if [ "$KNOBS" != all ]; then
    $ipt -w -N "$QCHAIN" 2>/dev/null || $ipt -w -F "$QCHAIN"
  elif chain_exists "$ipt" "$QCHAIN"; then
    $ipt -w -F "$QCHAIN"
    $ipt -w -X "$QCHAIN"
  fi
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
  # The chain first: it may jump to the queueing chain.
  if chain_exists "$ipt" "$CHAIN"; then $ipt -w -F "$CHAIN"; fi
  if chain_exists "$ipt" "$QCHAIN"; then
    $ipt -w -F "$QCHAIN"
    $ipt -w -X "$QCHAIN"
  fi
  if chain_exists "$ipt" "$CHAIN"; then $ipt -w -X "$CHAIN"; fi
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
    $ipt -w -A "$QTO" $PMATCH "$@" -m u32 --u32 "$tests" -j NFQUEUE --queue-num "$q" --queue-bypass
  done
}

in_family() {
  case $1 in
    *:*) [ "$2" = 6 ] ;;
    *) [ "$2" = 4 ] ;;
  esac
}

# queue_rules IPT FAMILY: the rules that queue (in the chain, or with -k in the queueing
# chain, which only sees packets the chain selected).
queue_rules() {
  ipt=$1
  family=$2
  if [ -z "$IFACES" ] && [ -z "$PREFIXES" ] || { [ "$KNOBS" != all ] && [ "$BALANCE" = kernel ]; }; then
    # shellcheck disable=SC2086
    $ipt -w -A "$QTO" $PMATCH -j $TARGET
    return
  fi
  if [ "$BALANCE" = subscriber ]; then
    # Subscriber to subscriber: both sides qualify, and each direction would key on its
    # own source; the symmetric kernel hash keeps the flow on one queue.
    for i in $IFACES; do
      for o in $IFACES; do
        # shellcheck disable=SC2086
        $ipt -w -A "$QTO" $PMATCH -i "$i" -o "$o" -j $TARGET
      done
    done
    for p in $PREFIXES; do
      in_family "$p" "$family" || continue
      for d in $PREFIXES; do
        in_family "$d" "$family" || continue
        # shellcheck disable=SC2086
        $ipt -w -A "$QTO" $PMATCH -s "$p" -d "$d" -j $TARGET
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
    $ipt -w -A "$QTO" $PMATCH -i "$i" -j $TARGET
    # shellcheck disable=SC2086
    $ipt -w -A "$QTO" $PMATCH -o "$i" -j $TARGET
  done
  for p in $PREFIXES; do
    in_family "$p" "$family" || continue
    # shellcheck disable=SC2086
    $ipt -w -A "$QTO" $PMATCH -s "$p" -j $TARGET
    # shellcheck disable=SC2086
    $ipt -w -A "$QTO" $PMATCH -d "$p" -j $TARGET
  done
}

# select_side IPT FROM TO: with -k, the rules that send a packet of a qualifying flow to the
# queueing chain; FROM matches the packets the phone sent (-i IFACE or -s PREFIX), TO the
# packets to it. Conntrack's "original" direction is the initiator's: the phone's own bytes
# are "original" when the phone opened the connection (a packet from it in the ORIGINAL
# direction, or to it in the REPLY direction), "reply" when it accepted it.
select_side() {
  ipt=$1
  from=$2
  to=$3
  if [ "$HANDSHAKE" = yes ]; then
    # shellcheck disable=SC2086
    $ipt -w -A "$CHAIN" -p tcp $from --tcp-flags SYN SYN -g "$QCHAIN"
    # shellcheck disable=SC2086
    $ipt -w -A "$CHAIN" -p tcp $to --tcp-flags SYN SYN -g "$QCHAIN"
  fi
  if [ "$UPLINK" = yes ] && [ "$DOWNLINK" = yes ]; then
    # A flow that uploads or downloads: either direction qualifies, whoever opened it.
    for side in "$from" "$to"; do
      select_flows "$ipt" "$side" "" original
      select_flows "$ipt" "$side" "" reply
    done
    return
  fi
  # Per line: the side, the packet's conntrack direction, the conntrack direction of the
  # phone's bytes, that of the bytes towards the phone.
  for combo in "from ORIGINAL original reply" "from REPLY reply original" \
    "to REPLY original reply" "to ORIGINAL reply original"; do
    # shellcheck disable=SC2086
    set -- $combo
    if [ "$1" = from ]; then side=$from; else side=$to; fi
    [ "$UPLINK" = no ] || select_flows "$ipt" "$side" "$2" "$3"
    [ "$DOWNLINK" = no ] || select_flows "$ipt" "$side" "$2" "$4"
  done
}

# select_flows IPT "MATCH ARG" CTDIR DIR: packets matching MATCH ARG in conntrack direction
# CTDIR (any if empty), of flows that carried more than THRESHOLD bytes in direction DIR at an average of
# at least 200 bytes a packet (data, not pure ACKs), go to the queueing chain.
select_flows() {
  ipt=$1
  ctdir=""
  [ -z "$3" ] || ctdir="-m conntrack --ctdir $3"
  # shellcheck disable=SC2086
  $ipt -w -A "$CHAIN" -p tcp $2 $ctdir \
    -m connbytes --connbytes "$THRESHOLD:" --connbytes-dir "$4" --connbytes-mode bytes \
    -m connbytes --connbytes 200: --connbytes-dir "$4" --connbytes-mode avgpkt -g "$QCHAIN"
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
  if [ "$KNOBS" = all ]; then
    QTO=$CHAIN
    queue_rules "$ipt" "$family"
    return
  fi
  QTO=$QCHAIN
  queue_rules "$ipt" "$family"
  for i in $IFACES; do
    select_side "$ipt" "-i $i" "-o $i"
  done
  for p in $PREFIXES; do
    in_family "$p" "$family" || continue
    select_side "$ipt" "-s $p" "-d $p"
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
      if chain_exists "$ipt" "$QCHAIN"; then $ipt -w -n -v -L "$QCHAIN"; fi
    done
    ;;
  -h | --help | help) usage ;;
  *) usage ;;
esac
