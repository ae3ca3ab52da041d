"""The test bench of lab/experiments.py: one test on a fresh lab (lab/topo.py's namespaces,
optionally a second phone, the emulated link of lab/shaping.py, rsfcd with a policy of
lab/policies.py, lab/traffic.py's server, flows and pinger), with timed events, and its
result: every flow's tcp_info samples, the phone's RTT samples, the link's counters, the
daemon's metrics and its decision log. lab/measure.py turns a result into numbers.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import topo as topo_mod
from policies import policy_binary, policy_config, wants_decision_log, with_decision_log
from shaping import UPLINK_QUEUE, LinkSpec, Shaping, linkem_binary

LAB = Path(__file__).resolve().parent.parent
TRAFFIC = LAB / "traffic.py"
PY = "/usr/bin/python3"
PORT = 5300
EXTRA_DELAY_QUEUES = (12, 13)  # bs-namespace NFQUEUE numbers of the delay-step element


# ---- a second phone ----------------------------------------------------------------------
PHONE2_4, BS_PHONE2_4 = "198.18.1.2", "198.18.1.1"


class TwoPhoneTopology(topo_mod.Topology):
    """lab/topo.py's four namespaces plus a second phone `phone2` (198.18.1.2/24) on its own
    veth to bs (`phone1` there): both phones' uplink leaves bs through the same gw0 egress,
    i.e. the same bottleneck. IPv4 only."""

    def ns(self, role: str) -> str:
        if role == "phone2":
            return f"{self.name}-phone2"
        return super().ns(role)

    def iface(self, role: str, towards: str) -> str:
        if role == "phone2":
            return "eth0"
        if role == "bs" and towards == "phone2":
            return "phone1"
        return super().iface(role, towards)

    def up(self) -> "TwoPhoneTopology":
        if Path(f"/run/netns/{self.ns('phone2')}").exists():
            raise RuntimeError(f"namespace {self.ns('phone2')} already exists")
        super().up()
        self.add_netns("phone2")
        self.node_script("phone2", "common.sh",
                         env={"RSFC_CC": self.cc_phone or "",
                              "RSFC_TIMESTAMPS": "1" if self.phone_timestamps else "0"})
        self.add_veth("bs", "phone1", "phone2", "eth0")
        self.node_script("phone2", "link.sh", "eth0", f"{PHONE2_4}/24")
        self.node_script("bs", "link.sh", "phone1", f"{BS_PHONE2_4}/24")
        self.node_script("bs", "router.sh")
        self.node_script("phone2", "routes.sh", "default", BS_PHONE2_4)
        if not self.offloads:
            self.run("phone2", ["ethtool", "-K", "eth0", "gro", "off", "gso", "off", "tso",
                                "off"], check=False)
        return self

    def down(self) -> None:
        super().down()  # kills every process we started, phone2's included
        topo_mod.delete_netns(self.ns("phone2"))


# ---- one test: a fresh lab, timed events, samples ---------------------------------------
_SEQ = 0


def _tbf_burst(rate_bps: int) -> int:
    # As lab/node/bs-bottleneck.sh: two full frames at least, ~2 ms of tokens.
    return max(3100, rate_bps // 8 // 500)


class Bench:
    """One test on a fresh lab: topology (+ a second phone), the emulated link, rsfcd with
    `policy` (at once, or later with start_daemon()), a traffic server on srv, a pinger on
    the phone. Times are seconds after `t0` (CLOCK_MONOTONIC), for every process.

        with Bench("x", link, "rsfc") as b:
            b.begin(ping_s=40)
            b.at(0, b.bulk, "ul", "up", 30)
            b.run_schedule()
            res = b.finish()
    """

    def __init__(self, label: str, link: LinkSpec, policy: str, engine: str = "tbf",
                 phones: int = 1, phone_timestamps: bool = True, cc_phone: str = "cubic",
                 daemon_at_start: bool = True, extra_delay_ms: float = 0.0,
                 workdir: Path | None = None, log=print, capture: bool | None = None):
        global _SEQ
        _SEQ += 1
        self.name = f"l4x{os.getpid() % 100000}t{_SEQ}"
        self.label = label
        self.link = link
        self.policy = policy
        self.engine = engine
        self.phones = phones
        self.cc_phone = cc_phone
        self.phone_timestamps = phone_timestamps
        self.daemon_at_start = daemon_at_start
        self.extra_delay_ms = extra_delay_ms
        tag = re.sub(r"[^A-Za-z0-9_.=-]", "_", f"{label}-{policy.replace(':', '')}")
        self.workdir = (workdir or Path("/tmp/rsfc-lab4")) / tag
        self.log = log
        self.topo: topo_mod.Topology | None = None
        self.shaping: Shaping | None = None
        self.daemon: topo_mod.Daemon | None = None
        self.extra_delay: subprocess.Popen | None = None
        self.server: subprocess.Popen | None = None
        self.ping: subprocess.Popen | None = None
        self.clients: dict[str, tuple[subprocess.Popen, dict]] = {}
        self.events: list[dict] = []
        self.schedule: list[tuple[float, object, tuple]] = []
        self.errors: list[str] = []
        self.t0 = 0.0
        self.linkem_start = (0.0, 0.0)
        self.decision_log = self.workdir / "decisions.jsonl"
        # The gateway's traffic on its phone side, headers only (tcpdump -s 128), for
        # rsfc-replay: RSFC_LAB_CAPTURE=1 (experiments.py --capture) or capture=True.
        self.capture = (os.environ.get("RSFC_LAB_CAPTURE") == "1") if capture is None else capture
        self.capture_path = self.workdir / "capture.pcap"
        self.capture_proc: topo_mod.Capture | None = None

    # ---- set-up / tear-down ---------------------------------------------------------------
    def __enter__(self):
        try:
            self.setup()
        except BaseException:
            self.teardown()
            raise
        return self

    def __exit__(self, *exc):
        self.teardown()
        return False

    def setup(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        if self.decision_log.exists():
            self.decision_log.unlink()
        cls = TwoPhoneTopology if self.phones == 2 else topo_mod.Topology
        self.topo = cls(self.name, cc_phone=self.cc_phone, cc_srv="cubic",
                        phone_timestamps=self.phone_timestamps, workdir=self.workdir)
        self.topo.up()
        self.shaping = Shaping(self.topo, self.link, engine=self.engine)
        before = time.monotonic()
        self.shaping.start()
        self.linkem_start = (before, time.monotonic())  # rsfc-linkem's time zero is in here
        if self.phones == 2:
            # Second phone: its uplink joins the first phone's delay queue and, behind it,
            # the same bottleneck (TBF on gw0 or linkem's queue); its downlink gets its own
            # TBF like the first phone's.
            self.topo.run("bs", ["iptables-legacy", "-A", "LINKEM", "-i", "phone1", "-j",
                                 "NFQUEUE", "--queue-num", str(UPLINK_QUEUE)])
            if self.engine == "tbf" and self.link.down.rate_bps:
                self.topo.node_script("bs", "bs-bottleneck.sh", "phone1",
                                      str(self.link.down.rate_bps),
                                      str(self.link.down.buffer_bytes or 100_000_000))
        if self.extra_delay_ms:
            self._start_extra_delay()
        if self.capture:
            self._start_capture()
        cfg = policy_config(self.policy)
        if cfg is not None:
            self.topo.nfqueue_rules([0])
            if self.daemon_at_start:
                self.start_daemon()

    def daemon_config(self) -> dict | None:
        cfg = policy_config(self.policy)
        if cfg is not None and wants_decision_log(self.policy):
            cfg = with_decision_log(cfg, self.decision_log)
        return cfg

    def start_daemon(self) -> None:
        cfg = self.daemon_config()
        if cfg is None or self.daemon is not None:
            return
        self.daemon = topo_mod.Daemon(self.topo, cfg, binary=policy_binary(self.policy))
        self.event("daemon started")

    def _start_extra_delay(self) -> None:
        up_q, down_q = EXTRA_DELAY_QUEUES
        d = f"{self.extra_delay_ms:g}ms"
        self.extra_delay = self.topo.popen(
            "bs", [str(linkem_binary()), "--link", f"queue={up_q},delay={d}",
                   "--link", f"queue={down_q},delay={d}", "--realtime"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
            text=True)
        line = self.extra_delay.stdout.readline().strip()
        if line != "ready":
            raise RuntimeError(f"extra delay element did not start ({line!r})")

    def _start_capture(self) -> None:
        """The gateway's phone-side interface, TCP only, into capture.pcap."""
        self.capture_proc = topo_mod.Capture(self.topo, "gw", self.topo.iface("gw", "bs"),
                                             self.capture_path, args=("-Z", "root"),
                                             expr=("tcp",)).start()

    def _stop_capture(self) -> None:
        c, self.capture_proc = self.capture_proc, None
        if c is not None and not c.stop():
            self.errors.append("tcpdump did not stop on SIGINT: capture.pcap may be cut")

    def teardown(self) -> None:
        self._stop_capture()
        if self.topo is not None:
            if self.shaping is not None:
                self.shaping.stop()
            self.topo.down()

    # ---- time ---------------------------------------------------------------------------
    def now(self) -> float:
        return time.monotonic() - self.t0

    def event(self, what: str) -> None:
        t = round(self.now(), 3) if self.t0 else None
        self.events.append({"t": t, "what": what})
        self.log(f"    t={t if t is not None else '-'}: {what}")

    def begin(self, ping_s: float, linger_s: float = 8.0, lead_s: float = 1.0) -> None:
        """Time zero is `lead_s` from now; starts the traffic server and the pinger."""
        self.t0 = time.monotonic() + lead_s
        self.server = self.topo.popen("srv", [PY, str(TRAFFIC), "server", "--port", str(PORT),
                                              "--t0", f"{self.t0:.6f}"],
                                      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                      stdin=subprocess.DEVNULL, text=True)
        deadline = time.monotonic() + 10
        while True:
            r = self.topo.run("srv", ["ss", "-Hltn", f"sport = :{PORT}"], check=False)
            if r.stdout.strip():
                break
            if time.monotonic() > deadline:
                raise RuntimeError("traffic server did not start")
            time.sleep(0.05)
        while time.monotonic() < self.t0:
            time.sleep(0.01)
        self.ping = self.topo.popen("phone", [PY, str(TRAFFIC), "ping", "--dst", topo_mod.SRV4,
                                              "--t0", f"{self.t0:.6f}", "--duration",
                                              str(ping_s), "--linger", str(linger_s)],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def at(self, t: float, fn, *args) -> None:
        self.schedule.append((t, fn, args))

    def run_schedule(self) -> None:
        for t, fn, args in sorted(self.schedule, key=lambda e: e[0]):
            delay = self.t0 + t - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            fn(*args)
        self.schedule.clear()

    # ---- traffic ------------------------------------------------------------------------
    def bulk(self, tag: str, direction: str, duration: float, phone: str = "phone",
             cc: str | None = None) -> None:
        """A bulk TCP flow from `phone`: `up` (the phone sends) or `down` (the server
        sends) for `duration` seconds. The upload uses the phone's congestion control
        (`cc`, default the topology's); a download always the server's (CUBIC)."""
        cmd = [PY, str(TRAFFIC), "bulk", "--dst", topo_mod.SRV4, "--port", str(PORT),
               "--t0", f"{self.t0:.6f}", "--dir", direction, "--tag", tag,
               "--duration", str(duration)]
        if direction == "up":
            cmd += ["--cc", cc or self.cc_phone]
        p = self.topo.popen(phone, cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
        self.clients[tag] = (p, {"kind": "bulk", "dir": direction, "phone": phone,
                                 "cc": (cc or self.cc_phone) if direction == "up" else "cubic"})
        self.event(f"{tag}: {direction}load from {phone} starts ({duration:g} s)")

    def stop_flow(self, tag: str) -> None:
        p, _ = self.clients[tag]
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
        self.event(f"{tag}: stopped")

    def web(self, tag: str, start: float, stop: float, timeout: float, gap: float = 1.0,
            pages: str = "single,multi") -> None:
        cmd = [PY, str(TRAFFIC), "web", "--dst", topo_mod.SRV4, "--port", str(PORT),
               "--t0", f"{self.t0:.6f}", "--start", str(start), "--stop", str(stop),
               "--timeout", str(timeout), "--gap", str(gap), "--pages", pages]
        p = self.topo.popen("phone", cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
        self.clients[tag] = (p, {"kind": "web"})
        self.event(f"{tag}: page loads {pages} from t={start:g} to {stop:g}")

    # ---- changes of the link --------------------------------------------------------------
    def set_uplink_rate(self, rate_bps: int) -> None:
        """Changes the uplink bottleneck's rate at run time (TBF `change`: the queue and
        its contents stay; same byte limit)."""
        if self.engine != "tbf":
            raise RuntimeError("run-time rate changes need engine tbf")
        self.topo.run("bs", ["tc", "qdisc", "change", "dev", self.topo.iface("bs", "gw"), "root",
                             "handle", "1:", "tbf", "rate", f"{rate_bps}bit", "burst",
                             str(_tbf_burst(rate_bps)), "limit",
                             str(self.link.up.buffer_bytes or 100_000_000)])
        self.event(f"uplink rate -> {rate_bps / 1e6:g} Mbit/s")

    def set_extra_delay(self, on: bool) -> None:
        """Adds (on) or removes the extra one-way delay (both directions), e.g. a handover
        to a longer path: every packet forwarded by bs passes a second rsfc-linkem delay
        line in mangle PREROUTING. Packets already in it leave on time when it is removed."""
        up_q, down_q = EXTRA_DELAY_QUEUES
        op = "-A" if on else "-D"
        ins = ["phone0"] + (["phone1"] if self.phones == 2 else [])
        for dev in ins:
            self.topo.run("bs", ["iptables-legacy", "-t", "mangle", op, "PREROUTING", "-i", dev,
                                 "-j", "NFQUEUE", "--queue-num", str(up_q)])
        self.topo.run("bs", ["iptables-legacy", "-t", "mangle", op, "PREROUTING", "-i", "gw0",
                             "-j", "NFQUEUE", "--queue-num", str(down_q)])
        self.event(f"base RTT {'+' if on else '-'}{2 * self.extra_delay_ms:g} ms")

    # ---- results ------------------------------------------------------------------------
    def finish(self, timeout: float = 240) -> dict:
        """Waits for the flows and the pinger (at most `timeout` s), stops the daemon and
        the server and returns the test's result (see lab/measure.py for its numbers)."""
        outs, ping_out = self._wait_clients(time.monotonic() + timeout)
        res = {"label": self.label, "policy": self.policy, "engine": self.engine,
               "t0_monotonic": self.t0, "linkem_start_monotonic": list(self.linkem_start),
               "link": self.link.to_dict(), "cc_phone": self.cc_phone,
               "phone_timestamps": self.phone_timestamps, "events": self.events,
               "flows": {}, "web": None, "ping": {}, "decisions": [], "errors": self.errors}
        res["linkem"] = self.shaping.linkem_stats() if self.shaping else []
        res["tc"] = self.shaping.tc_stats() if self.shaping else {}
        if self.capture:
            self._stop_capture()
            res["capture"] = str(self.capture_path)
        self._stop_daemon(res)
        server = self._stop_server()
        self._assemble_flows(res, outs, server)
        res["web_server"] = {k: server.get(k) for k in ("web_requests", "web_bytes")}
        try:
            res["ping"] = json.loads(ping_out or "{}")
        except json.JSONDecodeError:
            self.errors.append("ping: bad JSON")
        res["decisions"] = read_decisions(self.decision_log, self.t0)
        for e in self.errors:
            self.log(f"  ! {self.label} {self.policy}: {e}")
        return res

    def _wait_clients(self, deadline: float) -> tuple[dict[str, str], str]:
        """The clients' stdout by tag, and the pinger's."""
        outs = {}
        for tag, (p, meta) in self.clients.items():
            try:
                out, err = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                out, err = p.communicate()
                self.errors.append(f"{tag}: timed out")
            if p.returncode != 0:
                self.errors.append(f"{tag}: exit {p.returncode}: {(err or '')[-300:]}")
            outs[tag] = out
        ping_out = ""
        if self.ping is not None:
            try:
                ping_out, _ = self.ping.communicate(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.ping.kill()
                self.errors.append("ping: timed out")
        return outs, ping_out

    def _stop_daemon(self, res: dict) -> None:
        """The daemon's metrics into `res`, then stops it (which flushes the decision log)."""
        if self.daemon is None:
            return
        if not self.daemon.alive():
            self.errors.append(f"rsfcd died: {self.daemon.log_tail(5)}")
        else:
            try:
                m = self.daemon.metrics()
                res["daemon_metrics"] = {k: sum(v.values()) for k, v in m.items()}
                res["daemon_metrics_labeled"] = {
                    k: [[dict(ls), v] for ls, v in m[k].items()]
                    for k in ("rsfcd_windows_rewritten_total", "rsfcd_flows_unregulated_total",
                              "rsfcd_packets_total", "rsfcd_rsfc_flows", "rsfcd_downlink_flows")
                    if k in m}
            except Exception as e:  # noqa: BLE001 (diagnostics only)
                self.errors.append(f"metrics: {e}")
        self.daemon.stop()

    def _stop_server(self) -> dict:
        """Stops the traffic server; its report (lab/traffic.py's Server)."""
        server_out = ""
        if self.server is not None and self.server.poll() is None:
            self.server.send_signal(signal.SIGTERM)
            try:
                server_out, _ = self.server.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                self.server.kill()
                self.errors.append("traffic server: no output")
        try:
            return json.loads(server_out or "{}")
        except json.JSONDecodeError:
            self.errors.append("traffic server: bad JSON")
            return {}

    def _assemble_flows(self, res: dict, outs: dict[str, str], server: dict) -> None:
        """res["flows"] (each bulk flow with its sender's samples, from the client or the
        server side) and res["web"]."""
        by_tag = {c.get("tag"): c for c in server.get("conns", [])
                  if c.get("kind") in ("up", "down")}
        for tag, (p, meta) in self.clients.items():
            try:
                out = json.loads(outs.get(tag) or "{}")
            except json.JSONDecodeError:
                self.errors.append(f"{tag}: bad JSON")
                continue
            if meta["kind"] == "web":
                res["web"] = out
                continue
            if out.get("error"):
                self.errors.append(f"{tag}: {out['error']}")
            srv = by_tag.get(tag, {})
            flow = dict(meta, local=out.get("local"), t_start=out.get("t_start"),
                        t_end=out.get("t_end"))
            if meta["dir"] == "up":
                flow["send_samples"] = out.get("send_samples", [])
                flow["recv_samples"] = srv.get("recv_samples", [])
            else:
                flow["send_samples"] = srv.get("send_samples", [])
                flow["recv_samples"] = out.get("recv_samples", [])
            if not flow["send_samples"]:
                self.errors.append(f"{tag}: no sender samples")
            res["flows"][tag] = flow


def read_decisions(path: Path, t0: float) -> list:
    """rsfcd's decision log (uplink knob): [t, subscriber_port, state, t_buff_ms,
    window_bytes, rate_bps, rtt_ms, rtt_min_ms, subscriber, target_bytes]. window_bytes is
    the window advertised on the step's ACK (after the right-edge hold and the scale);
    target_bytes the controller's target (what observe would apply; 0 = no clamp)."""
    out = []
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        try:
            r = json.loads(line)
        except json.JSONDecodeError:
            continue
        if r.get("knob") != "uplink":
            continue
        out.append([round(r["time_ns"] / 1e9 - t0, 4), r["subscriber_port"], r["state"],
                    r["t_buff_ms"], r["window_bytes"], r["rate_bps"], r["rtt_ms"],
                    r["rtt_min_ms"], r["subscriber"], r.get("target_bytes")])
    return out
