#!/bin/bash
# Q56 of lab/EXPERIMENTS.md: a phone without timestamps, its upload's window from the idle time
# of its uplink over every packet the phone sends (Q55's law, Q54_ALLPKT), each idle gap read
# beyond its own packet's time with no absolute slack (Q54_GAPMS=0; Q55 had 0.5 ms).
#   sim    the hypothesis's paired runs in the simulator: the fourteen fresh links chosen for
#          it (15 starts), then the cells Q55 was shaped on (45 starts); A the shipped settings,
#          B the form (about twenty minutes on two cores)
#   lawonly  the law without the download's part (no pacing, no 30 ms ceiling), on the cells
#          Q55 was shaped on (45 starts), against the shipped settings (about ten minutes)
#   build  only builds the scratch tree and prints its path: its build/rsfcd is the lab's
#          variant (run it with the environment this script prints)
# The patch (q56-idle-all-packets.patch: q54-nots-explore.patch with the engine feeding every
# phone packet, the gap's slack a switch, and the phone's counts cumulative with a snapshot per
# regulator) applies to a scratch worktree at 0e9b3fc.
#   lab/sim-variants/q56.sh [sim|lawonly|build]
set -euo pipefail
repo=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
what=${1:-sim}
ENV="Q54_UTIL=1 Q54_PACE=1 Q54_DT_MS=30 Q54_TB_MS=100 Q54_CAPWIN_S=2 Q54_LAW2=1 Q54_CVMAX=0.3"
ENV="$ENV Q54_DT_GATE=1 Q54_PACE_GATE=1 Q54_DOWN=0.95 Q54_ALLPKT=1 Q54_GAPMS=0"
wt=$(mktemp -d /tmp/rsfc-q56.XXXXXX)
git -C "$repo" worktree add -q --detach "$wt" 0e9b3fc
git -C "$wt" apply "$repo/lab/sim-variants/q56-idle-all-packets.patch"
cmake -S "$wt" -B "$wt/build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
if [ "$what" = build ]; then
  cmake --build "$wt/build" >/dev/null
  echo "variant build: $wt/build (remove with: git worktree remove --force $wt)"
  echo "environment for it: $ENV"
  exit 0
fi
base=$(mktemp -d /tmp/rsfc-q56-base.XXXXXX)
trap 'git -C "$repo" worktree remove --force "$wt" >/dev/null 2>&1 || true
      git -C "$repo" worktree remove --force "$base" >/dev/null 2>&1 || true' EXIT
git -C "$repo" worktree add -q --detach "$base" 0e9b3fc
cmake -S "$base" -B "$base/build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
for t in "$wt" "$base"; do cmake --build "$t/build" --target rsfc-simsuite >/dev/null; done
shipped=(paced --threshold-ceiling 30 --download-alone-ceiling 80 --next-to-upload-only
  --no-timestamps)
cells="2g,3g,lte,Verizon-EVDO-driving,TMobile-UMTS-driving,Verizon-LTE-short,\
swing:2000:7200:40:4:1000:1049:262,link:500:2000:100,link:1000:4000:150"
# compare TITLE ENVIRONMENT RUNS CELLS: A the shipped settings, B the variant in ENVIRONMENT.
compare() {
  printf '#!/bin/bash\n%s exec %s "$@"\n' "$2" "$wt/build/rsfc-simsuite" > "$wt/b.sh"
  chmod +x "$wt/b.sh"
  echo "== $1, $3 starts"
  /usr/bin/python3 "$repo/lab/sim_compare.py" "$base/build/rsfc-simsuite" "$wt/b.sh" --runs "$3" \
    --cells "$4" -- "${shipped[@]}"
}
if [ "$what" = lawonly ]; then
  law=$(echo "$ENV" | sed 's/Q54_PACE=1 //; s/Q54_DT_MS=30 //; s/Q54_DT_GATE=1 //;
    s/Q54_PACE_GATE=1 //')
  compare "the cells Q55 was shaped on: A shipped, B the law alone" "$law" 45 "$cells"
  exit 0
fi
links=""
for L in 3000:12000:70 800:3000:180 1500:1500:40 6000:40000:25 2500:50000:50 400:1200:120 \
  12000:60000:80 700:8000:35 3000:20000:200 250:600:250 8000:15000:150 1200:2400:400 \
  30000:150000:15 100:300:300; do links="$links,link:$L"; done
compare "fourteen fresh links: A shipped, B the form" "$ENV" 15 "${links#,}"
compare "the cells Q55 was shaped on: A shipped, B the form" "$ENV" 45 "$cells"
