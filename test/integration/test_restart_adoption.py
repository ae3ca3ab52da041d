"""Flow adoption across restarts: a long CUBIC upload through a slow uplink with a deep
buffer (4 Mbit/s, 512 KiB: about 1 s of queue) is regulated by rsfc; then rsfcd is (a)
killed with SIGKILL and restarted, (b) stopped with SIGTERM and restarted, (c) "upgraded":
stopped and a copy of the binary at another path started. The new process never saw the
upload's handshake; it must take the window scales from conntrack and regulate the upload
again within a second: rsfcd_flows_adopted_total reaches 1 and the uplink knob rewrites
windows (rsfcd_rsfc_windows_applied_total) within 1 s of the restart, and the phone's RTT
1-4 s after the restart is back near its regulated level, far below the unregulated one.

The control, in the same run and on the same upload: a restart with
flows.adopt_from_conntrack: false leaves the upload unregulated (nothing adopted, no window
rewritten), and its buffer fills: the RTT then is the unregulated level the checks above
compare with. Without adoption every restart kind ends like the control.

Each restart's times are printed (pytest -s shows them): from the restart to the first
adopted flow with windows rewritten, and to the first ping sample from which the RTT stays
regulated."""

import json
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

import topo as topo_mod
from helpers import iperf3_server, wait_listening
from shaping import Direction, LinkSpec, Shaping
from topo import PHONE4, SRV4

REPO = Path(__file__).resolve().parents[2]
LINK = LinkSpec(up=Direction(4_000_000, 512 * 1024, 20), down=Direction(20_000_000, 256 * 1024, 20))
CFG = {"uplink": {"policy": "rsfc"}, "downlink": {"policy": "off"}}
UPLOAD_S = 60
PING_INTERVAL_S = 0.02
REGULATED_BY_S = 1.0  # the metrics must show adoption and clamping this soon after a restart
RTT_EARLY_S = (1.0, 4.0)  # from 1 s after a restart: back at the regulated level
RTT_LATE_S = (4.0, 7.0)  # and staying there
CONTROL_WINDOW_S = (3.0, 6.0)  # the unregulated control's buffer has filled by then


class Pinger:
    """lab/pinger.py from the phone to the server in the background; samples in absolute
    time.monotonic() (the process's start taken as its first request: a few ms early)."""

    def __init__(self, lab, duration: float):
        self.t0 = time.monotonic()
        self.proc = lab.popen("phone", [sys.executable, str(REPO / "lab" / "pinger.py"), SRV4,
                                        "--interval", str(PING_INTERVAL_S), "--duration",
                                        str(duration), "--linger", "2"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def samples(self) -> list[tuple[float, float]]:
        out, err = self.proc.communicate(timeout=30)
        assert self.proc.returncode == 0, f"pinger failed: {err}"
        return [(self.t0 + t, rtt) for t, rtt in json.loads(out)["samples"]]


def between(samples, a: float, b: float) -> list[float]:
    return [rtt for t, rtt in samples if a <= t < b]


def p50(xs: list[float]) -> float:
    assert xs, "no ping samples in the window"
    return statistics.median(xs)


def regulated_again_at(samples, t_restart: float, limit_ms: float) -> float | None:
    """Seconds from the restart to the start of the first 0.5 s bin from which on every
    bin's median RTT stays under `limit_ms` (None if the last one does not)."""
    bins: dict[int, list[float]] = {}
    for t, rtt in samples:
        if t >= t_restart:
            bins.setdefault(int((t - t_restart) / 0.5), []).append(rtt)
    back = None
    for i in sorted(bins):
        if p50(bins[i]) > limit_ms:
            back = None
        elif back is None:
            back = i * 0.5
    return back


def wait_regulating(d, t_restart: float, timeout: float) -> float | None:
    """Seconds from the restart until rsfcd reports an adopted flow that its rsfc controller
    runs (rsfcd_rsfc_flows counts it in a state); None if not within `timeout`."""
    while time.monotonic() < t_restart + timeout:
        try:
            m = d.metrics()
        except OSError:
            time.sleep(0.01)
            continue
        if m.value("rsfcd_flows_adopted_total") >= 1 and m.value("rsfcd_rsfc_flows") >= 1:
            return time.monotonic() - t_restart
        time.sleep(0.02)
    return None


@pytest.mark.timeout(110)
def test_upload_is_regulated_again_within_a_second_of_each_restart(lab, rsfcd, artifacts,
                                                                   prerequisites):
    def with_decisions(config: dict, name: str) -> dict:
        # Each daemon's control decisions (the adopted upload's drain, its minimum, its
        # threshold) are kept with the artifacts: a level missed says why.
        path = lab.workdir / f"decisions-{name}.jsonl"
        artifacts.add(f"decision log ({name})", path)
        return dict(config, decision_log=str(path))

    # Installs the rules (with the conntrack match) and starts rsfcd.
    daemons = [rsfcd(with_decisions(CFG, "first"))]

    def restart(kind: str, config: dict, binary: Path):
        old = daemons[-1]
        if kind == "kill":
            old.kill(signal.SIGKILL)
            old.proc.wait(timeout=5)
        else:
            assert old.stop() == 0, old.log_tail()
        config = with_decisions(config, f"{len(daemons)}-{kind}")
        d = topo_mod.Daemon(lab, config, binary=binary, start=False)
        artifacts.daemons.append(d)
        artifacts.add(f"rsfcd log ({kind})", d.log_path)
        d.start()
        daemons.append(d)
        return d

    upgraded = lab.workdir / "upgrade" / "rsfcd"
    upgraded.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(prerequisites, upgraded)

    with Shaping(lab, LINK):
        port = 5411
        iperf3_server(lab, port, lab.workdir / "iperf3-server.log")
        client_log = lab.workdir / "iperf3-client.json"
        artifacts.add("iperf3 client", client_log)
        with open(client_log, "wb") as f:
            lab.popen("phone", ["iperf3", "-c", SRV4, "-p", str(port), "-t", str(UPLOAD_S),
                                "-C", "cubic", "-J"], stdout=f, stderr=subprocess.STDOUT)
        time.sleep(4)
        ping = Pinger(lab, 2.5)
        regulated = p50([rtt for _, rtt in ping.samples()])
        m = daemons[0].metrics()
        assert m.value("rsfcd_rsfc_windows_applied_total") > 0, "the upload is not regulated"

        results = {}
        for kind, binary in (("kill", prerequisites), ("sigterm", prerequisites),
                             ("upgrade", upgraded), ("control", prerequisites)):
            control = kind == "control"
            config = dict(CFG, flows={"adopt_from_conntrack": False}) if control else CFG
            window = CONTROL_WINDOW_S if control else RTT_EARLY_S
            ping = Pinger(lab, (CONTROL_WINDOW_S if control else RTT_LATE_S)[1] + 0.3)
            time.sleep(0.3)
            t_restart = time.monotonic()
            d = restart("kill" if kind == "kill" else "term", config, binary)
            at = wait_regulating(d, t_restart, REGULATED_BY_S)
            samples = ping.samples()
            m = d.metrics()
            results[kind] = {
                "regulating_after_s": at,
                "rtt_p50_ms": p50(between(samples, t_restart + window[0], t_restart + window[1])),
                "late_p50_ms": p50(between(samples, t_restart + RTT_LATE_S[0],
                                           t_restart + RTT_LATE_S[1])) if not control else None,
                "applied": m.value("rsfcd_rsfc_windows_applied_total"),
                "samples": samples, "t_restart": t_restart,
                "adopted": m.value("rsfcd_flows_adopted_total"),
                "found": m.value("rsfcd_conntrack_lookups_total", queue="0", result="found")
                + m.value("rsfcd_conntrack_dump_entries_total", queue="0"),
            }

    unregulated = results["control"]["rtt_p50_ms"]
    limit = max(1.5 * regulated, regulated + 30)
    print(f"\nregulated RTT p50 {regulated:.0f} ms; unregulated (control, "
          f"{CONTROL_WINDOW_S[0]:g}-{CONTROL_WINDOW_S[1]:g} s after its restart) "
          f"{unregulated:.0f} ms; regulated level: under {limit:.0f} ms")
    for kind, r in results.items():
        t_r = r["t_restart"]
        last = (CONTROL_WINDOW_S if kind == "control" else RTT_LATE_S)[1]
        per_s = [round(p50(between(r["samples"], t_r + i, t_r + i + 1))) for i in range(int(last))]
        r["rtt_back_after_s"] = regulated_again_at(r["samples"], t_r, limit)
        print(f"{kind}: adopted {r['adopted']:.0f}, controller running after "
              f"{r['regulating_after_s'] and round(r['regulating_after_s'], 3)} s, "
              f"windows applied {r['applied']:.0f}; RTT p50 per second {per_s} ms; "
              f"{RTT_EARLY_S[0]:g}-{RTT_EARLY_S[1]:g} s {r['rtt_p50_ms']:.0f} ms; "
              f"at the regulated level from {r['rtt_back_after_s']} s on")

    # The control shows what a restart without adoption does: nothing adopted, the buffer
    # fills. It must be far above the regulated level for the checks below to mean anything.
    c = results["control"]
    assert c["adopted"] == 0 and c["regulating_after_s"] is None and c["applied"] == 0, c
    assert unregulated > 4 * regulated and unregulated > 400, (regulated, unregulated)
    for kind in ("kill", "sigterm", "upgrade"):
        r = results[kind]
        assert r["regulating_after_s"] is not None, \
            f"{kind}: no adopted flow under the controller within {REGULATED_BY_S} s"
        assert r["applied"] > 0, f"{kind}: the adopted upload's windows were never lowered"
        # Within a second the RTT is back at the level it was regulated to before the restart
        # (the adopted controller drains the queue it started behind at once, §5a), and stays.
        assert r["rtt_p50_ms"] <= limit, (kind, r["rtt_p50_ms"], regulated, unregulated)
        assert r["late_p50_ms"] <= limit, (kind, r["late_p50_ms"], regulated)


@pytest.mark.timeout(60)
def test_two_queues_adopt_a_server_initiated_upload_at_its_first_packet(lab, rsfcd, artifacts,
                                                                        prerequisites):
    """With two queues a worker cannot tell which connections of the conntrack table the
    kernel sends to it, so there is no start-up dump: each worker asks conntrack at a flow's
    first packet. The server opens this connection (iperf3 -R from srv: the phone sends the
    data), so the tuple rsfcd asks with (subscriber -> peer) is conntrack's reply direction,
    and the phone is not the initiator."""
    cfg = {"queues": [0, 1], "uplink": {"policy": "static", "static_window_bytes": 32768},
           "downlink": {"policy": "off"}}
    first = rsfcd(cfg, queues=(0, 1))
    port = 5412
    log = open(lab.workdir / "iperf3-phone-server.log", "wb")
    lab.popen("phone", ["iperf3", "-s", "-1", "-p", str(port)], stdout=log,
              stderr=subprocess.STDOUT)
    log.close()
    wait_listening(lab, "phone", port)
    lab.popen("srv", ["iperf3", "-c", PHONE4, "-p", str(port), "-R", "-t", "12", "-b", "5M",
                      "-C", "cubic"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(2)
    assert first.metrics().value("rsfcd_windows_rewritten_total", direction="to_subscriber") > 0
    first.kill(signal.SIGKILL)
    first.proc.wait(timeout=5)
    t_restart = time.monotonic()
    d = topo_mod.Daemon(lab, cfg, binary=prerequisites, start=False)
    artifacts.daemons.append(d)
    artifacts.add("rsfcd log (restarted)", d.log_path)
    d.start()
    m = d.metrics()
    while time.monotonic() < t_restart + REGULATED_BY_S:
        m = d.metrics()
        if m.value("rsfcd_windows_rewritten_total", direction="to_subscriber") > 0:
            break
        time.sleep(0.02)
    took = time.monotonic() - t_restart
    print(f"\ntwo queues, server-initiated upload: clamped again {took:.3f} s after the restart; "
          f"lookups {m.series('rsfcd_conntrack_lookups_total')}")
    assert m.value("rsfcd_conntrack_dump_entries_total") == 0, "no dump with two queues"
    assert m.value("rsfcd_conntrack_lookups_total", result="found") >= 1
    assert m.value("rsfcd_flows_adopted_total") >= 1
    assert m.value("rsfcd_windows_rewritten_total", direction="to_subscriber") > 0, \
        f"not clamped within {REGULATED_BY_S} s of the restart"
