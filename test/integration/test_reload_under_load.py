"""SIGHUP under load: rsfcd reloads its configuration 20 times during a full-rate upload
(real kernel TCP, CUBIC, no link shaping) regulated by rsfc, and the gateway loses nothing:
the kernel's queue drop counters (/proc/net/netfilter/nfnetlink_queue in the gw namespace:
queue_dropped, user_dropped) do not move, rsfcd sees no gap in the packet ids (a packet
the kernel could not hand to it, accepted fail-open), every packet it received got its
verdict, and the upload never stalls (every 0.5 s iperf3 interval carries data)."""

import json
import statistics
import subprocess
import time

import pytest

from helpers import iperf3_server
from topo import SRV4

RELOADS = 20
SECONDS = 9
INTERVAL_S = 0.5
FLOOR_BYTES = 1_000_000  # per 0.5 s interval (16 Mbit/s): far below the link, far above 0


def queue_counters(lab, queue: int = 0) -> dict:
    """The kernel's view of `queue` in gw's namespace (nfnetlink_queue is per netns):
    queue_num peer_portid queue_total copy_mode copy_range queue_dropped user_dropped
    id_sequence 1."""
    text = lab.run("gw", ["cat", "/proc/net/netfilter/nfnetlink_queue"]).stdout
    for line in text.splitlines():
        f = line.split()
        if f and f[0] == str(queue):
            return {"portid": int(f[1]), "total": int(f[2]), "dropped": int(f[5]),
                    "user_dropped": int(f[6]), "id_sequence": int(f[7])}
    raise AssertionError(f"queue {queue} not bound in gw: {text!r}")


def tcp_segments_sent(lab, role: str) -> int:
    """Segments the role's TCP stack put on the wire (OutSegs counts each segment of a GSO
    packet, not retransmissions; RetransSegs those), IPv4 and IPv6 alike."""
    lines = [ln.split() for ln in lab.run(role, ["cat", "/proc/net/snmp"]).stdout.splitlines()
             if ln.startswith("Tcp:")]
    tcp = dict(zip(lines[0][1:], map(int, lines[1][1:])))
    return tcp["OutSegs"] + tcp["RetransSegs"]


def rsfc_cfg(fast_target: float) -> dict:
    return {"uplink": {"policy": "rsfc"}, "downlink": {"policy": "off"},
            "rsfc": {"fast_target": fast_target}}


def reloads_applied(d) -> int:
    return d.log_path.read_text(errors="replace").count("reload: ")


@pytest.mark.timeout(90)
def test_sighup_20_times_during_full_rate_upload(lab, rsfcd, artifacts):
    d = rsfcd(rsfc_cfg(0.75))
    before = queue_counters(lab)
    m0 = d.metrics()
    sent0 = tcp_segments_sent(lab, "phone") + tcp_segments_sent(lab, "srv")
    port = 5401
    iperf3_server(lab, port, lab.workdir / "iperf3-server.log")
    client_log = lab.workdir / "iperf3-client.json"
    artifacts.add("iperf3 client", client_log)
    with open(client_log, "wb") as f:
        cli = lab.popen("phone", ["iperf3", "-c", SRV4, "-p", str(port), "-t", str(SECONDS),
                                  "-i", str(INTERVAL_S), "-C", "cubic", "-J"],
                        stdout=f, stderr=subprocess.STDOUT)
    time.sleep(1.0)

    # 20 reloads, each a changed file, each waited for (signals sent faster would merge).
    start = time.monotonic()
    peak_total = 0
    for i in range(RELOADS):
        n = reloads_applied(d)
        d.reload(rsfc_cfg(0.7 if i % 2 == 0 else 0.75))
        deadline = time.monotonic() + 3
        while reloads_applied(d) == n and time.monotonic() < deadline:
            time.sleep(0.01)
        assert reloads_applied(d) > n, f"reload {i + 1} not applied within 3 s: {d.log_tail()}"
        peak_total = max(peak_total, queue_counters(lab)["total"])
        time.sleep(0.25)
    spent = time.monotonic() - start
    assert cli.poll() is None, "the upload ended before the reloads did"
    assert cli.wait(timeout=SECONDS + 20) == 0, f"iperf3 failed: {client_log}"
    assert d.alive(), f"rsfcd died: {d.log_tail()}"
    log = d.log_path.read_text(errors="replace")
    assert log.count("reload: ") == RELOADS and log.count(" applied") == RELOADS, \
        f"want {RELOADS} applied reloads and nothing else: {d.log_tail(RELOADS + 5)}"

    # Nothing lost at the queue.
    time.sleep(0.5)  # the last FIN/ACKs
    sent = tcp_segments_sent(lab, "phone") + tcp_segments_sent(lab, "srv") - sent0
    after = queue_counters(lab)
    m = d.metrics()
    assert after["portid"] == before["portid"], "the queue was re-bound during the reloads"
    assert after["dropped"] == before["dropped"], f"queue_dropped moved: {before} -> {after}"
    assert after["user_dropped"] == before["user_dropped"], \
        f"user_dropped moved: {before} -> {after}"
    for name in ("rsfcd_queue_overruns_total", "rsfcd_queue_recv_errors_total",
                 "rsfcd_queue_send_errors_total"):
        assert m.value(name) == m0.value(name), f"{name}: {m0.value(name)} -> {m.value(name)}"
    received = m.value("rsfcd_queue_packets_received_total")
    verdicts = m.value("rsfcd_queue_verdicts_total")
    queued = after["id_sequence"] - before["id_sequence"]
    assert queued == sent, \
        f"the phone and the server sent {sent} TCP segments, the kernel queued {queued} " \
        f"(the others went past rsfcd: a full queue fails open)"
    assert received - m0.value("rsfcd_queue_packets_received_total") == queued, \
        f"the kernel queued {queued} packets, rsfcd received " \
        f"{received - m0.value('rsfcd_queue_packets_received_total')}"
    assert verdicts == received, f"{received} packets received, {verdicts} verdicts"
    assert m.value("rsfcd_rsfc_windows_applied_total") > 0, "rsfc never regulated the upload"

    # The upload never stalled.
    res = json.loads(client_log.read_text())
    intervals = [(iv["sum"]["start"], iv["sum"]["bytes"]) for iv in res["intervals"]]
    sizes = [b for _, b in intervals]
    slow = [(round(t, 1), b) for t, b in intervals if b < FLOOR_BYTES]
    rate = res["end"]["sum_received"]["bits_per_second"]
    print(f"{RELOADS} reloads in {spent:.1f} s during a {SECONDS} s upload at "
          f"{rate / 1e6:.0f} Mbit/s; {sent} segments sent, all queued, none dropped; peak queue "
          f"{peak_total}; 0.5 s intervals min {min(sizes) / 1e6:.1f} MB, median "
          f"{statistics.median(sizes) / 1e6:.1f} MB")
    assert len(intervals) >= SECONDS / INTERVAL_S - 1, f"too few intervals: {intervals}"
    assert not slow, f"the upload stalled (< {FLOOR_BYTES} B in 0.5 s): {slow}"
