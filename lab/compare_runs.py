#!/usr/bin/python3
"""Compare a variant's suite runs with a baseline's, judged against the baseline's own noise.

    lab/compare_runs.py --base 'POLICY=WORKDIR[,WORKDIR...]' --arm 'POLICY=WORKDIR[,...]' \\
        [--arm ...] [--offs docs/lab/suite-f9a00c6.json [--offs ...]] [--aa]

Each WORKDIR is a `lab/experiments.py suite --workdir` (its suite/results.jsonl is read; one
policy's lines are taken from it). Per cell, the medians over the runs of: download % and
upload % under both transfers (of the unregulated download and upload alone, the medians of
`off` in --offs), the phone's RTT p95 under both, and download-alone % (where the runs have
it: a suite run with --arms-only has only the test with both transfers). --offs may be given
more than once (a cell's medians from the first file that ran it); the cells of the workdirs
that none of them ran are listed as not judged.

The rule (lab/EXPERIMENTS.md Q26): an arm is killed on a cell and measure when its runs sit
beyond the baseline's by ranks (a one-sided rank-sum test, exact over every relabelling of the
runs: p <= 0.01; lower %, higher p95) and its median's change is beyond the fixed tolerance of
3 points / 10 %; and over the suite when the median over the cells of the change in
min(download %, upload %) is below -2 points or the median of the p95 ratios is above 1.10.
The smallest p a test can give is 1 / C(n_base + n_arm, n_arm): five runs a side reach 0.004,
four 0.014, three 0.05; with fewer than five a side no cell can be killed, and the output says
so. --aa applies the same rule to the baseline's runs against themselves (random splits) and
prints how often it would kill: what a verdict of the rule is worth on these cells.
"""
import argparse
import itertools
import json
import math
import random
import statistics as st
import sys
from pathlib import Path

from exps.suite import read_lines

MEASURES = ("download %", "upload %", "p95 ms", "alone %")
TOL_POINTS, TOL_RATIO, SUITE_POINTS, SUITE_RATIO, DRAWS = 3.0, 1.10, 2.0, 1.10, 2000
ALPHA, EXACT_MAX = 0.01, 50000  # the test's level; relabellings enumerated up to this
DEFAULT_OFFS = Path(__file__).resolve().parent.parent / "docs" / "lab" / "suite-f9a00c6.json"


def parse_arm(text):
    policy, _, dirs = text.rpartition("=")
    if not policy or not dirs:
        sys.exit(f"compare_runs: '{text}': want POLICY=WORKDIR[,WORKDIR...]")
    return policy, [d for d in dirs.split(",") if d]


def offs(paths):
    """{cell: (download alone, upload alone)}, the medians of `off` in the suite JSON files;
    a cell's from the first file that has both."""
    out = {}
    for path in paths:
        for cell, (dl, ul) in offs_of(path).items():
            out.setdefault(cell, (dl, ul))
    return out


def with_nots_proxy(base, cells):
    """`base` with each timestamp-less cell of `cells` that has no medians of its own given the
    same link's with timestamps (CELL/nots -> CELL): the link and its transfers alone are the
    same; only the phone's TCP options differ. Returns (base, the cells so given)."""
    out, proxied = dict(base), []
    for cell in sorted(cells):
        if cell not in out and cell.endswith("/nots") and cell[:-len("/nots")] in out:
            out[cell] = out[cell[:-len("/nots")]]
            proxied.append(cell)
    return out, proxied


def offs_of(path):
    d = json.load(open(path))
    out = {}
    for cell, t in d["tests"].items():
        off = t.get("off", {})
        dl = [x["dl_mbps"] for x in off.get("dl", []) if x]
        ul = [x["ul_mbps"] for x in off.get("ul", []) if x]
        if dl and ul:
            out[cell] = (st.median(dl), st.median(ul))
    return out


def runs(policy, dirs, base, unjudged=None):
    """{cell: [(dl %, ul %, p95, alone %), ...]}: one tuple per run with a test with both
    transfers; alone % is None for a run without the download alone (--arms-only). Cells with
    such runs but no medians in `base` are added to the set `unjudged` when one is given."""
    by_run = {}
    for w in dirs:
        path = Path(w) / "suite" / "results.jsonl"
        if not path.exists():
            sys.exit(f"compare_runs: no suite/results.jsonl under {w}")
        for j in read_lines(path):  # the suite's reader: a line cut by a crash is skipped
            if j["policy"] != policy or not j.get("numbers"):
                continue
            by_run.setdefault((w, j["cell"], j["run"]), {})[j["kind"]] = j["numbers"]
    out = {}
    for (_, cell, _), r in sorted(by_run.items()):
        if "both" not in r:
            continue
        if cell not in base:
            if unjudged is not None:
                unjudged.add(cell)
            continue
        dl0, ul0 = base[cell]
        alone = r["dl"]["dl_mbps"] / dl0 * 100 if "dl" in r else None
        out.setdefault(cell, []).append((r["both"]["dl_mbps"] / dl0 * 100,
                                         r["both"]["ul_mbps"] / ul0 * 100,
                                         r["both"]["rtt_p95_ms"], alone))
    return out


def med(rows, i):
    """The median of measure i over the runs that have it; None when none has it."""
    vals = [r[i] for r in rows if r[i] is not None]
    return st.median(vals) if vals else None


def has(rows, i):
    """Whether two runs or more have measure i (the download alone: not in --arms-only)."""
    return sum(1 for r in rows if r[i] is not None) >= 2


def change(a, b, i):
    return med(b, i) / med(a, i) if i == 2 else med(b, i) - med(a, i)


def ranks(values):
    """Mid-ranks (ties share the mean of their ranks), 1-based."""
    order = sorted(range(len(values)), key=lambda k: values[k])
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in order[i:j + 1]:
            out[k] = (i + j) / 2 + 1
        i = j + 1
    return out


def rank_p(a, b, rng, worse_is_higher):
    """One-sided p of the arm's runs `b` sitting beyond the base's `a` by ranks: the share of
    relabellings of the pooled runs whose arm rank sum is at least as far out as the real one
    (exact when there are at most EXACT_MAX of them, else DRAWS random ones). Not a median
    change: when both groups are tight and apart, half the relabellings keep a group's median
    where it was, and a test on medians cannot see the clearest change (Q26's blind spot)."""
    pooled = a + b
    if not worse_is_higher:
        pooled = [-x for x in pooled]
    r = ranks(pooled)
    n, k = len(pooled), len(b)
    observed = sum(r[len(a):]) - 1e-9
    if math.comb(n, k) <= EXACT_MAX:
        sums = [sum(r[i] for i in c) for c in itertools.combinations(range(n), k)]
    else:
        sums = [sum(rng.sample(r, k)) for _ in range(DRAWS)]
    return sum(1 for x in sums if x >= observed) / len(sums)


def min_p(na, nb):
    return 1 / math.comb(na + nb, nb)


def judge(a_cells, b_cells, rng):
    """(per-cell lines, kills, suite min change, suite p95 ratio) of b against a."""
    lines, kills, dmins, ratios = [], [], [], []
    for cell in a_cells:
        a, b = a_cells[cell], b_cells.get(cell, [])
        if len(a) < 2 or len(b) < 2:
            if b:
                lines.append(f"  {cell:15s} runs {len(a)}/{len(b)}: too few to judge (2 a side at least)")
            continue
        parts = []
        for i, name in enumerate(MEASURES):
            if not (has(a, i) and has(b, i)):
                continue
            v = change(a, b, i)
            p = rank_p([r[i] for r in a if r[i] is not None],
                       [r[i] for r in b if r[i] is not None], rng, worse_is_higher=i == 2)
            if i == 2:
                bad = p <= ALPHA and v > TOL_RATIO
                parts.append(f"p95 x{v:.2f} p {p:.3f}")
            else:
                bad = p <= ALPHA and v < -TOL_POINTS
                parts.append(f"{name.split()[0]} {v:+.0f} p {p:.3f}")
            if bad:
                kills.append((cell, name))
                parts[-1] += " KILLED"
        if min_p(len(a), len(b)) > ALPHA:
            parts.append(f"cannot kill: {len(a)}/{len(b)} runs give p >= {min_p(len(a), len(b)):.3f}")
        dmins.append(st.median(min(r[0], r[1]) for r in b) - st.median(min(r[0], r[1]) for r in a))
        ratios.append(med(b, 2) / med(a, 2))
        lines.append(f"  {cell:15s} runs {len(a)}/{len(b)}: " + "; ".join(parts))
    return lines, kills, st.median(dmins) if dmins else 0.0, st.median(ratios) if ratios else 1.0


def table(name, cells):
    for cell, rows in cells.items():
        alone = med(rows, 3)
        print(f"  {name:10s} {cell:15s} runs {len(rows):2d}: both {med(rows, 0):.0f} / "
              f"{med(rows, 1):.0f} %, p95 {med(rows, 2):.0f} ms; alone "
              + (f"{alone:.0f} %" if alone is not None else "not run"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", required=True, help="POLICY=WORKDIR[,WORKDIR...]")
    ap.add_argument("--arm", action="append", default=[], help="POLICY=WORKDIR[,...] (repeat)")
    ap.add_argument("--offs", action="append", default=[],
                    help="a suite JSON with `off` alone (repeat; default "
                         "docs/lab/suite-f9a00c6.json)")
    ap.add_argument("--nots-proxy", action="store_true",
                    help="a CELL/nots with no unregulated runs alone in --offs takes CELL's "
                         "(the same link with timestamps); the cells so judged are named")
    ap.add_argument("--aa", action="store_true", help="the rule on the baseline against itself")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    base = offs(args.offs or [DEFAULT_OFFS])
    bpol, bdirs = parse_arm(args.base)
    unjudged = set()
    a = runs(bpol, bdirs, base, unjudged)
    proxied = []
    if args.nots_proxy and unjudged:
        base, proxied = with_nots_proxy(base, unjudged)
        unjudged = set()
        a = runs(bpol, bdirs, base, unjudged)
    if not a:
        why = f" in a cell of --offs (its cells: {', '.join(sorted(unjudged))})" if unjudged else ""
        sys.exit(f"compare_runs: no runs of {bpol} with both kinds in the base workdirs{why}")
    print("medians (download % / upload % under both, p95 under both; download alone %):")
    table("base", a)
    for k, text in enumerate(args.arm):
        pol, dirs = parse_arm(text)
        b = runs(pol, dirs, base, unjudged)
        table(f"arm {k + 1}", b)
        lines, kills, dmin, ratio = judge(a, b, rng)
        print(f"arm {k + 1} ({pol}) against the base:")
        print("\n".join(lines))
        killed = bool(kills) or dmin < -SUITE_POINTS or ratio > SUITE_RATIO
        judged = sum(1 for c in a if len(a[c]) >= 2 and len(b.get(c, [])) >= 2)
        print(f"  suite ({judged} cells judged): median change of min(download, upload) "
              f"{dmin:+.1f} points (kill < -{SUITE_POINTS:.0f}), median p95 ratio {ratio:.2f} "
              f"(kill > {SUITE_RATIO:.2f})")
        verdict = "no verdict: no cell has 2 runs a side" if not judged else \
            "KILLED" if killed else "passes"
        print(f"  verdict: {verdict}")
    if proxied:
        print(f"alone from the same link with timestamps (--nots-proxy): {', '.join(proxied)}")
    if unjudged:
        print(f"not judged (no unregulated runs alone in --offs): {', '.join(sorted(unjudged))}")
    if args.aa:
        trials, killed = 200, 0
        for _ in range(trials):
            half_a, half_b = {}, {}
            for cell, rows in a.items():
                r = rows[:]
                rng.shuffle(r)
                k = max(1, len(r) // 2)
                half_a[cell], half_b[cell] = r[k:], r[:k]
            _, kills, dmin, ratio = judge(half_a, half_b, rng)
            killed += bool(kills) or dmin < -SUITE_POINTS or ratio > SUITE_RATIO
        sides = min((len(r) // 2 for r in a.values() if len(r) >= 4), default=0)
        note = "" if sides and min_p(sides, sides) <= ALPHA else \
            " (by the suite's medians alone: halves this small cannot kill a cell)"
        print(f"the base against itself (random halves, {trials} splits): killed in "
              f"{killed / trials:.0%}{note}")


if __name__ == "__main__":
    main()
