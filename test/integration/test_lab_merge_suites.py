"""lab/merge_suites.py, which adds a later suite's policy to an earlier suite's summary (the
README's plot): on the two suites docs/lab keeps. Nothing is run as root."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import merge_suites as ms

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "docs" / "lab" / "suite-f9a00c6.json"
EXTRA = ROOT / "docs" / "lab" / "suite-150aa18.json"


def test_the_later_policy_joins_every_cell_it_ran():
    base, extra = json.loads(BASE.read_text()), json.loads(EXTRA.read_text())
    out = ms.merge(base, [(extra, "shipped", None)])
    assert out["policies"] == base["policies"] + ["shipped@150aa18"]
    assert out["labels"]["shipped@150aa18"] == "shipped (150aa18)"
    for cell in base["summary"]:
        assert out["summary"][cell]["shipped@150aa18"] == extra["summary"][cell]["shipped"]
        for p in base["policies"]:  # the earlier suite's numbers are untouched
            assert out["summary"][cell][p] == base["summary"][cell][p]
    assert extra["commits"][0] in out["commits"]


def test_a_cell_the_later_suite_did_not_run_has_no_marker():
    base, extra = json.loads(BASE.read_text()), json.loads(EXTRA.read_text())
    del extra["summary"]["2g"]
    out = ms.merge(base, [(extra, "shipped", "new")])
    assert out["summary"]["2g"]["shipped@150aa18"]["dl_pct"] is None
    assert out["labels"]["shipped@150aa18"] == "new"


def test_the_command_plots_and_refuses_a_policy_the_suite_lacks(tmp_path):
    script = str(ROOT / "lab" / "merge_suites.py")
    r = subprocess.run(["/usr/bin/python3", script, str(BASE), f"{EXTRA}:shipped",
                        "--out", str(tmp_path / "m.json"), "--plot", str(tmp_path)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "suite-summary.png").stat().st_size > 1000
    assert "shipped@150aa18" in json.loads((tmp_path / "m.json").read_text())["policies"]
    r = subprocess.run(["/usr/bin/python3", script, str(BASE), f"{EXTRA}:drwa",
                        "--out", str(tmp_path / "n.json")], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode != 0 and "drwa is not a policy of that suite" in r.stderr
