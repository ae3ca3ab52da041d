"""Configuration: --check-config exit codes and one-line messages; --print-config prints the
shipped conf/rsfcd.yaml (and, with --tuning, the experimental block); SIGHUP applies a changed
static window to existing flows without losing their state; a bad file on SIGHUP keeps the
running configuration."""

import math
import subprocess
import time

import pytest
import yaml

from helpers import static_cfg
from topo import DEFAULT_CONFIG, REPO, deep_merge, to_yaml
from wire import Conn, check_window

GOOD = to_yaml(deep_merge(DEFAULT_CONFIG, static_cfg(uplink=16384)))

BAD = [
    # (label, YAML text, a word the message must name)
    ("unknown top-level key", GOOD + "frobnicate: 1\n", "frobnicate"),
    ("unknown nested key", GOOD.replace("static_window_bytes: 16384",
                                        "static_window_bytes: 16384\n  polcy: static"), "polcy"),
    ("bad policy", GOOD.replace('policy: "static"', "policy: turbo"), "policy"),
    ("drwa on the uplink", GOOD.replace('policy: "static"', "policy: drwa"), "uplink"),
    ("wrong type", GOOD.replace("min_window_bytes: 2920", "min_window_bytes: lots"),
     "min_window_bytes"),
    ("window below the floor", GOOD.replace("static_window_bytes: 16384",
                                            "static_window_bytes: 1000"), "static_window_bytes"),
    ("bad prefix", GOOD.replace('"198.18.0.0/16"', '"198.18.0.0/33"'), "subscriber_networks"),
    ("queue out of range", GOOD.replace("queues: [0]", "queues: [70000]"), "queues"),
    ("YAML syntax", "uplink: [\n", ""),
    ("flows.max below the queues", GOOD.replace("queues: [0]", "queues: [0, 1]")
     .replace("max: 100000", "max: 1"), "flows.max"),
    ("flows.max wrapping per worker", GOOD.replace("queues: [0]", "queues: [0, 1]")
     .replace("max: 100000", "max: 4294967295"), "flows.max"),
]


def _check(binary, path):
    r = subprocess.run([str(binary), "--check-config", str(path)], capture_output=True,
                       text=True, timeout=10)
    return r.returncode, (r.stdout + r.stderr).strip()


def test_check_config_accepts_good_files(prerequisites, tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text(GOOD)
    for path in (good, REPO / "conf" / "rsfcd.yaml"):
        rc, out = _check(prerequisites, path)
        assert rc == 0, f"--check-config {path}: exit {rc}: {out}"


@pytest.mark.parametrize("label,text,word", BAD, ids=[b[0] for b in BAD])
def test_check_config_rejects_bad_files(prerequisites, tmp_path, label, text, word):
    assert text != GOOD, "test case did not change the good file"
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    rc, out = _check(prerequisites, path)
    assert rc != 0, f"{label}: --check-config accepted it"
    lines = out.splitlines()
    assert len(lines) == 1, f"{label}: want a one-line message, got {lines}"
    assert word in lines[0], f"{label}: message does not name {word!r}: {lines[0]}"


OPERATOR_RSFC_KEYS = [
    "threshold_ms", "threshold_floor_ms", "threshold_ceiling_ms", "min_window_horizon_s",
    "tbuff_filter_ms", "growth_per_rtt", "fast_target", "min_refresh_s", "path_check_ms",
    "initial_window_bytes", "per_subscriber", "idle_law", "share_equalize"]
TUNING_KEYS = [
    "control_interval_floor_ms", "rtt_smoothing_ms", "probe_step_queue", "probe_below",
    "drain_fraction", "path_foreign_rate", "path_tolerance_ms", "max_interval_ms",
    "tick_multiple", "rtt_gain", "monitor_after_steps", "monitor_steps", "fine_tick_ms",
    "unused_fraction", "unused_decay", "startup_growth", "probe_doublings", "recut_fraction",
    "min_window_segments", "lag_confirm_fraction", "refresh_holdoff",
    "threshold_ceiling_lag_ms", "threshold_ceiling_download_alone_ms", "threshold_packets",
    "threshold_packets_ceiling_ms", "threshold_ceiling_steady_ms", "downlink_round_trip",
    "downlink_yield"]


def _print_config(binary, *flags):
    r = subprocess.run([str(binary), "--print-config", *flags], capture_output=True, text=True,
                       timeout=10)
    assert r.returncode == 0 and not r.stderr, (r.returncode, r.stderr)
    return r.stdout


def test_print_config_is_the_shipped_file(prerequisites):
    shipped = (REPO / "conf" / "rsfcd.yaml").read_text()
    assert _print_config(prerequisites) == shipped, \
        "conf/rsfcd.yaml is generated: build/rsfcd --print-config > conf/rsfcd.yaml"
    # PyYAML (YAML 1.1) reads it as rsfcd does: the shipped policies, 12 operator keys.
    cfg = yaml.safe_load(shipped)
    assert cfg["uplink"] == {"policy": "rsfc", "static_window_bytes": 65535}
    assert cfg["downlink"] == {"policy": "rsfc", "static_window_bytes": 65535}
    assert list(cfg["rsfc"]) == OPERATOR_RSFC_KEYS
    assert cfg["decision_log"] == ""


def test_print_config_tuning_lists_the_experimental_block(prerequisites, tmp_path):
    text = _print_config(prerequisites, "--tuning")
    cfg = yaml.safe_load(text)
    assert list(cfg["rsfc"]) == OPERATOR_RSFC_KEYS + ["tuning"]
    assert list(cfg["rsfc"]["tuning"]) == TUNING_KEYS
    path = tmp_path / "tuning.yaml"
    path.write_text(text)
    rc, out = _check(prerequisites, path)
    assert rc == 0, out
    r = subprocess.run([str(prerequisites), "--print-config", "--bogus"], capture_output=True,
                       text=True, timeout=10)
    assert r.returncode == 2 and "unrecognised" in r.stderr


@pytest.mark.parametrize("text,word", [
    ("rsfc:\n  decision_log: /tmp/d.jsonl\n", "top-level key decision_log"),
    ("rsfc:\n  probe_below: 0.3\n", "rsfc.tuning.probe_below"),
])
def test_moved_keys_name_their_new_place(prerequisites, tmp_path, text, word):
    path = tmp_path / "moved.yaml"
    path.write_text(GOOD + text)
    rc, out = _check(prerequisites, path)
    assert rc == 2 and len(out.splitlines()) == 1 and word in out, out


def test_check_config_missing_file(prerequisites, tmp_path):
    missing = tmp_path / "nope.yaml"
    rc, out = _check(prerequisites, missing)
    assert rc != 0 and len(out.splitlines()) == 1 and str(missing) in out, (rc, out)


def _probe_until(conn, raw_want, start, timeout=3.0):
    """Sends far-ahead ACKs (no right-edge holds) until one arrives with `raw_want`."""
    off = start
    deadline = time.monotonic() + timeout
    got = None
    while time.monotonic() < deadline:
        off += 1_000_000
        x = conn.to_phone(ack_off=off, window=0xFFFF)
        got = x.got_window
        if got == raw_want:
            return off
        time.sleep(0.05)
    raise AssertionError(f"window never became {raw_want} (last {got})")


def test_sighup_applies_to_existing_flows_and_bad_file_keeps_config(wire, rsfcd):
    d = rsfcd(static_cfg(uplink=20000))
    c = Conn(wire, srv_wscale=7)
    c.handshake()
    off = 1_000_000
    check_window(c.to_phone(ack_off=off, window=0xFFFF), math.ceil(20000 / 128))

    d.reload(static_cfg(uplink=8000))
    off = _probe_until(c, math.ceil(8000 / 128), off)  # same flow: its state survived
    m = d.metrics()
    assert m.value("rsfcd_flows_created_total") == 1, "reload must not recreate flows"
    assert m.value("rsfcd_flows_unregulated_total") == 0
    assert m.value("rsfcd_flows_active") == 1

    log_size = d.log_path.stat().st_size
    d.reload(raw=to_yaml(deep_merge(DEFAULT_CONFIG, static_cfg(uplink=12000)))
             .replace('policy: "static"', "policy: turbo"))
    deadline = time.monotonic() + 3
    while d.log_path.stat().st_size == log_size and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)
    assert d.alive(), f"rsfcd exited on a bad reload: {d.log_tail()}"
    assert "turbo" in d.log_path.read_text(errors="replace")[log_size:] or \
        "policy" in d.log_path.read_text(errors="replace")[log_size:], \
        "the failed reload should be logged naming the bad key"
    for _ in range(5):
        off += 1_000_000
        check_window(c.to_phone(ack_off=off, window=0xFFFF), math.ceil(8000 / 128))

    # And a good reload after the bad one still works.
    d.reload(static_cfg(uplink=12000))
    _probe_until(c, math.ceil(12000 / 128), off)
    assert d.metrics().value("rsfcd_flows_created_total") == 1


def test_decision_log_is_a_top_level_key_applied_on_sighup(rsfcd, tmp_path):
    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    d = rsfcd(static_cfg(uplink=20000, decision_log=str(first)))
    assert first.exists(), f"the decision log was not opened at start: {d.log_tail()}"
    d.reload(static_cfg(uplink=20000, decision_log=str(second)))
    deadline = time.monotonic() + 3
    while not second.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert second.exists(), f"SIGHUP did not open the new decision log: {d.log_tail()}"
    assert d.alive()


def test_check_config_refuses_nested_aliases_at_once(prerequisites):
    """A 'billion laughs' file (aliases of aliases, 10^8 nodes expanded) is refused in one
    line, at once: it used to hold --check-config (and SIGHUP) for ~14 s."""
    path = REPO / "test" / "data" / "config" / "alias_bomb.yaml"
    start = time.monotonic()
    rc, out = _check(prerequisites, path)
    assert rc == 2 and len(out.splitlines()) == 1 and "anchors and aliases" in out, out
    assert time.monotonic() - start < 2, "took too long"
