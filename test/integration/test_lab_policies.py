"""The lab's policy strings (lab/policies.py policy_config, used by scenarios.py and
experiments.py): each becomes the rsfcd configuration it names (dotted override keys nest:
rsfc[tuning.probe_below=0.3] is rsfc.tuning.probe_below), and rsfcd --check-config accepts
it; an override with a misspelt key reaches the daemon and is refused there, so a lab run
never silently measures the defaults instead. The decision log's path goes to the
top-level `decision_log` key."""

import os
import subprocess
from pathlib import Path

import pytest

from exps.bench import Bench
from policies import parse_overrides, policy_config
from shaping import LINKS
from topo import DEFAULT_CONFIG, deep_merge, to_yaml


def _check(binary, tmp_path, cfg):
    path = tmp_path / "rsfcd.yaml"
    path.write_text(to_yaml(deep_merge(DEFAULT_CONFIG, cfg)))
    r = subprocess.run([str(binary), "--check-config", str(path)], capture_output=True,
                       text=True, timeout=10)
    return r.returncode, (r.stdout + r.stderr).strip()


CASES = [
    ("off", {"uplink": {"policy": "off"}, "downlink": {"policy": "off"}}),
    ("static:65536", {"uplink": {"policy": "static", "static_window_bytes": 65536},
                      "downlink": {"policy": "off"}}),
    ("rsfc", {"uplink": {"policy": "rsfc"}, "downlink": {"policy": "off"}}),
    ("rsfc[threshold_ms=auto;fast_target=1.5;per_subscriber=false;tuning.monitor_steps=3]",
     {"uplink": {"policy": "rsfc"}, "downlink": {"policy": "off"},
      "rsfc": {"threshold_ms": "auto", "fast_target": 1.5, "per_subscriber": False,
               "tuning": {"monitor_steps": 3}}}),
    ("rsfc[tuning.probe_below=0.3;tuning.drain_fraction=0.9]",
     {"uplink": {"policy": "rsfc"}, "downlink": {"policy": "off"},
      "rsfc": {"tuning": {"probe_below": 0.3, "drain_fraction": 0.9}}}),
    ("rsfc+drwa", {"uplink": {"policy": "rsfc"}, "downlink": {"policy": "drwa"}}),
    ("rsfc+drwa[lambda=4;alpha=0.5;rsfc.threshold_ms=20]",
     {"uplink": {"policy": "rsfc"}, "downlink": {"policy": "drwa"},
      "drwa": {"lambda": 4, "alpha": 0.5}, "rsfc": {"threshold_ms": 20}}),
    ("rsfc+drwa[rsfc.tuning.probe_below=0.3;lambda=2]",
     {"uplink": {"policy": "rsfc"}, "downlink": {"policy": "drwa"},
      "drwa": {"lambda": 2}, "rsfc": {"tuning": {"probe_below": 0.3}}}),
    ("rsfc+rsfc", {"uplink": {"policy": "rsfc"}, "downlink": {"policy": "rsfc"}}),
    ("off+rsfc", {"uplink": {"policy": "off"}, "downlink": {"policy": "rsfc"}}),
    ("off+rsfc[threshold_ms=30;tuning.probe_below=0.3]",
     {"uplink": {"policy": "off"}, "downlink": {"policy": "rsfc"},
      "rsfc": {"threshold_ms": 30, "tuning": {"probe_below": 0.3}}}),
    ("rsfc+rsfc[pacing.enabled=true;pacing.gain=1.1;fast_target=1]",
     {"uplink": {"policy": "rsfc"}, "downlink": {"policy": "rsfc"},
      "rsfc": {"fast_target": 1}, "pacing": {"enabled": True, "gain": 1.1}}),
]


@pytest.mark.parametrize("policy,expected", CASES, ids=[c[0] for c in CASES])
def test_policy_string_names_its_config(policy, expected):
    assert policy_config(policy) == expected


@pytest.mark.parametrize("policy", [c[0] for c in CASES])
def test_policy_config_is_accepted_by_the_daemon(prerequisites, tmp_path, policy):
    code, msg = _check(prerequisites, tmp_path, policy_config(policy))
    assert code == 0, msg


def test_shipped_with_overrides_is_the_shipped_file_with_them(prerequisites, tmp_path):
    """shipped[...]: conf/rsfcd.yaml's regulation keys, the overrides merged into them (a
    variant run beside the shipped file in one suite); the rest of the file is kept."""
    from policies import shipped_config

    shipped = shipped_config()
    cfg = policy_config("shipped[rsfc.fast_target=1;pacing.gain=1.1]")
    assert cfg["rsfc"]["fast_target"] == 1 and cfg["pacing"]["gain"] == 1.1
    assert cfg["rsfc"]["fast_target"] != shipped["rsfc"]["fast_target"]
    assert {k: v for k, v in cfg["rsfc"].items() if k != "fast_target"} == {
        k: v for k, v in shipped["rsfc"].items() if k != "fast_target"}
    assert cfg["uplink"] == shipped["uplink"] and cfg["downlink"] == shipped["downlink"]
    assert policy_config("shipped[]") == shipped
    code, msg = _check(prerequisites, tmp_path, cfg)
    assert code == 0, msg


def test_dotted_override_keys_nest():
    assert parse_overrides("tuning.probe_below=0.3") == {"tuning": {"probe_below": 0.3}}
    assert parse_overrides("rsfc.tuning.x=1;lambda=2") == {"rsfc": {"tuning": {"x": 1}},
                                                          "lambda": 2}
    assert parse_overrides(" a.b = 1 ; a.c=true;d=auto;e=2.0;f=/tmp/x.jsonl; ") == {
        "a": {"b": 1, "c": True}, "d": "auto", "e": 2.0, "f": "/tmp/x.jsonl"}
    assert parse_overrides("") == {}


@pytest.mark.parametrize("text", ["a=1;a=2", "a=1;a.b=2", "a.b=2;a=1", "a", "=1", ".a=1",
                                  "a..b=1", "a.=1"])
def test_bad_override_is_refused_before_any_run(text):
    with pytest.raises(ValueError):
        parse_overrides(text)
    with pytest.raises(ValueError):
        policy_config(f"rsfc[{text}]")


@pytest.mark.parametrize("policy,word", [
    ("rsfc[fast_targe=1.5]", "fast_targe"),
    ("rsfc+drwa[lamda=4]", "lamda"),
    ("rsfc+drwa[rsfc.threshold=20]", "threshold"),
    ("rsfc[tuning.probe_blow=0.3]", "probe_blow"),
    ("rsfc[probe_below=0.3]", "probe_below"),  # a tuning key outside rsfc.tuning
    ("shipped[rsfc.fast_targe=1.5]", "fast_targe"),
])
def test_misspelt_override_is_refused_by_the_daemon(prerequisites, tmp_path, policy, word):
    code, msg = _check(prerequisites, tmp_path, policy_config(policy))
    assert code == 2 and word in msg, msg


def test_decision_log_is_a_top_level_key(tmp_path):
    """Bench (lab/exps/bench.py) has rsfcd log its decisions for the rsfc policies and
    observe, at the top-level `decision_log`; not for the others."""
    b = Bench("cfg", LINKS["3g"], "rsfc[tuning.probe_below=0.3]", workdir=tmp_path)
    cfg = b.daemon_config()
    assert cfg["decision_log"] == str(b.decision_log)
    assert cfg["rsfc"] == {"tuning": {"probe_below": 0.3}}
    assert "decision_log" not in Bench("cfg", LINKS["3g"], "static:65536",
                                       workdir=tmp_path).daemon_config()
    assert Bench("cfg", LINKS["3g"], "none", workdir=tmp_path).daemon_config() is None


def test_downlink_rsfc_policies_log_their_decisions():
    """The downlink knob rsfc logs its decisions too ("knob": "downlink")."""
    from policies import wants_decision_log

    assert wants_decision_log("off+rsfc") and wants_decision_log("rsfc+rsfc")
    assert not wants_decision_log("off+drwa") and not wants_decision_log("static:65536")


def test_decision_log_config_is_accepted_by_the_daemon(prerequisites, tmp_path):
    cfg = Bench("cfg", LINKS["3g"], "rsfc", workdir=tmp_path).daemon_config()
    code, msg = _check(prerequisites, tmp_path, cfg)
    assert code == 0, msg


def test_unknown_policy_is_refused_before_any_run():
    assert policy_config("none") is None
    for bad in ("turbo", "static:", "rsfc[", "drwa"):
        with pytest.raises(ValueError):
            policy_config(bad)


def test_a_repeated_policy_gets_its_own_column(monkeypatch):
    """Side-by-side repeats ("rsfc,static:65536,rsfc") are each kept and shown: the second
    "rsfc" is "rsfc #2", run with rsfc's configuration, and the table has three columns."""
    import scenarios

    ran = []

    def fake_run_test(scenario, policy, kind, duration, warmup, engine="tbf", log=print):
        ran.append(policy)
        return scenarios.TestResult(policy=policy, kind=kind, dl_mbps=6.0 + len(ran),
                                    ul_mbps=1.5, rtt_p50_ms=300, rtt_p95_ms=340)

    monkeypatch.setattr(scenarios, "run_test", fake_run_test)
    sc = scenarios.SCENARIOS["3g"]
    results = scenarios.run_scenario(sc, ["rsfc", "static:65536", "rsfc"], 40, 10,
                                     kinds=("both",), log=lambda m: None)
    assert list(results) == ["rsfc", "static:65536", "rsfc #2"]
    assert ran == ["rsfc", "static:65536", "rsfc"]
    assert results["rsfc"]["both"].dl_mbps == 7.0 and results["rsfc #2"]["both"].dl_mbps == 9.0
    table = scenarios.format_table(sc, scenarios.summarize(sc, results), 40, 10)
    assert "rsfc #2" in table and "9.00" in table and "7.00" in table


# ---- another build (POLICY@NAME): two builds side by side in one suite ----------------------
def test_a_policy_of_another_build_runs_that_builds_daemon(monkeypatch, tmp_path):
    """POLICY@NAME is POLICY's configuration run by NAME's rsfcd (lab/EXPERIMENTS.md Q53: the
    trace cells move between sessions by as much as a change does, so two builds are judged
    side by side, test by test)."""
    import policies
    import topo

    monkeypatch.setitem(policies.BUILDS, "variant", tmp_path / "vbuild")
    assert policy_config("shipped@variant") == policy_config("shipped")
    assert policy_config("rsfc[fast_target=1.5]@variant") == policy_config("rsfc[fast_target=1.5]")
    assert policies.policy_binary("shipped@variant") == tmp_path / "vbuild" / "rsfcd"
    assert policies.policy_binary("shipped") == topo.rsfcd_binary()
    # An '@' inside an override's value names no build.
    assert policy_config("rsfc[tuning.note=a@b]") == {
        "uplink": {"policy": "rsfc"}, "downlink": {"policy": "off"},
        "rsfc": {"tuning": {"note": "a@b"}}}
    with pytest.raises(ValueError, match="no build 'other'"):
        policy_config("shipped@other")
    with pytest.raises(ValueError, match="vbuild/rsfcd"):  # not built: refused before any run
        policies.check_policy("shipped@variant")

    started = []

    def daemon(topo_, cfg, binary=None):
        started.append(binary)
        return object()
    monkeypatch.setattr(topo, "Daemon", daemon)
    for policy in ("shipped", "shipped@variant"):
        b = Bench("t", LINKS["3g"], policy, workdir=tmp_path, log=lambda _: None)
        b.start_daemon()
    assert started == [topo.rsfcd_binary(), tmp_path / "vbuild" / "rsfcd"]


@pytest.mark.parametrize("text", ["variant", "=dir", "a b=dir", "v=", "v=d1,v=d2", "v/x=dir"])
def test_a_bad_build_is_refused(text):
    import policies

    with pytest.raises(ValueError):
        policies.parse_builds(text)


def test_a_suite_of_two_builds_plans_them_side_by_side(prerequisites, tmp_path):
    """experiments.py --build NAME=DIR: both policies run in each cell and run, one after the
    other; a build it was not given stops the command before any run."""
    lab = Path(__file__).resolve().parents[2] / "lab"
    cmd = ["/usr/bin/python3", str(lab / "experiments.py"), "suite", "--dry-run", "--cells",
           "3g", "--runs", "2", "--arms-only", "--workdir", str(tmp_path)]
    r = subprocess.run(cmd + ["--build", f"variant={prerequisites.parent}", "--policies",
                              "shipped,shipped@variant"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert "1 cells x 3 policies x 2 runs = 4 tests" in r.stdout, r.stdout
    assert "policies: off, shipped, shipped@variant" in r.stdout, r.stdout
    r = subprocess.run(cmd + ["--policies", "shipped,shipped@nobuild"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2 and "no build 'nobuild'" in r.stderr, r.stderr
    r = subprocess.run(cmd + ["--build", "variant=/nonexistent", "--policies",
                              "shipped@variant"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "/nonexistent/rsfcd" in r.stderr, r.stderr
    r = subprocess.run(cmd + ["--policies", "shipped"], capture_output=True, text=True,
                       timeout=60, env={**os.environ, "RSFC_BUILDS": "variant"})
    assert r.returncode == 2 and "RSFC_BUILDS: build 'variant'" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr, r.stderr
