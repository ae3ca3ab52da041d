#!/usr/bin/python3
"""Lab experiments beyond the bulk table of lab/scenarios.py: capacity traces, web page loads
under an upload, fairness, changing conditions and mixed phone stacks. Each compares `off`,
the best `static` clamp (several sizes run, the best picked by the rule the scenario states)
and `rsfc` in one run, prints a table and writes JSON (and plots) into lab/out/.

    sudo /usr/bin/python3 lab/experiments.py trace       # ~9 min
    sudo /usr/bin/python3 lab/experiments.py web         # ~9 min
    sudo /usr/bin/python3 lab/experiments.py fairness    # ~8 min
    sudo /usr/bin/python3 lab/experiments.py changes     # ~10 min
    sudo /usr/bin/python3 lab/experiments.py stacks      # ~10 min
    sudo /usr/bin/python3 lab/experiments.py uploads     # ~9 min
    sudo /usr/bin/python3 lab/experiments.py suite       # hours (estimate printed); --resume
    sudo /usr/bin/python3 lab/experiments.py SCENARIO --duration 120   # longer tests
    /usr/bin/python3 lab/experiments.py --show lab/out/trace-....json  # table of a saved run

This file is the command line; each experiment is a module of lab/exps/ (trace.py, web.py,
fairness.py, changes.py, stacks.py, uploads.py, suite.py) on the shared test bench
lab/exps/bench.py:
lab/topo.py's namespaces (phone ── bs ── gw ── srv, rsfcd on gw) with the link of
lab/shaping.py, the rsfcd configs of lab/policies.py and lab/traffic.py's flows and pings
(real kernel TCP; throughput from the sender's tcp_info `delivered` count, SACK-aware, so
that phases and windows of a test are exact; lab/measure.py). Every test runs on a fresh
topology. rsfcd writes its decision log (the top-level `decision_log` key) for the rsfc
policies; the JSON keeps it with every sample.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import topo as topo_mod  # noqa: E402
from exps import changes, fairness, stacks, suite, trace, uploads, web  # noqa: E402
import policies as policies_mod  # noqa: E402
from policies import check_policy  # noqa: E402
from shaping import linkem_binary  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
OUT_DIR = REPO / "lab" / "out"
EXPERIMENTS = {"trace": trace, "web": web, "fairness": fairness, "changes": changes,
               "stacks": stacks, "uploads": uploads, "suite": suite}


def format_any(out: dict) -> str:
    """The table of a run's JSON, by the experiment that wrote it."""
    return EXPERIMENTS[out["scenario"]].report(out)


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    ap.add_argument("scenario", nargs="?", choices=sorted(EXPERIMENTS))
    ap.add_argument("--duration", type=float, help="seconds per test (default per scenario)")
    ap.add_argument("--warmup", type=float, help="seconds skipped at the start of each test")
    ap.add_argument("--statics", help="static clamp sizes to try, bytes, comma-separated")
    ap.add_argument("--extra-policies",
                    help="more policies after rsfc, comma-separated (lab/policies.py: "
                         "rsfc+drwa, rsfc[key=value;...], observe)")
    ap.add_argument("--traces", help=f"trace: names (default {','.join(trace.TRACE_NAMES)})")
    ap.add_argument("--trace-offset", type=float,
                    help="trace: start the traces this many seconds in (default: the "
                         "representative window, see representative_offset)")
    ap.add_argument("--cells", help="suite: cells, comma-separated (names such as 3g, 2g, "
                    "umts@80s; a trace's prefix umts, evdo, lte-short; constant, traces; "
                    "default all; a constant link of one's own, "
                    "link:UP_KBPS:DOWN_KBPS:RTT_MS[:UP_KB:DOWN_KB], as rsfc-simsuite's; "
                    "one whose downlink swings between its rate and rate / FACTOR, "
                    "swing:UP_KBPS:DOWN_KBPS:RTT_MS:FACTOR:PERIOD_MS[:UP_KB:DOWN_KB], as "
                    "rsfc-simsuite's --down-swing; any cell followed by /nots is the same "
                    "link with a phone that sends no TCP timestamps, e.g. umts@80s/nots)")
    ap.add_argument("--policies", help="suite: the policies instead of the default list (off "
                    "is always run: it is the baseline, but with --arms-only), comma-separated")
    ap.add_argument("--runs", type=int, default=3, help="suite: runs per cell (default 3)")
    ap.add_argument("--upload-lead", type=float, default=0.0, metavar="S",
                    help="suite: in the test with both transfers the upload starts S seconds "
                         "before the download (which ends with it); the lines record it")
    ap.add_argument("--arms-only", action="store_true",
                    help="suite: each policy runs only its test with both transfers, and off "
                         "runs nothing: arms compared by lab/compare_runs.py, which takes the "
                         "percentages' baselines from a whole suite's JSON (--offs)")
    ap.add_argument("--build", action="append", default=[], metavar="NAME=DIR",
                    help="another build's directory, for the policies POLICY@NAME (e.g. "
                         "--build variant=../q/build --policies shipped,shipped@variant: both "
                         "builds side by side, test by test); repeatable; RSFC_BUILDS too")
    ap.add_argument("--resume", action="store_true",
                    help="suite: skip the tests already in WORKDIR/suite/results.jsonl")
    ap.add_argument("--dry-run", action="store_true",
                    help="suite: print the tests and the estimated time, run nothing")
    ap.add_argument("--json", help="output file (default lab/out/<scenario>-<time>.json)")
    ap.add_argument("--workdir", default="/tmp/rsfc-lab4", help="logs, configs, decision logs")
    ap.add_argument("--no-plots", action="store_true", help="skip lab/plots.py")
    ap.add_argument("--capture", action="store_true",
                    help="keep each test's gateway traffic (phone side, tcpdump -s 128) as "
                         "capture.pcap in its workdir, for build/rsfc-replay")
    ap.add_argument("--show", metavar="JSON", help="print the table of a saved run (suite: "
                    "also its results.jsonl, while it runs or after it stopped; with --json "
                    "the summary of that results.jsonl is written there and plotted)")
    ap.add_argument("--recompute", action="store_true",
                    help="with --show: derive the summary from the saved samples again "
                         "(fairness, uploads)")
    return ap


def _show(ap: argparse.ArgumentParser, a) -> int:
    if a.show.endswith(".jsonl"):
        out = suite.from_jsonl(Path(a.show))
        print(suite.report(out))
        if a.json:
            Path(a.json).write_text(json.dumps(out, indent=1) + "\n")
            if not a.no_plots:
                import plots
                for f in plots.plot_run(Path(a.json), Path(a.json).parent / "plots"):
                    print(f)
        return 0
    out = json.loads(Path(a.show).read_text())
    if a.recompute:
        summarize = getattr(EXPERIMENTS[out["scenario"]], "summarize", None)
        if summarize is None:
            ap.error(f"--recompute: not for {out['scenario']}")
        summarize(out)
    print(format_any(out))
    return 0


def main(argv=None) -> int:
    ap = _parser()
    a = ap.parse_args(argv)
    if a.show:
        return _show(ap, a)
    if not a.scenario:
        ap.error("a scenario is needed (or --show)")
    if a.capture:
        os.environ["RSFC_LAB_CAPTURE"] = "1"  # every Bench of this run (exps/bench.py)
    for spec in a.build:
        try:
            for name, path in policies_mod.parse_builds(spec).items():
                if name in policies_mod.BUILDS:
                    raise ValueError(f"build {name!r} given twice")
                policies_mod.BUILDS[name] = path
        except ValueError as e:
            ap.error(str(e))
    a.statics = [int(x) for x in a.statics.split(",")] if a.statics else None
    a.extra_policies = [p.strip() for p in (a.extra_policies or "").split(",") if p.strip()]
    checked = list(a.extra_policies)
    if a.scenario == "suite":
        if a.runs < 1:
            ap.error("--runs must be at least 1")
        warmup = a.warmup or suite.DEFAULT_WARMUP_S
        if not 0 <= a.upload_lead < warmup:
            ap.error(f"--upload-lead must be at least 0 and less than the warm-up ({warmup:g} s)"
                     ": the measured window needs both transfers")
        checked = suite.suite_policies(a)
        try:
            suite.select_cells(a.cells, a.duration or suite.DEFAULT_DURATION_S,
                               a.warmup or suite.DEFAULT_WARMUP_S)
        except ValueError as e:
            ap.error(str(e))
    for p in checked:
        try:
            check_policy(p)  # reject a bad policy before running anything
        except ValueError as e:
            ap.error(str(e))
    if a.dry_run:
        if a.scenario != "suite":
            ap.error("--dry-run: suite only")
        print(suite.make_plan(a).text())
        return 0
    if a.duration and a.warmup and a.warmup >= a.duration:
        ap.error("--warmup must be shorter than --duration")
    topo_mod.require_root_and_tools(("ip", "iptables-legacy", "ip6tables-legacy", "sysctl", "tc",
                                     "ss"))
    for b in (topo_mod.rsfcd_binary(), linkem_binary()):
        if not b.exists():
            raise SystemExit(f"missing {b} (build targets rsfcd and rsfc-linkem; "
                             f"RSFC_BUILD_DIR picks the build directory)")
    if a.scenario == "stacks":
        topo_mod.ensure_host_cc_allowed("bbr")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    a.git = git_state()
    out_path = Path(a.json) if a.json else OUT_DIR / f"{a.scenario}-{stamp}.json"
    out_path.parent.mkdir(parents=True, exist_ok=True)
    log = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    t_start = time.monotonic()
    experiment = EXPERIMENTS[a.scenario]
    out = experiment.run(a, log)
    out["meta"] = {"time": stamp, "kernel": os.uname().release, "wall_s": round(
        time.monotonic() - t_start), "rsfcd": str(topo_mod.rsfcd_binary()),
        "builds": {k: str(v / "rsfcd") for k, v in policies_mod.BUILDS.items()},
        "git": a.git["describe"], "commit": a.git["commit"], "dirty": a.git["dirty"],
        "command": command_line(), "cwd": os.getcwd()}
    out_path.write_text(json.dumps(out))
    print(experiment.report(out))
    print(f"(JSON: {out_path}; {out['meta']['wall_s']} s)")
    if not a.no_plots:
        try:
            import plots  # matplotlib: optional
            for p in plots.plot_run(out_path):
                print(f"(plot: {p})")
        except ImportError as e:
            print(f"(no plots: {e})")
    errors = [e for e in _all_errors(out)]
    return 1 if errors else 0


def git_state() -> dict:
    """The tree the run measures: HEAD's commit, `git describe`, and whether tracked files
    differ from it."""
    def git(*args) -> str:
        return subprocess.run(["git", "-c", "safe.directory=*", "-C", str(REPO), *args],
                              capture_output=True, text=True).stdout.strip()
    return {"commit": git("rev-parse", "HEAD"), "describe": git("describe", "--always", "--dirty"),
            "dirty": bool(git("status", "--porcelain", "--untracked-files=no"))}


def command_line() -> str:
    """The command that ran, as one shell line (with RSFC_BUILD_DIR / RSFC_BUILDS /
    RSFC_TRACES_DIR)."""
    env = [f"{k}={shlex.quote(os.environ[k])}"
           for k in ("RSFC_BUILD_DIR", "RSFC_BUILDS", "RSFC_TRACES_DIR") if k in os.environ]
    return " ".join(env + [shlex.quote(sys.executable)] + [shlex.quote(x) for x in sys.argv])


def _all_errors(obj):
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k == "errors" and isinstance(v, list):
                yield from v
            elif k != "tests":
                yield from _all_errors(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _all_errors(v)


if __name__ == "__main__":
    sys.exit(main())
