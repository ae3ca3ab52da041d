#!/bin/bash
# Q48 (lab/EXPERIMENTS.md): the simulator's window oracle on the three traces (15 starts each)
# and on the suite's nine trace windows (3 starts each), beside off, the clamps and the
# shipped settings. Run from a tree with q48-oracle.patch applied and rsfc-simsuite built:
#   git apply lab/sim-variants/q48-oracle.patch && ninja -C build rsfc-simsuite
#   bash lab/sim-variants/q48.sh OUTDIR        # prints both tables; the raw lines in OUTDIR
set -eu
out=${1:?OUTDIR}
mkdir -p "$out"
sim=${SIM:-build/rsfc-simsuite}
args="--threshold-ceiling 30 --download-alone-ceiling 80 --next-to-upload-only"
traces="TMobile-UMTS-driving Verizon-EVDO-driving Verizon-LTE-short"
windows="TMobile-UMTS-driving:0 TMobile-UMTS-driving:320 TMobile-UMTS-driving:570
  Verizon-EVDO-driving:560 Verizon-EVDO-driving:860 Verizon-EVDO-driving:960
  Verizon-LTE-short:20 Verizon-LTE-short:50 Verizon-LTE-short:100"
# LABEL POLICY [ENV=VALUE ...]: 15 starts per trace
traced() {
  local label=$1 pol=$2; shift 2
  for tr in $traces; do
    env "$@" $sim $tr 15 $pol $args | tail -1 | sed "s/^/$label /"
  done
}
# LABEL POLICY [ENV=VALUE ...]: the nine windows, starts S, S+1, S+2
windowed() {
  local label=$1 pol=$2; shift 2
  for w in $windows; do
    env "$@" $sim ${w%%:*} 3 $pol --start ${w##*:} $args | tail -1 | sed "s/^/$label @${w##*:} /"
  done
}
{
  for p in off 64K 128K paced; do traced $p $p; done
  for t in 0 30 100 200 400 800; do traced T$t oracle ORACLE_T_MS=$t; done
  for d in 50 100 200 300; do traced fut-T400-D$d oracle ORACLE_T_MS=400 ORACLE_DELAY_MS=$d; done
  for t in 100 200 400 800; do traced past-T$t oracle ORACLE_T_MS=$t ORACLE_PAST=1; done
  for a in 1000 3000; do for t in 200 400; do
    traced past-T$t-avg$a oracle ORACLE_T_MS=$t ORACLE_PAST=1 ORACLE_AVG_MS=$a
  done; done
  for t in 100 200 400; do traced pacedT$t paced Q48_FIXED_T_MS=$t; done
  for h in down up; do
    traced hyb-$h-fut200 paced Q48_HYBRID=$h ORACLE_T_MS=200
    traced hyb-$h-past200 paced Q48_HYBRID=$h ORACLE_T_MS=200 ORACLE_PAST=1
  done
  for t in 30 100 400; do traced hyb-down-past$t paced Q48_HYBRID=down ORACLE_T_MS=$t ORACLE_PAST=1; done
  for x in 250 1000; do traced rate$x paced Q48_RATE_MS=$x; done
  for t in 100 200 400; do
    traced downT$t paced Q48_DOWN_T_MS=$t
    traced downT$t-rate1000 paced Q48_DOWN_T_MS=$t Q48_RATE_MS=1000
  done
  for x in 100 200 400; do traced swing+$x paced Q48_SWING_MS=$x; done
} > "$out/traces.txt"
{
  for p in off 64K 128K paced; do windowed $p $p; done
  for t in 200 400 800 1600; do windowed fut$t oracle ORACLE_T_MS=$t; done
  windowed fut400d100 oracle ORACLE_T_MS=400 ORACLE_DELAY_MS=100
  for t in 200 400; do windowed past$t oracle ORACLE_T_MS=$t ORACLE_PAST=1; done
} > "$out/windows.txt"
/usr/bin/python3 - "$out" <<'PY'
import collections, re, sys
out = sys.argv[1]
pat = re.compile(r'^(\S+)\s+(?:@(\d+)\s+)?(\S+) \S+ median: dl\s+([\d.]+) % ul\s+([\d.]+) % '
                 r'p95\s+(\d+) ms \| alone dl\s+([\d.]+) % p95\s+(\d+) ms')
def load(path):
    d = collections.OrderedDict()
    for line in open(path):
        m = pat.match(line)
        if m:
            lab, st, tr, dl, ul, p95, adl, ap95 = m.groups()
            d.setdefault(lab, {})[(tr, st)] = (float(dl), float(ul), int(p95), float(adl), int(ap95))
    return d
def ms(x):
    return f"{x} ms" if x < 1000 else f"{x / 1000:.2f} s"
def name(k):
    if k in ('off', '64K', '128K'): return k
    if k == 'paced': return 'shipped'
    if k.startswith('T'): return f'ahead, T {k[1:]}'
    if k.startswith('fut-T400-D'): return f'ahead, T 400, {k[10:]} ms less foresight'
    if k.startswith('past-T') and 'avg' in k:
        t, a = k[6:].split('-avg'); return f'past, T {t}, rate of the last {int(a) / 1000:g} s'
    if k.startswith('past-T'): return f'past, T {k[6:]}'
    if k.startswith('pacedT'): return f'shipped, fixed T {k[6:]} on both knobs'
    if k.startswith('hyb-'):
        _, h, v = k.split('-')
        mode, t = ('ahead', v[3:]) if v.startswith('fut') else ('past', v[4:])
        return f'{"downlink" if h == "down" else "uplink"} knob only: {mode}, T {t}'
    if k.startswith('swing+'): return f'shipped, {k[6:]} ms more in the swing window'
    if k.startswith('rate'): return f"shipped, the downlink law's rate the true one of the last {k[4:]} ms"
    if k.startswith('downT'):
        t = k[5:].split('-')[0]
        r = ", its rate the true one of the last 1000 ms" if 'rate' in k else ''
        return f"shipped, the downlink's T fixed at {t}{r}"
    if k.startswith('fut400d'): return 'ahead 400, 100 ms less foresight'
    if k.startswith('fut'): return f'ahead {k[3:]}'
    if k.startswith('past'): return f'past {k[4:]}'
    return k
trs = ['TMobile-UMTS-driving', 'Verizon-EVDO-driving', 'Verizon-LTE-short']
d = load(f'{out}/traces.txt')
print('| policy (T in ms) | UMTS | EV-DO | LTE trace |\n|---|---|---|---|')
for k, v in d.items():
    print(f'| {name(k)} | ' + ' | '.join(
        f'{v[(tr, None)][0]:.0f} / {v[(tr, None)][1]:.0f}, {ms(v[(tr, None)][2])}' for tr in trs) + ' |')
print()
c = load(f'{out}/windows.txt')
wins = [(t, s) for t in trs for s in ({'TMobile-UMTS-driving': ['0', '320', '570'],
        'Verizon-EVDO-driving': ['560', '860', '960'], 'Verizon-LTE-short': ['20', '50', '100']}[t])]
short = {'TMobile-UMTS-driving': 'umts', 'Verizon-EVDO-driving': 'evdo', 'Verizon-LTE-short': 'lte'}
half = {w: c['off'][w][4] / 2 for w in wins}
print('| policy (T in ms) | ' + ' | '.join(f'{short[t]}@{s}s' for t, s in wins) +
      ' | windows met | worst min |\n|---|' + '---|' * (len(wins) + 2))
for k, v in c.items():
    cells, met, worst = [], 0, 999.0
    for w in wins:
        dl, ul, p95 = v[w][:3]
        ok = dl >= 85 and ul >= 80 and p95 <= half[w]
        met += ok
        worst = min(worst, dl, ul)
        b = '**' if ok else ''
        cells.append(f'{b}{dl:.0f} / {ul:.0f}{b}')
    print(f'| {name(k)} | ' + ' | '.join(cells) + f' | {met} | {worst:.0f} |')
PY
