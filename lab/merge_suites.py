#!/usr/bin/python3
"""One suite summary from several: the policies of later suites added to the first's cells.

    lab/merge_suites.py BASE.json [EXTRA.json:POLICY[:LABEL] ...] --out OUT.json [--plot DIR]

BASE.json and each EXTRA.json are `lab/experiments.py suite --json` outputs (docs/lab/suite-*.json).
From each EXTRA the POLICY's per-cell summary is added under LABEL (default "POLICY (commit)",
the first commit the EXTRA lists); a cell the EXTRA did not run keeps the policy out. The
percentages of a summary are of its own unregulated medians: merge only suites whose `off` lines
are the same (an EXTRA seeded from BASE's medians, as docs/RESULTS.md §13 runs are). OUT.json
holds the merged summary (no per-run tests); --plot draws its summary plot (lab/plots.py's
suite figure) into DIR.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def merge(base: dict, extras: list[tuple[dict, str, str | None]]) -> dict:
    out = {k: base[k] for k in ("scenario", "duration_s", "warmup_s", "runs", "cells")}
    out["policies"] = list(base["policies"])
    out["labels"] = dict(base.get("labels") or {p: p for p in base["policies"]})
    out["summary"] = {c: dict(v) for c, v in base["summary"].items()}
    out["commits"] = list(base.get("commits") or [])
    for extra, policy, label in extras:
        if policy not in extra.get("policies", []):
            sys.exit(f"merge_suites: {policy} is not a policy of that suite "
                     f"({', '.join(extra.get('policies', []))})")
        commit = (extra.get("commits") or ["?"])[0][:7]
        key = f"{policy}@{commit}"
        if key in out["policies"]:
            sys.exit(f"merge_suites: {key} twice")
        out["policies"].append(key)
        out["labels"][key] = label or f"{policy} ({commit})"
        out["commits"] += [c for c in extra.get("commits", []) if c not in out["commits"]]
        for cell, per in out["summary"].items():
            s = extra.get("summary", {}).get(cell, {}).get(policy)
            per[key] = s if s else {"dl_pct": None, "ul_pct": None, "load_p95": None}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("base")
    ap.add_argument("extras", nargs="*", metavar="EXTRA.json:POLICY[:LABEL]")
    ap.add_argument("--out", required=True)
    ap.add_argument("--plot", metavar="DIR")
    a = ap.parse_args(argv)
    extras = []
    for e in a.extras:
        path, _, rest = e.partition(":")
        policy, _, label = rest.partition(":")
        if not policy:
            ap.error(f"{e}: EXTRA.json:POLICY[:LABEL]")
        extras.append((json.loads(Path(path).read_text()), policy, label or None))
    out = merge(json.loads(Path(a.base).read_text()), extras)
    Path(a.out).write_text(json.dumps(out, indent=1) + "\n")
    print(a.out)
    if a.plot:
        import plots
        print(plots.plot_suite(out, Path(a.plot))[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
