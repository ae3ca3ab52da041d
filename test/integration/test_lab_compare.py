"""lab/compare_runs.py, the rule that judges a variant's suite runs against a baseline's
(lab/EXPERIMENTS.md Q26): its rank test, and the verdict it prints for workdirs written as
`lab/experiments.py suite` writes them. Nothing is run as root."""

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path

import compare_runs as cr

LAB = Path(__file__).resolve().parents[2] / "lab"


def test_mid_ranks_share_ties():
    assert cr.ranks([10, 30, 20]) == [1, 3, 2]
    assert cr.ranks([5, 5, 1, 7]) == [2.5, 2.5, 1, 4]


def test_tight_groups_apart_are_seen():
    # Q26's blind spot: five runs of five at 69 % against five at 98 %. Half the relabellings
    # keep a median where it was, so a test on medians could not kill this; by ranks it is the
    # one relabelling in 252 that is this far out.
    base = [98.0, 97.6, 98.2, 97.9, 98.1]
    arm = [69.1, 68.7, 69.0, 69.2, 68.9]
    rng = random.Random(1)
    assert cr.rank_p(base, arm, rng, worse_is_higher=False) == 1 / 252
    # The other way round nothing is worse: the arm is better.
    assert cr.rank_p(arm, base, rng, worse_is_higher=False) == 1.0
    # p95: higher is worse.
    assert cr.rank_p([300.0] * 5, [310.0, 320, 330, 340, 350], rng, worse_is_higher=True) == 1 / 252


def test_overlapping_groups_are_not_killed_by_the_test():
    rng = random.Random(1)
    base = [50.0, 60, 70, 80, 90]
    arm = [55.0, 65, 75, 85, 45]
    assert cr.rank_p(base, arm, rng, worse_is_higher=False) > 0.2


def test_three_runs_a_side_cannot_reach_the_level():
    assert cr.min_p(3, 3) == 1 / 20 > cr.ALPHA
    assert cr.min_p(5, 5) < cr.ALPHA


def test_many_runs_are_sampled_not_enumerated():
    rng = random.Random(1)
    base = [float(x) for x in range(100, 120)]
    arm = [float(x) for x in range(0, 20)]
    assert cr.rank_p(base, arm, rng, worse_is_higher=False) == 0.0  # none of 2000 draws as far


def _workdir(path: Path, policy: str, alone: list[float], p95: float = 300.0,
             arms_only: bool = False) -> None:
    """A suite workdir with one 'both' and one 'dl' line per run for cell 3g (no 'dl' line:
    a suite run with --arms-only)."""
    (path / "suite").mkdir(parents=True)
    with open(path / "suite" / "results.jsonl", "w") as f:
        for run, dl in enumerate(alone, 1):
            both = {"dl_mbps": 6.0, "ul_mbps": 1.8, "rtt_p95_ms": p95 + run}
            tests = (("both", both),) if arms_only else (("both", both), ("dl", {"dl_mbps": dl}))
            for kind, numbers in tests:
                f.write(json.dumps({"cell": "3g", "run": run, "policy": policy, "kind": kind,
                                    "numbers": numbers}) + "\n")


def _compare(tmp_path: Path, base_alone: list[float], arm_alone: list[float]) -> str:
    offs = tmp_path / "offs.json"
    offs.write_text(json.dumps({"tests": {"3g": {"off": {"dl": [{"dl_mbps": 7.0}],
                                                        "ul": [{"ul_mbps": 2.0}]}}}}))
    _workdir(tmp_path / "base", "rsfc+rsfc", base_alone)
    _workdir(tmp_path / "arm", "x", arm_alone)
    out = subprocess.run(["/usr/bin/python3", str(LAB / "compare_runs.py"), "--offs", str(offs),
                          "--base", f"rsfc+rsfc={tmp_path / 'base'}",
                          "--arm", f"x={tmp_path / 'arm'}"],
                         capture_output=True, text=True, check=True)
    return out.stdout


def test_a_download_alone_lost_in_every_run_is_killed(tmp_path):
    out = _compare(tmp_path, [6.9, 6.88, 6.91, 6.87, 6.9], [4.8, 4.85, 4.82, 4.79, 4.81])
    assert "alone -30 p 0.004 KILLED" in out
    assert "verdict: KILLED" in out


def test_the_same_runs_pass(tmp_path):
    runs = [6.9, 6.88, 6.91, 6.87, 6.9]
    out = _compare(tmp_path, runs, runs)
    assert "KILLED" not in out
    assert "verdict: passes" in out


def test_three_runs_a_side_say_they_cannot_kill(tmp_path):
    out = _compare(tmp_path, [6.9, 6.88, 6.91], [4.8, 4.85, 4.82])
    assert "cannot kill: 3/3 runs give p >= 0.050" in out
    assert "alone -30 p 0.050;" in out


def test_arms_without_the_download_alone_are_judged_on_the_rest(tmp_path):
    """Runs of a suite with --arms-only have no download-alone test: the table says so and the
    arms are judged on the three other measures (here the p95, 50 % up in every run)."""
    offs = tmp_path / "offs.json"
    offs.write_text(json.dumps({"tests": {"3g": {"off": {"dl": [{"dl_mbps": 7.0}],
                                                        "ul": [{"ul_mbps": 2.0}]}}}}))
    _workdir(tmp_path / "base", "shipped", [0.0] * 5, arms_only=True)
    _workdir(tmp_path / "arm", "shipped[rsfc.fast_target=1]", [0.0] * 5, p95=450.0,
             arms_only=True)
    out = subprocess.run(["/usr/bin/python3", str(LAB / "compare_runs.py"), "--offs", str(offs),
                          "--base", f"shipped={tmp_path / 'base'}",
                          "--arm", f"shipped[rsfc.fast_target=1]={tmp_path / 'arm'}"],
                         capture_output=True, text=True, check=True).stdout
    assert "both 86 / 90 %, p95 303 ms; alone not run" in out
    assert "p95 x1.50 p 0.004 KILLED" in out
    assert "alone" not in out.split("against the base:")[1].split("suite (")[0]
    assert "verdict: KILLED" in out


def test_offs_from_several_files_and_cells_in_none_are_named(tmp_path):
    """A suite of cells whose unregulated runs alone sit in two baseline files: each cell takes
    its medians from the first file that ran it, and a cell in neither is named, not dropped
    without a word (it used to vanish from the table)."""
    first, second = tmp_path / "first.json", tmp_path / "second.json"
    first.write_text(json.dumps({"tests": {"3g": {"off": {"dl": [{"dl_mbps": 7.0}],
                                                         "ul": [{"ul_mbps": 2.0}]}}}}))
    second.write_text(json.dumps({"tests": {
        "3g": {"off": {"dl": [{"dl_mbps": 60.0}], "ul": [{"ul_mbps": 60.0}]}},
        "lte": {"off": {"dl": [{"dl_mbps": 12.0}], "ul": [{"ul_mbps": 3.6}]}}}}))
    for name in ("base", "arm"):
        (tmp_path / name / "suite").mkdir(parents=True)
        with open(tmp_path / name / "suite" / "results.jsonl", "w") as f:
            for cell in ("3g", "lte", "2g"):
                for run in (1, 2, 3):
                    f.write(json.dumps({"cell": cell, "run": run, "policy": "shipped",
                                        "kind": "both", "numbers": {
                                            "dl_mbps": 6.0, "ul_mbps": 1.8,
                                            "rtt_p95_ms": 300.0 + run}}) + "\n")
    out = subprocess.run(["/usr/bin/python3", str(LAB / "compare_runs.py"),
                          "--offs", str(first), "--offs", str(second),
                          "--base", f"shipped={tmp_path / 'base'}",
                          "--arm", f"shipped={tmp_path / 'arm'}"],
                         capture_output=True, text=True, check=True).stdout
    assert "3g              runs  3: both 86 / 90 %" in out  # the first file's 7.0 / 2.0
    assert "lte             runs  3: both 50 / 50 %" in out  # only the second has it
    assert "suite (2 cells judged)" in out
    assert "not judged (no unregulated runs alone in --offs): 2g" in out


def test_nots_proxy_takes_the_same_links_runs_with_timestamps(tmp_path):
    """--nots-proxy: a timestamp-less cell no baseline file ran is judged on the same link's
    unregulated runs alone with timestamps, and named; without the flag it is not judged; a
    /nots cell whose link no file ran stays unjudged either way."""
    offs = tmp_path / "offs.json"
    offs.write_text(json.dumps({"tests": {"lte": {"off": {"dl": [{"dl_mbps": 12.0}],
                                                          "ul": [{"ul_mbps": 3.6}]}}}}))
    for name in ("base", "arm"):
        (tmp_path / name / "suite").mkdir(parents=True)
        with open(tmp_path / name / "suite" / "results.jsonl", "w") as f:
            for cell in ("lte/nots", "umts@0s/nots"):
                for run in (1, 2, 3):
                    f.write(json.dumps({"cell": cell, "run": run, "policy": "shipped",
                                        "kind": "both", "numbers": {
                                            "dl_mbps": 6.0, "ul_mbps": 1.8,
                                            "rtt_p95_ms": 300.0 + run}}) + "\n")

    def compare(*extra):
        return subprocess.run(["/usr/bin/python3", str(LAB / "compare_runs.py"),
                               "--offs", str(offs), *extra,
                               "--base", f"shipped={tmp_path / 'base'}",
                               "--arm", f"shipped={tmp_path / 'arm'}"],
                              capture_output=True, text=True)

    plain = compare()
    assert plain.returncode != 0 and "no runs of shipped" in plain.stderr
    out = compare("--nots-proxy")
    assert out.returncode == 0, out.stderr
    assert "lte/nots        runs  3: both 50 / 50 %" in out.stdout  # lte's 12.0 / 3.6
    assert "alone from the same link with timestamps (--nots-proxy): lte/nots" in out.stdout
    assert "not judged (no unregulated runs alone in --offs): umts@0s/nots" in out.stdout
