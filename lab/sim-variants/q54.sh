#!/bin/bash
# Q54 of lab/EXPERIMENTS.md, in the packet simulator, a phone without timestamps:
#   pacing   the hypothesis's paired run: the shipped settings against the same build with the
#            timestamp-less download paced on the gateway's clock (q54-nots-gateway-pacing.patch,
#            Q54_PACE=1), 45 starts per cell, all cells of lab/sim_compare.py, and the same pair
#            with timestamps (byte-identical)
#   explore  the exploration's one-run table on 3G (q54-nots-explore.patch: scratch switches
#            read from the environment and queue prints; not for main)
#   util     the lead: the upload's window from its uplink's idle time (Q54_UTIL) with the
#            download paced, nine starts per cell, beside the shipped settings and pacing alone
#   q55      Q55's form (the idle law, its gates and the download's T; Q55_ENV below) paired
#            against the shipped settings: the cells it was shaped on (45 starts), the fourteen
#            links of RESULTS §13 (15 starts), and the form counting every packet of the phone
# Each applies its patch to a scratch worktree at 0e9b3fc and builds rsfc-simsuite there.
#   lab/sim-variants/q54.sh [pacing|explore|util|q55]   # a minute or two each (q55: 15)
set -euo pipefail
repo=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
what=${1:-pacing}
patch=q54-nots-gateway-pacing.patch
[ "$what" != pacing ] && patch=q54-nots-explore.patch
Q55_ENV="Q54_UTIL=1 Q54_PACE=1 Q54_DT_MS=30 Q54_TB_MS=100 Q54_CAPWIN_S=2 Q54_LAW2=1 Q54_CVMAX=0.3"
Q55_ENV="$Q55_ENV Q54_DT_GATE=1 Q54_PACE_GATE=1 Q54_DOWN=0.95"
wt=$(mktemp -d /tmp/rsfc-q54.XXXXXX)
base=$(mktemp -d /tmp/rsfc-q54-base.XXXXXX)
trap 'git -C "$repo" worktree remove --force "$wt" >/dev/null 2>&1 || true
      git -C "$repo" worktree remove --force "$base" >/dev/null 2>&1 || true' EXIT
git -C "$repo" worktree add -q --detach "$wt" 0e9b3fc
git -C "$repo" worktree add -q --detach "$base" 0e9b3fc
git -C "$wt" apply "$repo/lab/sim-variants/$patch"
for t in "$wt" "$base"; do
  cmake -S "$t" -B "$t/build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build "$t/build" --target rsfc-simsuite >/dev/null
done
sim="$wt/build/rsfc-simsuite"
shipped=(paced --threshold-ceiling 30 --download-alone-ceiling 80 --next-to-upload-only)
if [ "$what" = explore ]; then
  # One run of 3G without timestamps per form; "Q" lines: each queue's mean and p95 (ms).
  for v in X=1 Q54_UP_NOREBASE=1 Q54_DOWN_NOREBASE=1 "Q54_UP_NOREBASE=1 Q54_DOWN_NOREBASE=1" \
    Q54_FLOOR_UP=1 Q54_FLOOR_DOWN=1 "Q54_FLOOR_UP=1 Q54_FLOOR_DOWN=1" Q54_IDLE=1 \
    "Q54_IDLE=1 Q54_WIN_MS=3000" Q54_PACE=1 "Q54_PACE=1 Q54_SPAN_MS=150" \
    "Q54_PACE=1 Q54_SPAN_MS=500" "Q54_PACE=1 Q54_SPAN_MS=1000" Q54_UTIL=1 \
    "Q54_UTIL=1 Q54_PACE=1"; do
    echo "== $v"
    env DIAGQ=1 $v "$sim" 3g 1 "${shipped[@]}" --no-timestamps 2>&1 | grep '^Q\|median'
  done
  exit 0
fi
if [ "$what" = q55 ]; then
  printf '#!/bin/bash\n%s exec %s "$@"\n' "$Q55_ENV" "$sim" > "$wt/q55.sh"
  printf '#!/bin/bash\nQ54_ALLPKT=1 %s exec %s "$@"\n' "$Q55_ENV" "$sim" > "$wt/all.sh"
  chmod +x "$wt/q55.sh" "$wt/all.sh"
  echo "== the cells the form was shaped on, 45 starts: A shipped, B Q55's form"
  /usr/bin/python3 "$repo/lab/sim_compare.py" "$base/build/rsfc-simsuite" "$wt/q55.sh" --runs 45 \
    --cells "2g,3g,lte,Verizon-EVDO-driving,TMobile-UMTS-driving,Verizon-LTE-short,\
swing:2000:7200:40:4:1000:1049:262,link:500:2000:100,link:1000:4000:150" \
    -- "${shipped[@]}" --no-timestamps
  links=""
  for L in 300:1000:300 500:2000:100 500:2000:250 1000:5000:80 1000:30000:60 2000:7200:150 \
    2000:7200:300 4000:4000:60 5000:20000:40 5000:20000:20 10000:30000:120 20000:100000:30 \
    200:200:600 150:400:400; do links="$links,link:$L"; done
  echo "== the fourteen links of RESULTS §13, 15 starts: A shipped, B Q55's form"
  /usr/bin/python3 "$repo/lab/sim_compare.py" "$base/build/rsfc-simsuite" "$wt/q55.sh" --runs 15 \
    --cells "${links#,}" -- "${shipped[@]}" --no-timestamps
  echo "== every packet of the phone counted for the idle time (Q54_ALLPKT), nine starts"
  for c in 3g lte link:1000:30000:60 link:500:2000:250 link:200:200:600 link:150:400:400 \
    TMobile-UMTS-driving; do
    "$wt/all.sh" $c 9 "${shipped[@]}" --no-timestamps | tail -1
  done
  echo "== the same on the fourteen links, 15 starts: A shipped, B every packet counted"
  /usr/bin/python3 "$repo/lab/sim_compare.py" "$base/build/rsfc-simsuite" "$wt/all.sh" --runs 15 \
    --cells "${links#,}" -- "${shipped[@]}" --no-timestamps
  exit 0
fi
if [ "$what" = util ]; then
  for v in X=1 Q54_PACE=1 "Q54_UTIL=1 Q54_PACE=1"; do
    echo "== $v (X=1: the shipped settings)"
    for c in 3g lte 2g link:500:2000:100 link:1000:4000:150 TMobile-UMTS-driving \
      Verizon-EVDO-driving Verizon-LTE-short; do
      env $v "$sim" $c 9 "${shipped[@]}" --no-timestamps | tail -1
    done
  done
  exit 0
fi
printf '#!/bin/bash\nQ54_PACE=1 exec %s "$@"\n' "$sim" > "$wt/b.sh"
chmod +x "$wt/b.sh"
echo "== without timestamps: A shipped, B the download paced on the gateway's clock"
/usr/bin/python3 "$repo/lab/sim_compare.py" "$base/build/rsfc-simsuite" "$wt/b.sh" --runs 45 \
  -- "${shipped[@]}" --no-timestamps
echo "== with timestamps (every start should be identical)"
/usr/bin/python3 "$repo/lab/sim_compare.py" "$base/build/rsfc-simsuite" "$wt/b.sh" --runs 15
