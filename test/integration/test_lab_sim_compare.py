"""lab/sim_compare.py: two simulator builds paired start by start (lab/EXPERIMENTS.md Q29).
Two stand-in 'builds' (scripts printing rsfc-simsuite's lines) whose numbers are known, so the
paired means, the counts and the p95 ratio can be checked exactly. Nothing is run as root."""

from __future__ import annotations

import subprocess
from pathlib import Path

import sim_compare as sc

LAB = Path(__file__).resolve().parents[2] / "lab"

LINE = ("  {cell} paced from {start:3d}: dl {dl:5.1f} % ul {ul:5.1f} % p95 {p95:6d} ms | alone dl "
        "{alone:5.1f} % p95 {ap95:6d} ms (unregulated  9999 ms) paced 1 / 0")


def fake_build(path: Path, shift_dl: float, p95_factor: float) -> Path:
    """A stand-in simsuite: start k gives dl 50 + k (+ shift_dl), ul 80, p95 1000 (x factor)."""
    rows = []
    for k in range(5):
        rows.append(LINE.format(cell="{cell}", start=10 * k, dl=50 + k + shift_dl, ul=80.0,
                                p95=int(1000 * p95_factor), alone=90.0, ap95=500))
    rows.append("  {cell} paced median: dl 52.0 % ul 80.0 % p95 1000 ms | alone dl 90.0 %")
    body = "\n".join(rows)
    path.write_text("#!/usr/bin/python3\nimport sys\ncell = sys.argv[1]\n"
                    f"print('''{body}'''.replace('{{cell}}', cell))\n")
    path.chmod(0o755)
    return path


def compare(a: Path, b: Path, cells: str, runs: int) -> str:
    """sim_compare.py's output for the two stand-in builds."""
    return subprocess.run(["/usr/bin/python3", str(LAB / "sim_compare.py"), str(a), str(b),
                           "--cells", cells, "--runs", str(runs)],
                          capture_output=True, text=True, check=True).stdout


def test_parse_takes_the_per_start_lines_not_the_median():
    text = "\n".join([
        LINE.format(cell="3g", start=0, dl=96.5, ul=93.5, p95=135, alone=99.8, ap95=88),
        "  3g paced seed   1: dl  97.0 % ul  93.0 % p95    130 ms | alone dl  99.0 % p95     90 ms",
        "3g paced median: dl  96.7 % ul  93.5 % p95    135 ms | alone dl  99.8 % p95     88 ms",
    ])
    rows = sc.parse(text)
    assert sorted(rows) == [0, 1]
    assert rows[0][1:5] == (96.5, 93.5, 135.0, 99.8)
    assert rows[1][1:4] == (97.0, 93.0, 130.0)


def test_paired_differences_and_ratio(tmp_path):
    a = fake_build(tmp_path / "a", 0.0, 1.0)
    b = fake_build(tmp_path / "b", 5.0, 1.2)
    out = compare(a, b, "lte,Verizon-EVDO-driving", 5)
    assert out.count("download % mean   +5.0 [  +5.0,   +5.0]  up > 2:   5  down > 2:   0") == 2
    assert out.count("upload %   mean   +0.0") == 2
    assert out.count("p95 both   ratio 1.200 [1.200, 1.200]") == 2
    assert "starts 5, identical 0" in out


def test_min_of_the_two_shares_per_start(tmp_path):
    # A's download (50 + k %) is under its upload (80 %); B's (80 + k %) is over it: per start
    # the worse share goes from 50 + k to 80, +30 - k, mean +28 (not the download's +30).
    a = fake_build(tmp_path / "a", 0.0, 1.0)
    b = fake_build(tmp_path / "b", 30.0, 1.0)
    out = compare(a, b, "3g", 5)
    assert "download % mean  +30.0" in out
    line = next(x for x in out.splitlines() if x.startswith("  min(dl,ul) mean"))
    assert line.startswith("  min(dl,ul) mean  +28.0 [")
    assert line.endswith("up > 2:   5  down > 2:   0")


def test_a_build_that_prints_nothing_is_an_error(tmp_path):
    empty = tmp_path / "empty"
    empty.write_text("#!/bin/sh\nexit 0\n")
    empty.chmod(0o755)
    res = subprocess.run(["/usr/bin/python3", str(LAB / "sim_compare.py"), str(empty), str(empty),
                          "--cells", "3g"], capture_output=True, text=True)
    assert res.returncode != 0
    assert "no per-start lines" in res.stderr
