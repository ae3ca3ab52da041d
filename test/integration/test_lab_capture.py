"""A lab test's capture replays as the run (lab/exps/bench.py, `experiments.py --capture`).

One short download on the emulated 3G link with both knobs on (the shipped policies), the
gateway's phone-side traffic kept as capture.pcap (tcpdump -s 128: headers only). Then
rsfc-replay, with the daemon's own config, on that capture: what an operator or a developer
does with a lab run that went wrong. The capture must hold the flow from its handshake
(regulated, not "handshake not in capture"), every record must replay from its headers, and
the downlink knob must decide in the replay about as often as it did live.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from exps.bench import Bench
from shaping import LINKS, linkem_binary
from test_replay import replay_binary


@pytest.mark.timeout(120)
def test_a_captured_lab_test_replays_as_it_ran(prerequisites, tmp_path):
    assert linkem_binary().exists(), f"rsfc-linkem not built at {linkem_binary()}"
    with Bench("capture", LINKS["3g"], "rsfc+rsfc", workdir=tmp_path, capture=True,
               log=lambda m: print(m, flush=True)) as b:
        b.begin(ping_s=8, linger_s=2)
        b.at(0, b.bulk, "dl", "down", 8)
        b.run_schedule()
        res = b.finish()
        workdir = b.workdir
    assert not res["errors"], res["errors"]
    capture = workdir / "capture.pcap"
    assert res["capture"] == str(capture)
    assert capture.stat().st_size > 10_000
    live = [json.loads(line)
            for line in (workdir / "decisions.jsonl").read_text().splitlines()]
    live_down = [r for r in live if r["knob"] == "downlink"]
    assert live_down, "the downlink knob never decided live"

    configs = sorted(workdir.glob("rsfcd-*.yaml"))
    assert configs, f"no daemon config in {workdir}"
    summary, out = tmp_path / "summary.json", tmp_path / "replay.jsonl"
    r = subprocess.run([str(replay_binary()), "--config", str(configs[-1]), "--summary",
                        str(summary), "--out", str(out), str(capture)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    s = json.loads(summary.read_text())
    assert s["complete"] is True
    assert s["flows"]["regulated"] >= 1 and s["flows"]["unregulated"] == 0, s["flows"]
    assert s["headers_cut_records"] == 0
    assert s["header_only_records"] > 0  # -s 128 cut the data segments: lengths from IP
    replayed = [json.loads(line) for line in out.read_text().splitlines()]
    replay_down = [x for x in replayed if x.get("type") == "decision"
                   and x["knob"] == "downlink"]
    print(f"downlink decisions: live {len(live_down)}, replayed {len(replay_down)}")
    assert 0.5 * len(live_down) <= len(replay_down) <= 1.5 * len(live_down)
    assert replay_down[0]["state"] == live_down[0]["state"]
