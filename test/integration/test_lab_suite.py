"""The suite of lab/exps/suite.py (`lab/experiments.py suite`) without running a lab: its
cells' links, its policies (rsfcd --check-config accepts each), its score and table on
made-up results, and its resumable run (the lab test replaced by a fake one: nothing here
needs the network; the --check-config cases need the daemon, as test_lab_policies.py's)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from exps import suite
from policies import MACHINE_KEYS, SHIPPED_CONFIG, check_policy, policy_config
from shaping import LINKS, TraceFile, trace_path
from topo import DEFAULT_CONFIG, deep_merge, to_yaml

LAB = Path(__file__).resolve().parents[2] / "lab"
D, W = suite.DEFAULT_DURATION_S, suite.DEFAULT_WARMUP_S


# ---- the cells ---------------------------------------------------------------------------
def test_the_suite_has_its_cells():
    names = [c.name for c in suite.all_cells(D, W)]
    assert names[:4] == ["3g", "lte", "3g-nots", "2g"]
    for short in suite.TRACES:
        assert len([n for n in names if n.startswith(short + "@")]) >= 3, names
    assert len(set(names)) == len(names)


def test_the_2g_link():
    link = LINKS["2g"]
    for d in (link.up, link.down):
        assert d.rate_bps == 100_000 and d.delay_ms == 100 and d.trace is None
        assert d.buffer_s() >= 10.0  # 10 s of queue each way
    assert link.base_rtt_ms == 200
    assert link.up.rate_bps / 8 * link.base_rtt_ms / 1000 < 2 * 1448  # BDP under 2 segments


@pytest.mark.parametrize("cell", suite.all_cells(D, W), ids=lambda c: c.name)
def test_every_cells_link_is_well_formed(cell, tmp_path):
    link = cell.link(tmp_path)
    assert link.base_rtt_ms > 0 and link.up.delay_ms == link.down.delay_ms
    assert 5 <= cell.linger_s() <= 25
    assert cell.timestamps == (cell.name != "3g-nots")
    for d, direction in ((link.up, "up"), (link.down, "down")):
        assert d.buffer_bytes > 0 and d.buffer_s(cell.mean_rates_bps()[0 if direction == "up"
                                                                       else 1]) > 0.1
        if cell.kind == "trace":
            assert cell.engine == "linkem" and d.rate_bps == 0
            played = TraceFile.load(Path(d.trace))
            whole = TraceFile.load(trace_path(cell.trace, direction))
            assert played.offsets == whole.rotated(cell.offset_ms).offsets
            assert len(played.offsets) == len(whole.offsets)
            assert f"trace={d.trace}" in d.linkem_arg(10, True)
            # the measured window lies inside the trace, before it repeats
            assert 0 <= cell.offset_ms <= whole.period_ms - D * 1000
            assert played.mbps(W * 1000, D * 1000) > 0
        else:
            assert cell.engine == "tbf" and d.trace is None and d.rate_bps > 0
            assert link is LINKS[cell.link_name]
    json.dumps(cell.describe())


def test_trace_offsets_follow_the_stated_rule():
    for name in suite.TRACES.values():
        up, down = TraceFile.load(trace_path(name, "up")), TraceFile.load(trace_path(name, "down"))
        picked = suite.trace_offsets(up, down, D, W)
        assert [w for w, _ in picked] == ["mean", "poor", "rich"]
        offs = [x for _, x in picked]
        assert offs[0] == suite.representative_offset(up, down, D, W)
        assert all(x % suite.OFFSET_STEP_MS == 0 for x in offs)
        # windows do not overlap (the traces are long enough for that at the default window)
        assert all(abs(a - b) >= (D - W) * 1000 for i, a in enumerate(offs) for b in offs[i + 1:])
        assert suite.trace_offsets(up, down, D, W) == picked  # deterministic

        def poorer(x):
            a, b = x + W * 1000, x + D * 1000
            return min(up.mbps(a, b) / up.mean_mbps(), down.mbps(a, b) / down.mean_mbps())
        assert poorer(offs[1]) < poorer(offs[2])


def test_cells_are_selected_by_name_prefix_and_group():
    sel = lambda s: [c.name for c in suite.select_cells(s, D, W)]  # noqa: E731
    assert sel("3g,2g") == ["3g", "2g"]
    assert len(sel("umts")) == 3 and all(n.startswith("umts@") for n in sel("umts"))
    assert sel("constant") == ["3g", "lte", "3g-nots", "2g"]
    assert len(sel("traces")) == 9 and len(sel(None)) == 13 and len(sel("all,3g")) == 13
    with pytest.raises(ValueError, match="unknown cell"):
        suite.select_cells("3g,4g", D, W)


def test_any_cell_can_be_run_with_a_phone_without_timestamps():
    sel = lambda s: [(c.name, c.timestamps) for c in suite.select_cells(s, D, W)]  # noqa: E731
    umts = sel("umts")[0][0]  # its first window (the offsets follow the test's duration)
    assert sel(f"{umts}/nots,link:500:2000:100/nots,3g") == [
        (f"{umts}/nots", False), ("link:500:2000:100/nots", False), ("3g", True)]
    assert [n for n, ts in sel("umts/nots")] == [n + "/nots" for n, _ in sel("umts")]
    # the same link as the cell with timestamps, and told apart from it in the results
    [a, b] = suite.select_cells("link:500:2000:100,link:500:2000:100/nots", D, W)
    assert a.spec() == b.spec() and a.name != b.name and a.describe()["timestamps"]
    assert not b.describe()["timestamps"]
    with pytest.raises(ValueError, match="unknown cell"):
        suite.select_cells("4g/nots", D, W)


def test_a_link_of_ones_own_is_a_constant_cell():
    # as rsfc-simsuite reads it: kbit/s, base RTT ms split evenly, buffers 4 s of the rate
    # (at least 125 KB) unless given in KB
    [c] = suite.select_cells("link:500:2000:100", D, W)
    link = c.spec()
    assert (c.name, c.kind, c.engine, c.timestamps) == ("link:500:2000:100", "constant", "tbf",
                                                        True)
    assert (link.up.rate_bps, link.down.rate_bps) == (500_000, 2_000_000)
    assert (link.up.buffer_bytes, link.down.buffer_bytes) == (250_000, 1_000_000)
    assert (link.up.delay_ms, link.down.delay_ms, link.base_rtt_ms) == (50, 50, 100)
    assert suite.link_cell("link:64:64:300").spec().up.buffer_bytes == 125_000
    # 2g spelled out is the 2g link
    assert suite.link_cell("link:100:100:200:125:125").spec() == LINKS["2g"]
    # it mixes with named cells, once each; its targets are the constant links' (no base + 100)
    assert [x.name for x in suite.select_cells("3g,link:500:2000:100,link:500:2000:100", D, W)
            ] == ["3g", "link:500:2000:100"]
    d = c.describe()
    json.dumps(d)
    assert d["link_name"] == "link:500:2000:100" and d["base_rtt_ms"] == 100
    assert [t[:3] for t in suite.targets(d, 800.0)] == [
        ("dl_pct", ">=", 0.90), ("ul_pct", ">=", 0.90), ("load_p95", "<=", 400.0)]


@pytest.mark.parametrize("bad", ["link:", "link:500:2000", "link:500:2000:100:64",
                                 "link:0:2000:100", "link:500:-2000:100", "link:500:2000:inf",
                                 "link:500:2000:nan", "link:a:b:c", "link:500:2000:100:64:0",
                                 "link:500::100", "link:500:2000:100:1:2:3"])
def test_a_bad_link_cell_is_refused(bad):
    with pytest.raises(ValueError, match="bad link cell"):
        suite.select_cells(bad, D, W)


def test_a_link_whose_downlink_swings_is_a_variable_cell(tmp_path):
    # rsfc-simsuite's --down-swing on a link of one's own: the downlink at its rate for a
    # period, then at rate / FACTOR for a period; played by rsfc-linkem from a generated trace
    [c] = suite.select_cells("swing:2000:7200:40:4:1000:1049:262", D, W)
    assert (c.kind, c.engine, c.timestamps) == ("trace", "linkem", True)
    link = c.link(tmp_path)
    assert (link.up.rate_bps, link.up.trace, link.up.buffer_bytes) == (2_000_000, None, 1_049_000)
    assert (link.down.rate_bps, link.down.buffer_bytes, link.base_rtt_ms) == (0, 262_000, 40)
    played = TraceFile.load(Path(link.down.trace))
    assert played.offsets == c.swing.down_trace().offsets and played.period_ms == 2000
    # every period carries its rate: 600 packets a second fast, 150 slow, at every phase
    for k in range(int(D) // 2):
        fast, slow = 2000 * k, 2000 * k + 1000
        assert played.opportunities(fast, fast + 1000) == pytest.approx(600, abs=1)
        assert played.opportunities(slow, slow + 1000) == pytest.approx(150, abs=1)
    assert c.mean_rates_bps() == (2_000_000, pytest.approx(4_500_000, rel=1e-3))
    assert f"trace={link.down.trace}" in link.down.linkem_arg(11, True)
    assert "rate=2000000" in link.up.linkem_arg(10, True)
    # buffers by default 4 s of each direction's rate, at least 125 KB
    slow_link = suite.swing_cell("swing:100:100:200:10:1000").spec()
    assert (slow_link.up.buffer_bytes, slow_link.down.buffer_bytes) == (125_000, 125_000)
    # a variable link: the traces' targets
    d = c.describe()
    json.dumps(d)
    assert d["swing"] == {"down_bps": 7_200_000, "factor": 4, "period_ms": 1000}
    assert [t[:3] for t in suite.targets(d, 800.0)] == [
        ("dl_pct", ">=", 0.85), ("ul_pct", ">=", 0.80), ("load_p95", "<=", 400.0)]


@pytest.mark.parametrize("bad", ["swing:", "swing:2000:7200:40:4", "swing:2000:7200:40:1:1000",
                                 "swing:2000:7200:40:0.5:1000", "swing:2000:7200:40:4:5",
                                 "swing:2000:7200:40:4:100.5", "swing:0:7200:40:4:1000",
                                 "swing:2000:7200:40:4:1000:64", "swing:a:b:c:d:e",
                                 "swing:2000:7200:nan:4:1000"])
def test_a_bad_swing_cell_is_refused(bad):
    with pytest.raises(ValueError, match="bad swing cell"):
        suite.select_cells(bad, D, W)


# ---- the policies -------------------------------------------------------------------------
def test_the_suite_policies():
    assert suite.default_policies() == [
        "off", "static2:32768", "static2:65536", "static2:131072", "static2:262144",
        "static2:393216", "off+drwa", "shipped"]
    a = SimpleNamespace(policies="static2:65536,shipped", extra_policies=["rsfc"], statics=None)
    assert suite.suite_policies(a) == ["off", "static2:65536", "shipped", "rsfc"]
    a = SimpleNamespace(policies=None, extra_policies=["rsfc+drwa"], statics=[8192])
    assert suite.suite_policies(a) == ["off", "static2:8192", "off+drwa", "shipped", "rsfc+drwa"]
    assert suite.kinds_for("off") == ("dl", "ul", "both")
    assert suite.kinds_for("shipped") == ("dl", "both")


def test_policy_forms_of_the_suite():
    assert policy_config("static2:65536") == {
        "uplink": {"policy": "static", "static_window_bytes": 65536},
        "downlink": {"policy": "static", "static_window_bytes": 65536}}
    assert policy_config("off+drwa") == {"uplink": {"policy": "off"},
                                         "downlink": {"policy": "drwa"}}
    assert policy_config("off+drwa[lambda=2]")["drwa"] == {"lambda": 2}
    for bad in ("static2:", "static2:x", "off+drwa[lambda]"):
        with pytest.raises(ValueError):
            policy_config(bad)


def test_shipped_is_what_conf_rsfcd_yaml_says():
    doc = yaml.safe_load(SHIPPED_CONFIG.read_text())
    cfg = policy_config("shipped")
    for knob in ("uplink", "downlink"):
        want = dict(doc[knob])
        want["policy"] = "off" if want["policy"] is False else want["policy"]
        assert cfg[knob] == want
    assert not set(cfg) & set(MACHINE_KEYS)
    assert set(cfg) == set(doc) - set(MACHINE_KEYS)


def test_shipped_reads_a_bare_off(tmp_path):
    from policies import shipped_config
    f = tmp_path / "rsfcd.yaml"
    f.write_text("queues: [1]\nuplink: {policy: rsfc}\ndownlink: {policy: off}\n"
                 "rsfc: {decision_log: \"/var/log/x\", threshold_ms: 30}\n")
    assert shipped_config(f) == {"uplink": {"policy": "rsfc"}, "downlink": {"policy": "off"},
                                 "rsfc": {"threshold_ms": 30}}


def _check(binary, tmp_path, cfg):
    path = tmp_path / "rsfcd.yaml"
    path.write_text(to_yaml(deep_merge(DEFAULT_CONFIG, cfg)))
    r = subprocess.run([str(binary), "--check-config", str(path)], capture_output=True,
                       text=True, timeout=10)
    return r.returncode, (r.stdout + r.stderr).strip()


@pytest.mark.parametrize("policy", suite.default_policies())
def test_suite_policy_is_accepted_by_the_daemon(prerequisites, tmp_path, policy):
    code, msg = _check(prerequisites, tmp_path, policy_config(policy))
    assert code == 0, msg
    check_policy(policy)  # what experiments.py does before a run


def test_a_bad_static2_is_refused_by_the_daemon(prerequisites, tmp_path):
    code, msg = _check(prerequisites, tmp_path, policy_config("static2:100"))
    assert code == 2 and "static_window_bytes" in msg, msg


@pytest.mark.parametrize("args,word", [(["--cells", "3g,4g"], "unknown cell"),
                                       (["--cells", "3g,link:0:1:100"], "bad link cell"),
                                       (["--policies", "off,static2:x"], "static2:x"),
                                       (["--runs", "0"], "--runs"),
                                       (["--upload-lead", "10", "--warmup", "8"],
                                        "--upload-lead"),
                                       (["--upload-lead", "-1"], "--upload-lead")])
def test_a_bad_suite_command_stops_before_any_run(args, word):
    r = subprocess.run(["/usr/bin/python3", str(LAB / "experiments.py"), "suite", "--dry-run",
                        *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and word in r.stderr, r.stderr


def test_dry_run_prints_the_plan_and_its_estimate(tmp_path):
    r = subprocess.run(["/usr/bin/python3", str(LAB / "experiments.py"), "suite", "--dry-run",
                        "--cells", "3g,2g", "--policies", "off,static2:65536", "--runs", "1",
                        "--duration", "30", "--workdir", str(tmp_path)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "2 cells x 2 policies x 1 runs = 10 tests of 30 s" in r.stdout, r.stdout
    assert "0 h 07 min" in r.stdout and not (tmp_path / "suite").exists()


# ---- the score on made-up results ---------------------------------------------------------
POLICIES = ["off", "static2:32768", "static2:65536", "shipped"]
CELLS = ["3g", "2g", "umts"]
# (cell, policy, kind) -> (dl Mbit/s, ul Mbit/s, RTT p50, p95) of run 1; run 2 and 3 scale
# the rates by 0.98 and 1.02 and add 5 and 10 ms to the RTTs.
FAKE = {
    "3g": {("off", "dl"): (7.0, None, 280, 330), ("off", "ul"): (None, 2.0, 3000, 4200),
           ("off", "both"): (0.7, 1.9, 3600, 4200),
           ("static2:32768", "dl"): (6.3, None, 60, 80), ("static2:32768", "both"): (6.3, 0.8,
                                                                                    70, 90),
           ("static2:65536", "dl"): (7.0, None, 90, 120), ("static2:65536", "both"): (6.6, 1.2,
                                                                                     100, 130),
           ("shipped", "dl"): (6.9, None, 50, 60), ("shipped", "both"): (6.5, 1.85, 60, 100)},
    "2g": {("off", "dl"): (0.09, None, 8000, 10000), ("off", "ul"): (None, 0.09, 9000, 10000),
           ("off", "both"): (0.01, 0.09, 15000, 19000),
           ("static2:32768", "dl"): (0.09, None, 2500, 2700),
           ("static2:32768", "both"): (0.085, 0.06, 2600, 2800),
           ("static2:65536", "dl"): (0.09, None, 5000, 5300),
           ("static2:65536", "both"): (0.08, 0.07, 5200, 5500),
           ("shipped", "dl"): (0.09, None, 400, 500), ("shipped", "both"): (0.08, 0.08, 600, 900)},
    "umts": {("off", "dl"): (1.8, None, 2000, 2500), ("off", "ul"): (None, 0.85, 5000, 9000),
             ("off", "both"): (0.3, 0.8, 6000, 9000),
             ("static2:32768", "dl"): (1.5, None, 300, 600),
             ("static2:32768", "both"): (1.5, 0.4, 350, 700),
             ("static2:65536", "dl"): (1.7, None, 500, 900),
             ("static2:65536", "both"): (1.6, 0.5, 550, 1000),
             ("shipped", "dl"): (1.8, None, 400, 800), ("shipped", "both"): (1.5, 0.7, 500, 1300)},
}


def fake_numbers(cell: str, policy: str, kind: str, run: int) -> dict:
    dl, ul, p50, p95 = FAKE[cell.split("@")[0]][(policy, kind)]
    k, dt = (1.0, 0.98, 1.02)[run - 1], 5 * (run - 1)
    return {"dl_mbps": None if dl is None else dl * k, "ul_mbps": None if ul is None else ul * k,
            "rtt_p50_ms": p50 + dt, "rtt_p95_ms": p95 + dt, "errors": []}


def fake_args(tmp_path, **kw) -> SimpleNamespace:
    a = dict(duration=D, warmup=W, cells="3g,2g,umts@" + _umts_mean_s() + "s",
             policies=",".join(POLICIES), extra_policies=[], statics=None, runs=3, resume=False,
             workdir=str(tmp_path), git={"commit": "f" * 40})
    a.update(kw)
    return SimpleNamespace(**a)


def _umts_mean_s() -> str:
    return str(next(c.offset_ms // 1000 for c in suite.all_cells(D, W)
                    if c.name.startswith("umts@") and c.window == "mean"))


@pytest.fixture
def fake_lab(monkeypatch):
    """suite.run_test replaced: made-up numbers, each call recorded."""
    calls = []

    def run_test(cell, policy, kind, run, duration, warmup, wd, log, upload_lead=0.0):
        calls.append((cell.name, policy, kind, run) + ((upload_lead,) if upload_lead else ()))
        return fake_numbers(cell.name, policy, kind, run)
    monkeypatch.setattr(suite, "run_test", run_test)
    return calls


def test_percentages_medians_and_spread(tmp_path, fake_lab):
    out = suite.run(fake_args(tmp_path), lambda m: None)
    assert len(fake_lab) == 3 * 3 * (3 + 2 * 3)  # runs x cells x (off: 3 tests, others: 2)
    s = out["summary"]["3g"]["shipped"]
    # download with upload / off's download alone of the same run: 6.5 k / 7.0 k
    assert s["dl_pct"]["median"] == pytest.approx(6.5 / 7.0)
    assert s["dl_pct"]["min"] == pytest.approx(6.5 / 7.0) == s["dl_pct"]["max"]
    assert s["ul_pct"]["median"] == pytest.approx(1.85 / 2.0) and s["ul_pct"]["n"] == 3
    assert (s["load_p95"]["median"], s["load_p95"]["min"], s["load_p95"]["max"]) == (105, 100, 110)
    assert (s["alone_p50"]["median"], s["alone_p95"]["median"]) == (55, 65)
    base = out["summary"]["3g"]["baseline"]
    assert base["base_dl_mbps"]["median"] == 7.0 and base["base_alone_p95"]["median"] == 335


def test_runs_without_their_own_baseline_take_the_first_runs(tmp_path, fake_lab):
    # off ran once, the shipped policy three times (a trace cell's unregulated baseline run
    # once): runs 2 and 3 are taken against run 1's download and upload alone
    out = suite.run(fake_args(tmp_path), lambda m: None)
    jsonl = Path(out["jsonl"])
    lines = [json.loads(x) for x in jsonl.read_text().splitlines()]
    jsonl.write_text("".join(json.dumps(x) + "\n" for x in lines
                             if not (x["policy"] == "off" and x["run"] > 1)))
    out = suite.from_jsonl(jsonl)
    s = out["summary"]["3g"]["shipped"]
    assert s["dl_pct"]["n"] == 3
    # the baseline's own spread counts the one run it has, not its stand-ins
    assert out["summary"]["3g"]["baseline"]["base_dl_mbps"]["n"] == 1
    # 6.5 x (1.0, 0.98, 1.02) against run 1's 7.0 (the runs' own were 7.0 x the same factor)
    assert s["dl_pct"]["min"] == pytest.approx(6.5 * 0.98 / 7.0)
    assert s["dl_pct"]["max"] == pytest.approx(6.5 * 1.02 / 7.0)


def test_targets_per_cell(tmp_path, fake_lab):
    out = suite.run(fake_args(tmp_path), lambda m: None)
    S = out["summary"]
    # 3g: dl 93 %, ul 92.5 %, p95 105 <= 335 / 2 and <= 40 + 100: all met
    assert S["3g"]["shipped"]["ok"] is True
    assert [c["bound"] for c in S["3g"]["shipped"]["checks"]] == [0.9, 0.9, 167.5, 140.0]
    # 2g: dl 0.08/0.09 = 89 %, ul 89 %, p95 905 < 1 s
    assert S["2g"]["shipped"]["ok"] is True
    assert S["2g"]["static2:32768"]["ok"] is False  # p95 2.8 s, upload 67 %
    umts = next(n for n in S if n.startswith("umts@"))
    # trace: dl 1.5/1.8 = 83 % < 85 %, ul 0.7/0.85 = 82 %, p95 1305 > 2505 / 2
    missed = {c["what"] for c in S[umts]["shipped"]["checks"] if c["ok"] is False}
    assert missed == {"dl_pct", "load_p95"}
    sc = out["scores"]["shipped"]
    assert (sc["cells"], sc["cells_ok"]) == (3, 2)
    assert {(m["cell"], m["what"]) for m in sc["misses"]} == {(umts, "dl_pct"), (umts, "load_p95")}


def test_worst_cell_and_best_static(tmp_path, fake_lab):
    out = suite.run(fake_args(tmp_path), lambda m: None)
    S, sc = out["summary"], out["scores"]
    umts = next(n for n in S if n.startswith("umts@"))
    # 3g: 32K scores min(90 %, 40 %), 64K min(94 %, 60 %): 64K is the best static
    assert out["best_static"]["3g"] == "static2:65536"
    assert S["3g"]["shipped"]["p95_vs_best_static"] == pytest.approx(105 / 135)
    # shipped's worst cell: umts, min(83 %, 82 %)
    assert sc["shipped"]["worst_cell"] == umts
    assert sc["shipped"]["worst"] == pytest.approx(0.7 / 0.85)
    # the statics' worst: 32K 3g min(90 %, 40 %), 64K umts min(89 %, 59 %)
    assert sc["static2:32768"]["worst"] == pytest.approx(0.4)
    assert sc["static2:65536"]["worst"] == pytest.approx(0.5 / 0.85)
    assert sc["shipped"]["beats_every_static_worst"] is True
    assert sc["shipped"]["max_p95_cell"] == umts
    assert sc["shipped"]["max_p95_vs_best_static"] == pytest.approx(1305 / 1005)
    assert sc["shipped"]["cells_p95_over_110pct"] == 1
    assert sc["off"]["worst"] == pytest.approx(0.1) and sc["off"]["worst_cell"] == "3g"


def test_best_static_ties_go_to_the_lower_p95():
    S = {"a": {"score": 0.800, "load_p95": {"median": 300}},
         "b": {"score": 0.805, "load_p95": {"median": 200}},
         "c": {"score": 0.700, "load_p95": {"median": 100}}}
    assert suite.best_static(S, ["a", "b", "c"]) == "b"
    S["a"]["load_p95"]["median"] = 150
    assert suite.best_static(S, ["a", "b", "c"]) == "a"
    assert suite.best_static(S, []) is None


def test_the_table(tmp_path, fake_lab):
    out = suite.run(fake_args(tmp_path), lambda m: None)
    text = suite.report(out)
    assert "columns: 32K = static2:32768, 64K = static2:65536" in text
    assert "\n3g: up 2 Mbit/s 1 MiB, down 7.2 Mbit/s 256 KiB, base RTT 40 ms" in text
    assert "2g: up 0.1 Mbit/s 125 KB, down 0.1 Mbit/s 125 KB, base RTT 200 ms" in text
    assert f"\numts@{_umts_mean_s()}s: TMobile-UMTS-driving from {_umts_mean_s()} s (mean " \
           f"window), buffers up 1 MB / down 512 KB, base RTT 50 ms" in text
    lines = text.splitlines()
    head = lines[[i for i, x in enumerate(lines) if x.startswith("3g: ")][0] + 1].split()
    assert head == ["off", "32K", "64K*", "shipped"]
    row = next(x for x in lines if x.startswith("download w/ upload"))
    assert row.split()[-4:] == ["10%", "90%", "94%", "93%"]
    assert next(x for x in lines if x.startswith("  p95 min-max")).split()[-1] == "100-110"
    assert "cells meeting the targets" in text and "2/3" in text
    assert "shipped misses: umts@" in text and "points short" in text
    assert "half the unregulated download-alone p95" in text
    json.dumps(out)  # the run's JSON


def test_a_swing_cell_in_the_table(tmp_path, fake_lab, monkeypatch):
    name = "swing:2000:7200:40:4:1000:1049:262"
    monkeypatch.setitem(FAKE, name, FAKE["umts"])
    out = suite.run(fake_args(tmp_path, cells=name), lambda m: None)
    text = suite.report(out)
    assert (f"\n{name}: up 2 Mbit/s 1049 KB, down 7.2 and 1.8 Mbit/s in turn, 1000 ms each, "
            "262 KB, base RTT 40 ms") in text
    assert out["summary"][name]["shipped"]["checks"][0]["bound"] == 0.85  # a variable link's
    json.dumps(out)


def test_the_plot(tmp_path, fake_lab):
    plots = pytest.importorskip("plots")
    out = suite.run(fake_args(tmp_path), lambda m: None)
    (tmp_path / "suite.json").write_text(json.dumps(out))
    paths = plots.plot_run(tmp_path / "suite.json", tmp_path / "plots")
    assert [p.name for p in paths] == ["suite-summary.png"] and paths[0].stat().st_size > 1000


# ---- resumable ----------------------------------------------------------------------------
def test_a_suite_resumes_where_it_stopped(tmp_path, fake_lab, monkeypatch):
    a = fake_args(tmp_path, runs=2)
    n = 2 * 3 * 9
    real = suite.run_test

    def stop_after(limit):
        def run_test(*args):
            if len(fake_lab) >= limit:
                raise KeyboardInterrupt
            return real(*args)
        return run_test
    monkeypatch.setattr(suite, "run_test", stop_after(20))
    with pytest.raises(KeyboardInterrupt):
        suite.run(a, lambda m: None)
    jsonl = tmp_path / "suite" / "results.jsonl"
    assert len(jsonl.read_text().splitlines()) == 20
    partial = suite.from_jsonl(jsonl)  # what --show prints of a stopped suite
    assert partial["tests"]["3g"]["off"]["dl"][0] is not None
    monkeypatch.setattr(suite, "run_test", real)
    a.resume = True
    logs = []
    out = suite.run(a, logs.append)
    assert len(fake_lab) == n  # the 20 done were not run again
    assert f"= {n} tests" in logs[0] and "20 done before" in logs[0]
    assert len(jsonl.read_text().splitlines()) == n
    assert all(v is not None for c in out["tests"].values() for p in c.values()
               for k in p.values() for v in k)
    again = suite.from_jsonl(jsonl)
    assert again["summary"] == out["summary"] and again["scores"] == out["scores"]
    # a test with errors runs again; without --resume the old lines are moved aside
    lines = jsonl.read_text().splitlines()
    bad = json.loads(lines[0])
    bad["numbers"]["errors"] = ["ping: timed out"]
    jsonl.write_text("\n".join([json.dumps(bad)] + lines[1:]) + "\n")
    suite.run(a, lambda m: None)
    assert len(fake_lab) == n + 1
    a.resume = False
    suite.run(a, lambda m: None)
    assert len(fake_lab) == 2 * n + 1
    assert len(list((tmp_path / "suite").glob("results-*.jsonl"))) == 1


def test_a_changed_configuration_is_not_resumed(tmp_path, fake_lab):
    a = fake_args(tmp_path, runs=1, cells="3g", policies="off,static2:65536")
    suite.run(a, lambda m: None)
    assert len(fake_lab) == 5
    a.resume, a.policies = True, "off,static2:65536,static2:32768"
    suite.run(a, lambda m: None)
    assert len(fake_lab) == 7  # only the new policy's tests
    a.duration = 30.0
    suite.run(a, lambda m: None)
    assert len(fake_lab) == 14  # another window: every test again


def test_an_upload_lead_starts_the_upload_first_and_is_its_own_test(tmp_path, fake_lab):
    a = fake_args(tmp_path, runs=1, cells="2g", policies="off,shipped")
    suite.run(a, lambda m: None)
    assert len(fake_lab) == 5 and all(len(c) == 4 for c in fake_lab)
    a.resume, a.upload_lead = True, 0.5
    suite.run(a, lambda m: None)
    # only the tests with both transfers run again, with the lead; the others are the same
    assert sorted(fake_lab[5:]) == [("2g", "off", "both", 1, 0.5),
                                    ("2g", "shipped", "both", 1, 0.5)]
    jsonl = tmp_path / "suite" / "results.jsonl"
    lines = [json.loads(x) for x in jsonl.read_text().splitlines()]
    assert [ln.get("upload_lead_s") for ln in lines if ln["kind"] == "both"] == [None, None,
                                                                                 0.5, 0.5]
    assert all("upload_lead_s" not in ln for ln in lines if ln["kind"] != "both")
    suite.run(a, lambda m: None)
    assert len(fake_lab) == 7  # resumed: nothing left


def test_the_estimate(tmp_path):
    cells = suite.select_cells("3g,2g", D, W)
    tests = suite.plan(cells, ["off", "static2:65536"], 1)
    assert len(tests) == 2 * 5
    est = suite.estimate_s(tests, 30)
    assert est == pytest.approx(5 * (30 + suite.SETUP_S + 2.75) + 5 * (30 + suite.SETUP_S + 10.6))
    assert suite.estimate_s(tests, 30, [60.0, 40.0]) == 10 * 50.0
    full = suite.plan(suite.all_cells(D, W), suite.default_policies(), 3)
    assert len(full) == 3 * 13 * (3 + 7 * 2)


def test_arms_only_runs_each_arm_under_both_transfers_and_no_baseline():
    """--arms-only: the test with both transfers of each policy but off, run by run; off, whose
    medians lab/compare_runs.py takes from a whole suite, runs nothing."""
    cells = suite.select_cells("3g,2g", D, W)
    tests = suite.plan(cells, ["off", "shipped", "shipped[rsfc.fast_target=1]"], 2,
                       arms_only=True)
    assert [(r, c.name, p, k) for r, c, p, k in tests] == [
        (r, c, p, "both") for r in (1, 2) for c in ("3g", "2g")
        for p in ("shipped", "shipped[rsfc.fast_target=1]")]
