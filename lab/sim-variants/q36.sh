#!/bin/bash
# Q36 of lab/EXPERIMENTS.md, in the packet simulator: (1) the balancer (each direction's share
# of its link's service as the gateway sees it, steering the download's T or the upload's T
# toward the short transfer), paired against the same build without it; (2) every pair of
# fixed windows of a grid on the three traces, fifteen starts each, against the shipped
# configuration. Applies q36-balance-grid.patch (scratch switches read from the environment;
# not for main) to a scratch worktree at 63ea064 and builds rsfc-simsuite there.
#   lab/sim-variants/q36.sh [balance|grid]     # a minute or two each on two cores
set -euo pipefail
repo=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
what=${1:-grid}
wt=$(mktemp -d /tmp/rsfc-q36.XXXXXX)
trap 'git -C "$repo" worktree remove --force "$wt" >/dev/null 2>&1 || true' EXIT
git -C "$repo" worktree add -q --detach "$wt" 63ea064
git -C "$wt" apply "$repo/lab/sim-variants/q36-balance-grid.patch"
cmake -S "$wt" -B "$wt/build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$wt/build" --target rsfc-simsuite >/dev/null
sim="$wt/build/rsfc-simsuite"
if [ "$what" = balance ]; then
  # A: the build as it is; B: the balancer on the download's window (w), its T (t) or the
  # upload's T (u).
  printf '#!/bin/bash\nexec %s "$@"\n' "$sim" > "$wt/a.sh"
  printf '#!/bin/bash\nRSFC_BAL=1 exec %s "$@"\n' "$sim" > "$wt/w.sh"
  printf '#!/bin/bash\nRSFC_BAL=1 RSFC_BAL_T=1 RSFC_BAL_MAX=3.3 exec %s "$@"\n' "$sim" > "$wt/t.sh"
  printf '#!/bin/bash\nRSFC_BAL=1 RSFC_BAL_U=1 RSFC_BAL_ETA=1 RSFC_BAL_MAX=3 exec %s "$@"\n' \
    "$sim" > "$wt/u.sh"
  chmod +x "$wt"/*.sh
  for arm in w t u; do
    echo "== the balancer, arm $arm (w: the download's window, t: its T, u: the upload's T)"
    /usr/bin/python3 "$repo/lab/sim_compare.py" "$wt/a.sh" "$wt/$arm.sh" --runs 45
  done
  exit 0
fi
cells=(Verizon-EVDO-driving TMobile-UMTS-driving Verizon-LTE-short)
shipped=(paced --threshold-ceiling 30 --download-alone-ceiling 80 --next-to-upload-only)
for t in "${cells[@]}"; do
  "$sim" "$t" 15 "${shipped[@]}" > "$wt/shipped-$t.txt"
  for u in 0 8 16 24 32 48 64 96 128 256; do for d in 0 8 16 32 64 128 256; do
    echo "$t $u $d"
  done; done
done | xargs -P2 -L1 bash -c \
  'RSFC_GRID=1 RSFC_GRID_UP=$1 RSFC_GRID_DN=$2 '"$sim"' $0 15 64K > '"$wt"'/g-$0-$1-$2.txt'
/usr/bin/python3 - "$wt" "${cells[@]}" <<'PY'
import glob, re, statistics as st, sys
LINE = re.compile(r"from\s+(\d+): dl\s+([\d.]+) % ul\s+([\d.]+) % p95\s+(\d+) ms .*"
                  r"\(unregulated\s+(\d+) ms\)")
def rows(path):
    out = {}
    for line in open(path):
        m = LINE.search(line)
        if m:
            s, dl, ul, p95, unreg = m.groups()
            out[int(s)] = (float(dl), float(ul), float(p95), float(unreg))
    return out
wt = sys.argv[1]
print("per trace, 15 starts, 70 pairs of fixed windows (uplink 0-256 KB x downlink 0-256 KB,"
      " 0 = none); 'p95 ok' = p95 under both <= half the unregulated download alone's")
for t in sys.argv[2:]:
    ship = rows(f"{wt}/shipped-{t}.txt")
    grid = {f: rows(f) for f in glob.glob(f"{wt}/g-{t}-*.txt")}
    starts = sorted(ship)
    ok = lambda r: r[2] <= 0.5 * r[3]
    meet = lambda r: r[0] >= 85 and r[1] >= 80 and ok(r)
    n_meet = sum(any(meet(g[s]) for g in grid.values()) for s in starts)
    best_min = st.median(max([min(g[s][:2]) for g in grid.values() if ok(g[s])] or [0])
                         for s in starts)
    best_sum = st.median(max([sum(g[s][:2]) for g in grid.values() if ok(g[s])] or [0])
                         for s in starts)
    best_dl = st.median(max([g[s][0] for g in grid.values() if ok(g[s]) and g[s][1] >= 80]
                            or [0]) for s in starts)
    print(f"{t}: starts where some pair meets the trace targets {n_meet} / {len(starts)} "
          f"(shipped {sum(meet(ship[s]) for s in starts)}); per-start best, p95 ok: "
          f"min(dl, ul) {best_min:.1f} (shipped {st.median(min(ship[s][:2]) for s in starts):.1f}),"
          f" dl + ul {best_sum:.0f} (shipped {st.median(sum(ship[s][:2]) for s in starts):.0f}),"
          f" dl with ul >= 80 {best_dl:.0f}")
PY
