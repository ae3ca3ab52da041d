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
# Each applies its patch to a scratch worktree at 0e9b3fc and builds rsfc-simsuite there.
#   lab/sim-variants/q54.sh [pacing|explore|util]     # a minute or two each on two cores
set -euo pipefail
repo=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
what=${1:-pacing}
patch=q54-nots-gateway-pacing.patch
[ "$what" != pacing ] && patch=q54-nots-explore.patch
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
