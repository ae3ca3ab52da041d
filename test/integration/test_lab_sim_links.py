"""rsfc-simsuite's own constant links (`link:UP_KBPS:DOWN_KBPS:RTT_MS[:UP_KB:DOWN_KB]`), the
cell lab/EXPERIMENTS.md Q32 sweeps links the suite never ran with. A link spelled out with the
3g cell's values must read as the 3g cell; a spec it cannot take is refused, not guessed.
Nothing is run as root; the simulator is the build's (RSFC_BUILD_DIR or repo/build, as
lab/topo.py finds rsfcd): a missing one fails, as a missing rsfcd does."""

from __future__ import annotations

import re
import subprocess

import pytest
import topo

SIMSUITE = topo.rsfcd_binary().parent / "rsfc-simsuite"
SHIPPED = ["paced", "--threshold-ceiling", "30", "--download-alone-ceiling", "80",
           "--next-to-upload-only"]
MEDIAN = re.compile(r"median: dl\s+([\d.]+) % ul\s+([\d.]+) % p95\s+(\d+) ms"
                    r" \| alone dl\s+([\d.]+) % p95\s+(\d+) ms")


def simsuite(cell: str, *extra: str, check: bool = True,
             runs: int = 1) -> subprocess.CompletedProcess:
    """RUNS starts of CELL under the shipped configuration, with EXTRA options."""
    return subprocess.run([str(SIMSUITE), cell, str(runs), *SHIPPED, *extra],
                          capture_output=True, text=True, check=check, timeout=300)


def medians(cell: str) -> tuple[float, ...]:
    out = simsuite(cell).stdout
    m = MEDIAN.search(out)
    assert m, out
    return tuple(float(x) for x in m.groups())


def test_the_3g_cell_spelled_out_reads_as_the_3g_cell():
    # 3g: 2 Mbit/s up with 1 MB of buffer, 7.2 Mbit/s down with 256 KB, 40 ms base round trip
    # (the spelled-out link splits it 30 / 10 ms between the phone's and the server's side,
    # the cell 20 / 20).
    own = medians("link:2000:7200:40:1000:256")
    cell = medians("3g")
    for mine, theirs in zip(own[:2] + own[3:4], cell[:2] + cell[3:4]):  # percentages
        assert abs(mine - theirs) <= 1.5, (own, cell)
    assert abs(own[2] - cell[2]) <= 10, (own, cell)  # p95 under both, ms
    assert own[0] > 90 and own[1] > 90  # what the 3g cell reads: the targets met


@pytest.mark.parametrize("spec", ["link:0:7200:40", "link:2000:7200", "link:2000:7200:40:1000",
                                  "link:a:7200:40", "link:2000:7200:10", "link:2000:7200:40:",
                                  "link:2000:inf:40", "link:-5:7200:40"])
def test_a_link_it_cannot_take_is_refused(spec):
    res = simsuite(spec, check=False)
    assert res.returncode == 2
    assert "bad link" in res.stderr
    assert res.stdout == ""


SWING = "swing:2000:7200:40:4:1000:1049:262"


def run_swing(*extra: str) -> str:
    # At Q43's settings: the steady ceiling (Q52) off. With it on, the 0.5 s horizon still gains
    # the upload 8 points here, but its p95 reads 349 against 387 ms (x0.90), not 303 against 382.
    return simsuite(SWING, "--steady-ceiling", "0", *extra).stdout


def test_the_pacing_horizon_is_the_pacers_window_and_three_seconds_by_default():
    # --pacing-horizon is pacing.horizon_s (lab/EXPERIMENTS.md Q43): 3 s, the default, reads as
    # no option at all; 0.5 s keeps the download's excess at the gateway when the swing cell's
    # downlink slows, so the upload's ACKs pass it: the upload gains, the phone's p95 falls.
    default = run_swing()
    assert run_swing("--pacing-horizon", "3") == default
    short = MEDIAN.search(run_swing("--pacing-horizon", "0.5"))
    base = MEDIAN.search(default)
    assert short and base, default
    assert float(short.group(2)) > float(base.group(2)) + 5  # upload %
    assert int(short.group(3)) < 0.9 * int(base.group(3))  # p95 under both


@pytest.mark.parametrize("value", ["0.05", "61", "0", "-1", "x", "0.5:1", "inf"])
def test_a_pacing_horizon_it_cannot_take_is_refused(value):
    res = simsuite("3g", "--pacing-horizon", value, check=False)
    assert res.returncode == 2
    assert "--pacing-horizon" in res.stderr  # the usage
    assert res.stdout == ""


SEED_LINE = re.compile(r"seed\s+\d+: dl\s+([\d.]+) % ul\s+([\d.]+) % p95\s+(\d+) ms")


def seeds(cell: str, n: int, *extra: str) -> list[tuple[str, ...]]:
    """Each seed's download %, upload % and p95 under both, of N seeds of CELL."""
    out = simsuite(cell, *extra, runs=n).stdout
    rows = [m.groups() for m in SEED_LINE.finditer(out)]
    assert len(rows) == n, out
    return rows


def test_seeds_of_a_constant_cell_without_timestamps_are_different_runs():
    # A seed moves the phone's and the server's timestamp clocks; without timestamps it also
    # starts the download 37 ms per seed later, or lab/sim_compare.py's "45 starts" of such a
    # cell would be one run 45 times (Q54). Seed 0 is the run it always was.
    rows = seeds("3g", 4, "--no-timestamps")
    assert len(set(rows)) >= 3, rows
    assert rows[0] == seeds("3g", 1, "--no-timestamps")[0]
