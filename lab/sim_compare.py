#!/usr/bin/python3
"""Two builds of the packet simulator's suite, start by start (lab/EXPERIMENTS.md Q29).

    lab/sim_compare.py BIN_A BIN_B [--cells CELLS] [--runs N] [--seed S] [-- SIMSUITE ARGS]

Runs `BIN_A CELL N ARGS` and `BIN_B CELL N ARGS` (build/rsfc-simsuite of two commits; ARGS
default to the shipped settings: paced --threshold-ceiling 30 --download-alone-ceiling 80
--next-to-upload-only) and pairs their lines by start offset (traces) or seed. A traced cell
is chaotic: moving its start by one second moves its download by tens of points, so the
medians of nine starts of two builds differ by as much as a change does. Paired, each start
is its own control. Per cell and measure it prints B - A: the mean over the starts with a
bootstrap 95 % interval (resampled starts, fixed seed), and how many starts moved more than
2 points each way; for the p95 under both, the geometric mean of the ratios B / A with its
interval. Exit status 0; the numbers are for the notebook, the verdict for the reader.
"""
from __future__ import annotations

import argparse
import math
import random
import re
import statistics as st
import subprocess
import sys

DEFAULT_CELLS = ("2g,3g,lte,Verizon-EVDO-driving,TMobile-UMTS-driving,Verizon-LTE-short,"
                 "swing:2000:7200:40:4:1000:1049:262")
DEFAULT_ARGS = ["paced", "--threshold-ceiling", "30", "--download-alone-ceiling", "80",
                "--next-to-upload-only"]
LINE = re.compile(r"(?:from|seed)\s+(\d+): dl\s+([\d.]+) % ul\s+([\d.]+) % p95\s+(\d+) ms"
                  r".*alone dl\s+([\d.]+) % p95\s+(\d+) ms")
# Per-start measures from a parsed row (start, dl %, ul %, p95, alone dl %, alone p95):
# min(dl,ul) is the worst transfer's share, the figure issue 16's worst cell is judged on.
MEASURES = (("download %", lambda r: r[1]), ("upload %", lambda r: r[2]),
            ("alone %", lambda r: r[4]), ("min(dl,ul)", lambda r: min(r[1], r[2])))
DRAWS = 2000


def parse(text: str) -> dict[int, tuple[float, ...]]:
    """{start or seed: (start, dl %, ul %, p95 ms, alone dl %, alone p95 ms)} from simsuite's
    per-start lines (its median line is left out)."""
    out = {}
    for line in text.splitlines():
        m = LINE.search(line)
        if m:
            row = tuple(float(x) for x in m.groups())
            out[int(row[0])] = row
    return out


def run(binary: str, cell: str, runs: int, args: list[str]) -> dict[int, tuple[float, ...]]:
    res = subprocess.run([binary, cell, str(runs)] + args, capture_output=True, text=True)
    if res.returncode != 0:
        sys.exit(f"sim_compare: {binary} {cell}: exit {res.returncode}: {res.stderr.strip()}")
    rows = parse(res.stdout)
    if not rows:
        sys.exit(f"sim_compare: {binary} {cell}: no per-start lines in its output")
    return rows


def interval(values: list[float], rng: random.Random, stat) -> tuple[float, float]:
    draws = sorted(stat(rng.choices(values, k=len(values))) for _ in range(DRAWS))
    return draws[int(0.025 * DRAWS)], draws[int(0.975 * DRAWS) - 1]


def compare(a: dict, b: dict, seed: int) -> list[str]:
    keys = sorted(set(a) & set(b))
    if not keys:
        return ["  no common starts"]
    lines = []
    for name, measure in MEASURES:
        d = [measure(b[k]) - measure(a[k]) for k in keys]
        lo, hi = interval(d, random.Random(seed), st.mean)
        lines.append(f"  {name:10s} mean {st.mean(d):+6.1f} [{lo:+6.1f}, {hi:+6.1f}]  "
                     f"up > 2: {sum(x > 2 for x in d):3d}  down > 2: {sum(x < -2 for x in d):3d}")
    logs = [math.log(b[k][3] / a[k][3]) for k in keys if a[k][3] > 0 and b[k][3] > 0]
    if logs:
        lo, hi = interval(logs, random.Random(seed), st.mean)
        lines.append(f"  p95 both   ratio {math.exp(st.mean(logs)):.3f} "
                     f"[{math.exp(lo):.3f}, {math.exp(hi):.3f}]")
    same = sum(a[k] == b[k] for k in keys)
    lines.append(f"  starts {len(keys)}, identical {same}; medians A "
                 + " / ".join(f"{st.median(a[k][i] for k in keys):.1f}" for i in (1, 2, 3, 4))
                 + ", B " + " / ".join(f"{st.median(b[k][i] for k in keys):.1f}"
                                       for i in (1, 2, 3, 4)))
    return lines


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    extra: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1:]
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bin_a")
    ap.add_argument("bin_b")
    ap.add_argument("--cells", default=DEFAULT_CELLS)
    ap.add_argument("--runs", type=int, default=45, help="starts (seeds) per cell")
    ap.add_argument("--seed", type=int, default=1, help="the bootstrap's seed")
    o = ap.parse_args(argv)
    if o.runs < 1:
        ap.error("--runs must be at least 1")
    args = extra or DEFAULT_ARGS
    print(f"B - A, paired by start: A = {o.bin_a}, B = {o.bin_b}; {o.runs} starts; "
          f"args {' '.join(args)}")
    for cell in o.cells.split(","):
        print(cell)
        for line in compare(run(o.bin_a, cell, o.runs, args), run(o.bin_b, cell, o.runs, args),
                            o.seed):
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
