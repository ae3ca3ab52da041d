#!/bin/bash
# Q16 of lab/EXPERIMENTS.md: twelve ways of splitting the two knobs' signals, in the packet
# simulator (test/regulator_sim.h), download + upload on its 3G and LTE links, three seeds.
# Applies coupling.patch (experiment switches read from the environment; not for main) to a
# scratch worktree, builds the simulator driver, prints one line per run and the medians.
#   lab/sim-variants/coupling.sh            # about 1 minute
set -euo pipefail
repo=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
wt=$(mktemp -d /tmp/rsfc-coupling.XXXXXX)
trap 'git -C "$repo" worktree remove --force "$wt" >/dev/null 2>&1 || true' EXIT
git -C "$repo" worktree add -q --detach "$wt" f0343f4  # the controllers the patch was written on
git -C "$wt" apply "$repo/lab/sim-variants/coupling.patch"
cmake -S "$wt" -B "$wt/build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$wt/build" --target rsfc_regulators >/dev/null
g++ -std=c++20 -O2 -I"$wt/include" -I"$wt/build/generated" -I"$wt/test" "$wt/test/coupling_sim_main.cpp" \
  "$wt/build/librsfc_regulators.a" "$wt/build/librsfc_packet.a" -o "$wt/cpl"
out="$wt/runs.txt"
while IFS='|' read -r name envs; do
  for link in 3g lte; do for seed in 0 1 2; do
    echo "$name|$link|$seed|$(env $envs "$wt/cpl" "$wt/trace.csv" 1 $link $seed)" | tee -a "$out"
  done; done
done <<'V'
current (own-queue troughs, each covers the other)|X=0
D: loop-sum trough, T auto|XSUM=1
D: loop-sum trough, T 80 ms|XSUM=1 XT=80
D: loop-sum trough, T 160 ms|XSUM=1 XT=160
D: loop-sum trough less uplink trough|XSUM=1 XSUB=1
D: loop-sum less mean uplink wait|XSUM=1 XMEAN=1
D: rtt without the ACKs' uplink wait|XUP=1
D: rtt covers the uplink wait's 1 s trough only|XUPT=1000
U: phone loop-sum (shared from D) as its queue|XU=1
U+D: both on the loop sum, T auto|XU=1 XSUM=1
U+D: both on the loop sum, T 40 ms|XU=1 XSUM=1 XT=40 UT=40
U: loop sum; D: covers uplink trough only|XU=1 XUPT=1000
V
/usr/bin/python3 - "$out" <<'PY'
import re, statistics as st, sys, collections
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    name, link, seed, res = line.rstrip("\n").split("|")
    m = re.search(r"up ([\d.]+) Mbit/s\s+down ([\d.]+) Mbit/s\s+ping p50 (\d+) p95 (\d+)", res)
    rows[(link, name)].append([float(x) for x in m.groups()])
for (link, name), v in rows.items():
    med = [st.median(x[i] for x in v) for i in range(4)]
    print(f"{link:4s} {name:55s} up {med[0]:5.2f} down {med[1]:5.2f} p50 {med[2]:4.0f} p95 {med[3]:4.0f}")
PY
