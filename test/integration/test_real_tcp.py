"""Real kernel TCP (CUBIC on both ends) through rsfcd: what the sender's own kernel accepts
as its send window (`ss -tin` snd_wnd) never exceeds the clamp; and the box fails open
(kill -9 / SIGTERM: traffic keeps flowing thanks to --queue-bypass)."""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import (SsSampler, Tcpdump, iperf3_client, iperf3_server, round_up, static_cfg,
                     wait_listening)
from topo import SRV4, SRV6

HERE = Path(__file__).resolve().parent
SYN_EDGE = 65535  # SYN/SYN-ACK windows are unscaled: their edge is at most this far


def data_conn(samples):
    """Samples of the busiest connection (iperf3 also has a control connection)."""
    assert samples, "ss saw no established connection"
    best = max(samples, key=lambda s: s.bytes_acked + s.bytes_received)
    return [s for s in samples if (s.local, s.peer) == (best.local, best.peer)]


def assert_snd_wnd_clamped(samples, clamp: int, who: str):
    """After the handshake's (untouchable) window has been used up, the sender's snd_wnd
    never exceeds the clamp rounded up through the receiver's window scale; and the clamp
    is what binds (the largest window seen is exactly it)."""
    conn = data_conn(samples)
    bound = round_up(clamp, conn[0].snd_wscale)
    steady = [s for s in conn if s.bytes_acked > 2 * SYN_EDGE]
    assert len(steady) >= 10, f"{who}: only {len(steady)} ss samples after the handshake window"
    over = [s for s in steady if s.snd_wnd > bound]
    assert not over, (f"{who}: snd_wnd above the clamp {bound} in {len(over)}/{len(steady)} "
                      f"samples, e.g. {over[0].line}")
    assert max(s.snd_wnd for s in steady) == bound, \
        f"{who}: the clamp {bound} never was the window (max {max(s.snd_wnd for s in steady)})"
    print(f"{who}: clamp {clamp} -> bound {bound} (wscale {conn[0].snd_wscale}); "
          f"{len(steady)} samples, max snd_wnd {max(s.snd_wnd for s in steady)}, "
          f"max during handshake window {max(s.snd_wnd for s in conn)}")
    return conn


@pytest.mark.parametrize("lab", [{"phone_timestamps": True}, {"phone_timestamps": False}],
                         ids=["timestamps", "no-timestamps"], indirect=True)
def test_uplink_static_clamp_real_upload(lab, rsfcd, artifacts):
    clamp = 20000  # not a multiple of the scale unit: rounding up shows end to end
    d = rsfcd(static_cfg(uplink=clamp))
    port = 5201
    iperf3_server(lab, port, lab.workdir / "iperf3-server.log")
    pcap = lab.workdir / "gw-ran0.pcap"
    artifacts.add("pcap (gw, phone side, first packets)", pcap)
    with Tcpdump(lab, "gw", "ran0", pcap), SsSampler(lab, "phone", port) as ss:
        res = iperf3_client(lab, SRV4, port, 3)
    ss.dump(lab.workdir / "ss-phone.txt")
    artifacts.add("ss samples (phone)", lab.workdir / "ss-phone.txt")
    rate = res["end"]["sum_received"]["bits_per_second"]
    assert rate > 5e6, f"upload too slow through the clamp: {rate / 1e6:.1f} Mbit/s"
    print(f"upload through a {clamp} B uplink clamp: {rate / 1e6:.0f} Mbit/s")
    assert_snd_wnd_clamped(ss.samples, clamp, "phone (uplink knob)")
    m = d.metrics()
    assert m.value("rsfcd_windows_rewritten_total", direction="to_subscriber") > 100
    assert m.value("rsfcd_windows_rewritten_total", direction="from_subscriber") == 0


def test_downlink_static_clamp_real_download(lab, rsfcd, artifacts):
    clamp = 30000
    d = rsfcd(static_cfg(downlink=clamp))
    port = 5202
    iperf3_server(lab, port, lab.workdir / "iperf3-server.log")
    with SsSampler(lab, "srv", port) as ss:
        res = iperf3_client(lab, SRV6, port, 3, reverse=True)  # IPv6 this time
    ss.dump(lab.workdir / "ss-srv.txt")
    artifacts.add("ss samples (srv)", lab.workdir / "ss-srv.txt")
    rate = res["end"]["sum_received"]["bits_per_second"]
    assert rate > 5e6, f"download too slow through the clamp: {rate / 1e6:.1f} Mbit/s"
    print(f"download through a {clamp} B downlink clamp: {rate / 1e6:.0f} Mbit/s")
    assert_snd_wnd_clamped(ss.samples, clamp, "server (downlink knob)")
    m = d.metrics()
    assert m.value("rsfcd_windows_rewritten_total", direction="from_subscriber") > 100
    assert m.value("rsfcd_windows_rewritten_total", direction="to_subscriber") == 0


def test_data_carrying_acks_bidirectional(lab, rsfcd, artifacts):
    """Bulk data both ways on one connection: the ACKs ride on (GSO-built) data segments,
    which the kernel segments before queueing; both knobs still bind."""
    up, down = 20000, 30000
    d = rsfcd(static_cfg(uplink=up, downlink=down))
    port, seconds = 5300, 3
    srv = lab.popen("srv", [sys.executable, str(HERE / "bidir.py"), "server", str(port),
                            str(seconds)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    wait_listening(lab, "srv", port)
    with SsSampler(lab, "phone", port) as ss_phone, SsSampler(lab, "srv", port) as ss_srv:
        cli = lab.run("phone", [sys.executable, str(HERE / "bidir.py"), "client", SRV4,
                                str(port), str(seconds)], timeout=seconds + 20)
    out_srv, err_srv = srv.communicate(timeout=20)
    for name, s in (("phone", ss_phone), ("srv", ss_srv)):
        s.dump(lab.workdir / f"ss-{name}.txt")
        artifacts.add(f"ss samples ({name})", lab.workdir / f"ss-{name}.txt")
    c = json.loads(cli.stdout)
    s = json.loads(out_srv.decode().splitlines()[-1])
    assert c["sent"] > 1e6 and s["sent"] > 1e6, f"too little data moved: {c} {s}"
    print(f"bidirectional {seconds} s: phone sent {c['sent'] / 1e6:.0f} MB, "
          f"server sent {s['sent'] / 1e6:.0f} MB")
    assert c["received"] == s["sent"] and s["received"] == c["sent"], \
        f"bytes lost or corrupted in transit: client {c}, server {s}"
    assert_snd_wnd_clamped(ss_phone.samples, up, "phone (uplink knob, data-carrying ACKs)")
    assert_snd_wnd_clamped(ss_srv.samples, down, "server (downlink knob, data-carrying ACKs)")
    m = d.metrics()
    assert m.value("rsfcd_windows_rewritten_total", direction="to_subscriber") > 100
    assert m.value("rsfcd_windows_rewritten_total", direction="from_subscriber") > 100
    # Without NFQA_CFG_F_GSO the kernel segments GSO packets before queueing them.
    assert m.value("rsfcd_queue_gso_packets_total") == 0


def _queue_bound(lab, queue: int = 0) -> bool:
    text = lab.run("gw", ["cat", "/proc/net/netfilter/nfnetlink_queue"], check=False).stdout
    return any(line.split() and line.split()[0] == str(queue) for line in text.splitlines())


def _intervals(res):
    return [(iv["sum"]["start"], iv["sum"]["bytes"]) for iv in res["intervals"]]


@pytest.mark.parametrize("sig,exit_code", [(signal.SIGKILL, -signal.SIGKILL),
                                           (signal.SIGTERM, 0)], ids=["kill-9", "sigterm"])
def test_traffic_survives_daemon_exit(lab, rsfcd, artifacts, sig, exit_code):
    d = rsfcd(static_cfg(uplink=16384, downlink=16384))
    port = 5203
    iperf3_server(lab, port, lab.workdir / "iperf3-server.log")
    client_log = lab.workdir / "iperf3-client.json"
    artifacts.add("iperf3 client", client_log)
    with open(client_log, "wb") as f:
        cli = lab.popen("phone", ["iperf3", "-c", SRV4, "-p", str(port), "-t", "4", "-i", "0.5",
                                  "-C", "cubic", "-J"], stdout=f, stderr=subprocess.STDOUT)
    time.sleep(1.5)
    assert _queue_bound(lab), "rsfcd is not bound to queue 0"
    d.kill(sig)
    rc = d.proc.wait(timeout=10)
    assert rc == exit_code, f"rsfcd exit status {rc}, want {exit_code}"
    assert not _queue_bound(lab), "queue 0 still bound after the daemon exited"
    assert cli.wait(timeout=20) == 0, f"iperf3 failed after the daemon exited: {client_log}"
    res = json.loads(client_log.read_text())
    after = [b for start, b in _intervals(res) if start >= 2.0]
    assert after and all(b > 0 for b in after), \
        f"the running connection stalled after the daemon exited: {_intervals(res)}"
    # New connections work too (IPv6 and IPv4).
    for dst in (SRV6, SRV4):
        iperf3_server(lab, port + 1, lab.workdir / "iperf3-server2.log")
        r = iperf3_client(lab, dst, port + 1, 1)
        assert r["end"]["sum_received"]["bytes"] > 0


def test_decision_log_of_a_real_upload_rotated_and_capped(lab, rsfcd, artifacts):
    """The decision log end to end: rsfc on a real upload writes one JSON object per line
    (written by its own thread); logrotate's move plus SIGHUP gives a new file, which the
    reloaded decision_log_max_bytes caps (whole lines, never above it, the rest counted);
    SIGTERM writes what is still queued. No record is lost to a full queue."""
    log = lab.workdir / "decisions.jsonl"
    rotated = lab.workdir / "decisions.jsonl.1"
    artifacts.add("decision log (rotated)", rotated)
    artifacts.add("decision log", log)
    cfg = {"uplink": {"policy": "rsfc"}, "downlink": {"policy": "off"},
           "decision_log": str(log)}
    d = rsfcd(cfg)
    port = 5205
    iperf3_server(lab, port, lab.workdir / "iperf3-server.log")
    iperf3_client(lab, SRV4, port, 2)
    log.rename(rotated)
    d.reload({**cfg, "decision_log_max_bytes": 4096})
    deadline = time.monotonic() + 3
    while not log.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert log.exists(), f"SIGHUP did not reopen the decision log: {d.log_tail()}"
    iperf3_server(lab, port, lab.workdir / "iperf3-server2.log")
    iperf3_client(lab, SRV4, port, 2)
    time.sleep(0.3)  # the writer's period is 100 ms
    m = d.metrics()
    assert d.stop() == 0
    first = [json.loads(line) for line in rotated.read_text().splitlines()]
    second = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(first) >= 20, f"only {len(first)} decisions in 2 s of a regulated upload"
    assert all(r["knob"] == "uplink" and r["enforced"] for r in first + second)
    assert 0 < log.stat().st_size <= 4096, log.stat().st_size
    assert log.read_text().endswith("\n")
    assert m.value("rsfcd_decision_log_dropped_total", reason="size_cap") > 0
    assert m.value("rsfcd_decision_log_dropped_total", reason="queue_full") == 0
    assert m.value("rsfcd_decision_log_dropped_total", reason="write_error") == 0
    written = m.value("rsfcd_decision_log_records_total")
    assert 0 < written <= len(first) + len(second)
