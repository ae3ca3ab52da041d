#!/usr/bin/python3
"""Lab experiments beyond the bulk table of lab/scenarios.py: capacity traces, web page loads
under an upload, fairness, changing conditions and mixed phone stacks. Each compares `off`,
the best `static` clamp (several sizes run, the best picked by the rule the scenario states)
and `rsfc` in one run, prints a table and writes JSON (and plots) into lab/out/.

    sudo /usr/bin/python3 lab/experiments.py trace       # ~9 min
    sudo /usr/bin/python3 lab/experiments.py web         # ~9 min
    sudo /usr/bin/python3 lab/experiments.py fairness    # ~8 min
    sudo /usr/bin/python3 lab/experiments.py changes     # ~10 min
    sudo /usr/bin/python3 lab/experiments.py stacks      # ~10 min
    sudo /usr/bin/python3 lab/experiments.py uploads     # ~9 min
    sudo /usr/bin/python3 lab/experiments.py SCENARIO --duration 120   # longer tests
    /usr/bin/python3 lab/experiments.py --show lab/out/trace-....json  # table of a saved run

The lab is lab/topo.py's (phone ── bs ── gw ── srv namespaces, rsfcd on gw) with the link of
lab/shaping.py, the rsfcd configs of lab/scenarios.py's policy_config() and lab/pinger.py's
RTT samples. Traffic is lab/traffic.py (real kernel TCP; throughput from the sender's
tcp_info `delivered` count, SACK-aware, so that phases and windows of a test are exact).
Every test runs on a fresh topology. rsfcd writes its decision log (rsfc.decision_log)
for the rsfc policies; the JSON keeps it with every sample.
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import topo as topo_mod  # noqa: E402
from measure import fmt, flow_mbps, jain, payload_fraction, percentile, rtt_stats  # noqa: E402
from policies import check_policy, policy_config, wants_decision_log, with_decision_log  # noqa: E402,E501
from scenarios import OUT_DIR, SCENARIOS  # noqa: E402
from shaping import UPLINK_QUEUE, Direction, LinkSpec, Shaping, linkem_binary  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
LAB = REPO / "lab"
TRAFFIC = LAB / "traffic.py"
PY = "/usr/bin/python3"
PORT = 5300
EXTRA_DELAY_QUEUES = (12, 13)  # bs-namespace NFQUEUE numbers of the delay-step element


# ---- capacity traces -------------------------------------------------------------------
def traces_dir() -> Path:
    """lab/traces in the repository (RSFC_TRACES_DIR overrides). Raises if missing."""
    env = os.environ.get("RSFC_TRACES_DIR")
    d = Path(env) if env else LAB / "traces"
    if not d.is_dir():
        raise FileNotFoundError(f"capacity traces not found at {d} (RSFC_TRACES_DIR overrides)")
    return d


def trace_path(name: str, direction: str) -> Path:
    p = traces_dir() / f"{name}.{direction}"
    if not p.is_file():
        raise FileNotFoundError(f"trace {p} missing")
    return p


class TraceFile:
    """A Mahimahi trace (ms offset per 1500-byte delivery opportunity; repeats with the
    period of its last offset), as rsfc-linkem plays it from its start time."""

    def __init__(self, offsets_ms: list[int], name: str = ""):
        if not offsets_ms or offsets_ms[-1] <= 0:
            raise ValueError(f"empty trace {name}")
        self.offsets = offsets_ms
        self.period_ms = offsets_ms[-1]
        self.name = name

    @classmethod
    def load(cls, path: Path) -> "TraceFile":
        return cls([int(x) for x in Path(path).read_text().split()], Path(path).name)

    def count_before(self, t_ms: float) -> int:
        """Opportunities at times < t_ms (t_ms >= 0) since the trace started."""
        q, r = divmod(t_ms, self.period_ms)
        return int(q) * len(self.offsets) + bisect.bisect_left(self.offsets, r)

    def opportunities(self, a_ms: float, b_ms: float) -> int:
        return self.count_before(max(0.0, b_ms)) - self.count_before(max(0.0, a_ms))

    def mbps(self, a_ms: float, b_ms: float, bytes_per_opp: int = 1500) -> float:
        return self.opportunities(a_ms, b_ms) * bytes_per_opp * 8 / ((b_ms - a_ms) * 1e3)

    def mean_mbps(self) -> float:
        return self.mbps(0, self.period_ms)

    def rotated(self, offset_ms: int) -> "TraceFile":
        """The same trace started `offset_ms` into it."""
        x = offset_ms % self.period_ms
        first = [v - x for v in self.offsets if v > x]
        rest = [v + self.period_ms - x for v in self.offsets if v <= x]
        return TraceFile(first + rest, f"{self.name}@{x}ms")

    def write(self, path: Path) -> Path:
        path.write_text("".join(f"{v}\n" for v in self.offsets))
        return path


def representative_offset(up: TraceFile, down: TraceFile, duration_s: float,
                          warmup_s: float) -> int:
    """Where to start a pair of traces (recorded together) for a test of `duration_s`: the
    multiple of 10 s whose measured window [warmup, duration] offers, in both directions,
    the capacity closest to the whole trace's mean (sum of relative errors). A window at
    the start of a drive can be an outage (EV-DO's downlink is 0.05 Mbit/s for its first
    40 s), which would measure nothing."""
    best, best_err = 0, None
    span = min(up.period_ms, down.period_ms) - duration_s * 1000
    for x in range(0, max(1, int(span)), 10_000):
        a, b = x + warmup_s * 1000, x + duration_s * 1000
        err = abs(up.mbps(a, b) / up.mean_mbps() - 1) + abs(down.mbps(a, b) / down.mean_mbps() - 1)
        if best_err is None or err < best_err - 1e-9:
            best, best_err = x, err
    return best


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
                 workdir: Path | None = None, log=print):
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
        self.daemon = topo_mod.Daemon(self.topo, cfg)
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

    def teardown(self) -> None:
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
        deadline = time.monotonic() + timeout
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
        res = {"label": self.label, "policy": self.policy, "engine": self.engine,
               "t0_monotonic": self.t0, "linkem_start_monotonic": list(self.linkem_start),
               "link": self.link.to_dict(), "cc_phone": self.cc_phone,
               "phone_timestamps": self.phone_timestamps, "events": self.events,
               "flows": {}, "web": None, "ping": {}, "decisions": [], "errors": self.errors}
        res["linkem"] = self.shaping.linkem_stats() if self.shaping else []
        res["tc"] = self.shaping.tc_stats() if self.shaping else {}
        if self.daemon is not None:
            if not self.daemon.alive():
                self.errors.append(f"rsfcd died: {self.daemon.log_tail(5)}")
            else:
                try:
                    m = self.daemon.metrics()
                    res["daemon_metrics"] = {k: sum(v.values()) for k, v in m.items()}
                    res["daemon_metrics_labeled"] = {
                        k: [[dict(ls), v] for ls, v in m[k].items()]
                        for k in ("rsfcd_windows_rewritten_total", "rsfcd_flows_unregulated_total",
                                  "rsfcd_packets_total") if k in m}
                except Exception as e:  # noqa: BLE001 (diagnostics only)
                    self.errors.append(f"metrics: {e}")
            self.daemon.stop()  # flushes the decision log
        server_out = ""
        if self.server is not None and self.server.poll() is None:
            self.server.send_signal(signal.SIGTERM)
            try:
                server_out, _ = self.server.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                self.server.kill()
                self.errors.append("traffic server: no output")
        # Assemble.
        server = {}
        try:
            server = json.loads(server_out or "{}")
        except json.JSONDecodeError:
            self.errors.append("traffic server: bad JSON")
        by_tag = {c.get("tag"): c for c in server.get("conns", []) if c.get("kind") in ("up", "down")}
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
        res["web_server"] = {k: server.get(k) for k in ("web_requests", "web_bytes")}
        try:
            res["ping"] = json.loads(ping_out or "{}")
        except json.JSONDecodeError:
            self.errors.append("ping: bad JSON")
        res["decisions"] = read_decisions(self.decision_log, self.t0)
        for e in self.errors:
            self.log(f"  ! {self.label} {self.policy}: {e}")
        return res


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


# ---- policies and tables ---------------------------------------------------------------
_EXTRA_POLICIES: list[str] = []


def policies_for(statics: list[int]) -> list[str]:
    """off, the static sizes, rsfc, then --extra-policies (e.g. rsfc+drwa, rsfc[k=v;...])."""
    return ["off"] + [f"static:{s}" for s in statics] + ["rsfc"] + _EXTRA_POLICIES


def pick_best_static(scores: dict[str, float | None], tiebreak: dict[str, float] | None = None
                     ) -> str | None:
    """The static policy with the highest score (ties within 1 %: the lower tiebreak)."""
    cands = [(p, s) for p, s in scores.items() if p.startswith("static:") and s is not None]
    if not cands:
        return None
    top = max(s for _, s in cands)
    near = [p for p, s in cands if s >= top - 0.01 * abs(top)]
    if tiebreak:
        near.sort(key=lambda p: tiebreak.get(p, float("inf")))
    else:
        near.sort(key=lambda p: -scores[p])
    return near[0]


def table(title: str, columns: list[str], rows: list[tuple[str, list[str]]],
          best: str | None = None) -> str:
    heads = [c + ("*" if c == best else "") for c in columns]
    w0 = max(len(r[0]) for r in rows) + 2
    ws = [max(11, len(h) + 2, *(len(r[1][i]) + 2 for r in rows)) for i, h in enumerate(heads)]
    lines = [title, "".ljust(w0) + "".join(h.rjust(w) for h, w in zip(heads, ws))]
    for label, vals in rows:
        lines.append(label.ljust(w0) + "".join(v.rjust(w) for v, w in zip(vals, ws)))
    return "\n".join(lines)


def _pctf(v):
    return "-" if v is None else f"{100 * v:.0f}%"


def _ms(v):
    return fmt(v, digits=0)


def _rtt(st):
    return f"{_ms(st['p50'])}/{_ms(st['p95'])}"


# ---- scenario: trace ----------------------------------------------------------------------
TRACE_NAMES = ["Verizon-LTE-short", "TMobile-UMTS-driving", "Verizon-EVDO-driving"]


def run_trace(a, log) -> dict:
    """Download + concurrent upload over each shipped trace (uplink trace on the uplink,
    downlink trace on the downlink, rsfc-linkem engine), deep drop-tail buffers."""
    D, W = a.duration or 35.0, a.warmup or 10.0
    policies = policies_for(a.statics or [32768, 131072])
    up_buf, down_buf, rtt = 1_000_000, 512_000, 50.0
    wd = Path(a.workdir) / "trace"
    wd.mkdir(parents=True, exist_ok=True)
    out = {"scenario": "trace", "duration_s": D, "warmup_s": W, "policies": policies,
           "buffers": {"up": up_buf, "down": down_buf}, "base_rtt_ms": rtt,
           "rule": "best static = highest min(download/capacity, upload/capacity) "
                   "(the direction it serves worse); ties within 1 %: lower RTT p95",
           "traces": {}}
    names = a.traces.split(",") if a.traces else TRACE_NAMES
    for name in names:
        up, down = TraceFile.load(trace_path(name, "up")), TraceFile.load(trace_path(name, "down"))
        off_ms = (int(a.trace_offset * 1000) if a.trace_offset is not None
                  else representative_offset(up, down, D, W))
        up_r, down_r = up.rotated(off_ms), down.rotated(off_ms)
        up_file = up_r.write(wd / f"{name}.up")
        down_file = down_r.write(wd / f"{name}.down")
        link = LinkSpec(up=Direction(buffer_bytes=up_buf, delay_ms=rtt / 2, trace=str(up_file)),
                        down=Direction(buffer_bytes=down_buf, delay_ms=rtt / 2,
                                       trace=str(down_file)))
        entry = {"offset_s": off_ms / 1000, "tests": {}, "summary": {},
                 "mean_up_mbps": up.mean_mbps(), "mean_down_mbps": down.mean_mbps()}
        log(f"trace {name} from {off_ms / 1000:g} s (mean up {up.mean_mbps():.2f} / down "
            f"{down.mean_mbps():.2f} Mbit/s)")
        for policy in policies:
            t_start = time.monotonic()
            with Bench(f"trace-{name}", link, policy, engine="linkem", workdir=wd, log=log) as b:
                b.begin(ping_s=D, linger_s=15)
                b.at(0, b.bulk, "dl", "down", D)
                b.at(0, b.bulk, "ul", "up", D)
                b.run_schedule()
                res = b.finish()
            # Capacity of the measured window, in the link's own time (trace time zero =
            # linkem's start; a delivery at the sender's ACK is one base RTT after it left
            # the bottleneck: the shift is small next to the window).
            z = (sum(res["linkem_start_monotonic"]) / 2 - res["t0_monotonic"])
            lo, hi = (W - z) * 1000 - rtt, (D - z) * 1000 - rtt
            eff = payload_fraction(True, "linkem")
            cap_up = up_r.mbps(lo, hi) * eff
            cap_down = down_r.mbps(lo, hi) * eff
            dl = flow_mbps(res["flows"].get("dl", {}), W, D)
            ul = flow_mbps(res["flows"].get("ul", {}), W, D)
            st = rtt_stats(res, W, D)
            s = {"dl_mbps": dl, "ul_mbps": ul, "cap_down_mbps": cap_down, "cap_up_mbps": cap_up,
                 "dl_fraction": dl / cap_down if dl is not None and cap_down else None,
                 "ul_fraction": ul / cap_up if ul is not None and cap_up else None,
                 "rtt_p50_ms": st["p50"], "rtt_p95_ms": st["p95"], "ping_lost": st["lost"],
                 "errors": res["errors"]}
            s["score"] = (min(s["dl_fraction"], s["ul_fraction"])
                          if s["dl_fraction"] is not None and s["ul_fraction"] is not None
                          else None)
            entry["tests"][policy] = res
            entry["summary"][policy] = s
            log(f"  {name} {policy:>14}: dl {fmt(dl)} ({_pctf(s['dl_fraction'])}) ul {fmt(ul)} "
                f"({_pctf(s['ul_fraction'])}) Mbit/s, RTT {_rtt(st)} ms "
                f"({time.monotonic() - t_start:.0f} s)")
        entry["best_static"] = pick_best_static(
            {p: v["score"] for p, v in entry["summary"].items()},
            {p: v["rtt_p95_ms"] or 1e9 for p, v in entry["summary"].items()})
        out["traces"][name] = entry
    return out


def format_trace(out: dict) -> str:
    parts = [f"scenario trace: download + upload over capacity traces, buffers up "
             f"{out['buffers']['up'] // 1000} KB / down {out['buffers']['down'] // 1000} KB, base "
             f"RTT {out['base_rtt_ms']:g} ms, {out['duration_s']:g} s per test, first "
             f"{out['warmup_s']:g} s skipped; {out['rule']} (*)"]
    for name, e in out["traces"].items():
        pol = list(e["summary"])
        S = e["summary"]
        any_s = S[pol[0]]
        rows = [
            ("download [Mbit/s]", [fmt(S[p]["dl_mbps"]) for p in pol]),
            ("  % of trace capacity", [_pctf(S[p]["dl_fraction"]) for p in pol]),
            ("upload [Mbit/s]", [fmt(S[p]["ul_mbps"]) for p in pol]),
            ("  % of trace capacity", [_pctf(S[p]["ul_fraction"]) for p in pol]),
            ("phone RTT p50/p95 [ms]", [f"{_ms(S[p]['rtt_p50_ms'])}/{_ms(S[p]['rtt_p95_ms'])}"
                                        for p in pol]),
        ]
        parts.append(table(f"\n{name} (from {e['offset_s']:g} s into the trace; capacity of "
                           f"the window, payload: down {any_s['cap_down_mbps']:.2f} / up "
                           f"{any_s['cap_up_mbps']:.2f} Mbit/s)", pol, rows, e["best_static"]))
    return "\n".join(parts)


# ---- scenario: web -------------------------------------------------------------------------
def _loads_stats(loads: list, page: str | None, timeout: float) -> dict:
    sel = [x for x in loads if page is None or x["page"] == page]
    secs = [x["seconds"] if x["complete"] else max(x["seconds"], timeout) for x in sel]
    return {"n": len(sel), "incomplete": sum(1 for x in sel if not x["complete"]),
            "p50": percentile(secs, 0.5), "p90": percentile(secs, 0.9),
            "max": max(secs) if secs else None}


def run_web(a, log) -> dict:
    """Repeated page loads (alternately one 320 KB object, and a 30 KB page + 29 x 10 KB
    objects over 6 connections) while the phone uploads, on the 3g link."""
    D, W = a.duration or 75.0, a.warmup or 6.0
    timeout = 45.0
    sc = SCENARIOS["3g"]
    policies = policies_for(a.statics or [32768, 65536])
    wd = Path(a.workdir) / "web"
    out = {"scenario": "web", "duration_s": D, "warmup_s": W, "timeout_s": timeout,
           "link": sc.link.to_dict(), "link_name": "3g", "policies": policies,
           "rule": "best static = lowest p90 page load time (both page kinds); ties within "
                   "1 %: higher upload goodput",
           "tests": {}, "summary": {}}

    def one(label, policy, upload):
        t_start = time.monotonic()
        with Bench(label, sc.link, policy, workdir=wd, log=log) as b:
            b.begin(ping_s=D + 10, linger_s=8)
            if upload:
                b.at(0, b.bulk, "ul", "up", D + 2 * timeout)
            b.at(0, b.web, "web", W, D, timeout)
            b.run_schedule()
            # The upload runs until the last page load is done.
            web_p, _ = b.clients["web"]
            try:
                web_p.wait(timeout=D + 2 * timeout)
            except subprocess.TimeoutExpired:
                pass
            t_web_end = b.now()
            if upload:
                b.stop_flow("ul")
            res = b.finish()
        loads = (res.get("web") or {}).get("loads", [])
        s = {"all": _loads_stats(loads, None, timeout),
             "single": _loads_stats(loads, "single", timeout),
             "multi": _loads_stats(loads, "multi", timeout),
             "ul_mbps": flow_mbps(res["flows"]["ul"], W, t_web_end) if upload else None,
             "rtt": rtt_stats(res, W, t_web_end), "errors": res["errors"]}
        log(f"  web {policy:>14}{'' if upload else ' (no upload)'}: single p50/p90 "
            f"{fmt(s['single']['p50'])}/{fmt(s['single']['p90'])} s, multi "
            f"{fmt(s['multi']['p50'])}/{fmt(s['multi']['p90'])} s (n={s['all']['n']}), "
            f"upload {fmt(s['ul_mbps'])} Mbit/s, RTT {_rtt(s['rtt'])} ms "
            f"({time.monotonic() - t_start:.0f} s)")
        return res, s

    res, s = one("web-alone", "off", upload=False)
    out["tests"]["alone"], out["summary"]["alone"] = res, s
    for policy in policies:
        res, s = one("web", policy, upload=True)
        out["tests"][policy], out["summary"][policy] = res, s
    out["best_static"] = pick_best_static(
        {p: -v["all"]["p90"] if v["all"]["p90"] is not None else None
         for p, v in out["summary"].items() if p != "alone"},
        {p: -(v["ul_mbps"] or 0) for p, v in out["summary"].items() if p != "alone"})
    return out


def format_web(out: dict) -> str:
    S = out["summary"]
    pol = ["alone"] + out["policies"]
    head = [("no upload" if p == "alone" else p) for p in pol]

    def cell(p, page, k):
        st = S[p][page]
        v = fmt(st[k])
        return v if not st["incomplete"] or k == "p50" and st["p50"] < out["timeout_s"] else (
            ">" + v if st[k] is not None and st[k] >= out["timeout_s"] else v)

    rows = []
    for page, label in (("single", "1 x 320 KB"), ("multi", "30 objects, 6 conns")):
        rows.append((f"{label}: loads (incomplete)",
                     [f"{S[p][page]['n']} ({S[p][page]['incomplete']})" for p in pol]))
        rows.append(("  load time p50/p90 [s]",
                     [f"{cell(p, page, 'p50')}/{cell(p, page, 'p90')}" for p in pol]))
    rows.append(("upload [Mbit/s]", [fmt(S[p]["ul_mbps"]) for p in pol]))
    rows.append(("phone RTT p50/p95 [ms]", [_rtt(S[p]["rtt"]) for p in pol]))
    best = out.get("best_static")
    return table(f"scenario web: page loads while the phone uploads, 3g link (up 2 Mbit/s 1 MiB, "
                 f"down 7.2 Mbit/s 256 KiB, 40 ms); loads from {out['warmup_s']:g} s to "
                 f"{out['duration_s']:g} s, {out['timeout_s']:g} s timeout; {out['rule']} (*)",
                 head, rows, best)


# ---- scenario: fairness -------------------------------------------------------------------
def run_fairness(a, log) -> dict:
    """Two competing uploads on the 3g link's uplink: (a) both from one phone, (b) one from
    each of two phones behind the same bottleneck; the second starts 3 s after the first."""
    D, W = a.duration or 40.0, a.warmup or 12.0
    sc = SCENARIOS["3g"]
    policies = policies_for(a.statics or [32768, 65536])
    wd = Path(a.workdir) / "fairness"
    out = {"scenario": "fairness", "duration_s": D, "warmup_s": W, "link": sc.link.to_dict(),
           "link_name": "3g", "policies": policies,
           "rule": "best static = highest mean over (a) and (b) of Jain index x efficiency",
           "tests": {}, "summary": {}}
    t_start = time.monotonic()
    with Bench("fair-single", sc.link, "off", workdir=wd, log=log) as b:
        b.begin(ping_s=D, linger_s=8)
        b.at(0, b.bulk, "ul1", "up", D)
        b.run_schedule()
        res = b.finish()
    single = flow_mbps(res["flows"]["ul1"], W, D)
    out["tests"]["single"] = res
    out["single_tcp_mbps"] = single
    log(f"  fairness single TCP upload (off): {fmt(single)} Mbit/s "
        f"({time.monotonic() - t_start:.0f} s)")
    for policy in policies:
        out["tests"][policy] = {}
        for case, phones in (("one-phone", 1), ("two-phones", 2)):
            t_start = time.monotonic()
            with Bench(f"fair-{case}", sc.link, policy, phones=phones, workdir=wd, log=log) as b:
                b.begin(ping_s=D, linger_s=8)
                b.at(0, b.bulk, "ul1", "up", D, "phone")
                b.at(3, b.bulk, "ul2", "up", D - 3, "phone2" if phones == 2 else "phone")
                b.run_schedule()
                res = b.finish()
            out["tests"][policy][case] = res
            summarize_fairness(out)
            s = out["summary"][policy][case]
            log(f"  fairness {case:>10} {policy:>14}: {fmt(s['r1_mbps'])} + "
                f"{fmt(s['r2_mbps'])} Mbit/s, Jain {fmt(s['jain'], digits=3)}, efficiency "
                f"{fmt(s['efficiency'])}, RTT {_ms(s['rtt_p50_ms'])}/{_ms(s['rtt_p95_ms'])} ms "
                f"({time.monotonic() - t_start:.0f} s)")
    return out


def summarize_fairness(out: dict) -> None:
    """out["summary"], out["scores"], out["best_static"] from out["tests"] (--recompute)."""
    W, D = out["warmup_s"], out["duration_s"]
    single = flow_mbps(out["tests"]["single"]["flows"]["ul1"], W, D)
    out["single_tcp_mbps"] = single
    out["summary"] = {}
    for policy, cases in out["tests"].items():
        if policy == "single":
            continue
        out["summary"][policy] = {}
        for case, res in cases.items():
            r1 = flow_mbps(res["flows"].get("ul1", {}), W, D)
            r2 = flow_mbps(res["flows"].get("ul2", {}), W, D)
            j = jain([r1, r2])
            eff = (r1 + r2) / single if r1 is not None and r2 is not None and single else None
            st = rtt_stats(res, W, D)
            out["summary"][policy][case] = {
                "r1_mbps": r1, "r2_mbps": r2, "jain": j, "efficiency": eff,
                "rtt_p50_ms": st["p50"], "rtt_p95_ms": st["p95"], "errors": res["errors"]}
    _score_cases(out, lambda case, c: None if c["jain"] is None or c["efficiency"] is None
                 else c["jain"] * c["efficiency"])


def _score_cases(out: dict, score) -> None:
    """out["scores"]: per policy the mean of score(case, summary) over its cases (None if
    any case has none); out["best_static"] by pick_best_static."""
    scores = {}
    for p, cases in out["summary"].items():
        v = [score(case, c) for case, c in cases.items()]
        scores[p] = sum(v) / len(v) if v and None not in v else None
    out["scores"] = scores
    out["best_static"] = pick_best_static(scores)


def format_fairness(out: dict) -> str:
    S = out["summary"]
    pol = out["policies"]
    rows = []
    for case, label in (("one-phone", "(a) one phone"), ("two-phones", "(b) two phones")):
        rows.append((f"{label}: R1 + R2 [Mbit/s]",
                     [f"{fmt(S[p][case]['r1_mbps'])}+{fmt(S[p][case]['r2_mbps'])}" for p in pol]))
        rows.append(("  Jain index", [fmt(S[p][case]["jain"], digits=3) for p in pol]))
        rows.append(("  efficiency (R1+R2)/R_single", [fmt(S[p][case]["efficiency"]) for p in pol]))
        rows.append(("  phone RTT p50/p95 [ms]",
                     [f"{_ms(S[p][case]['rtt_p50_ms'])}/{_ms(S[p][case]['rtt_p95_ms'])}"
                      for p in pol]))
    return table(f"scenario fairness: two uploads (the second starts 3 s later), 3g uplink "
                 f"2 Mbit/s 1 MiB; window {out['warmup_s']:g}-{out['duration_s']:g} s; "
                 f"R_single = one unregulated upload = {fmt(out['single_tcp_mbps'])} Mbit/s; "
                 f"{out['rule']} (*)", pol, rows, out.get("best_static"))


# ---- scenario: uploads ----------------------------------------------------------------------
N_UPLOADS = 4


def run_uploads(a, log) -> dict:
    """Several uploads from one phone (a photo backup's parallel connections), started 0.5 s
    apart into the same uplink buffer: (a) alone, (b) with a download. Per-subscriber state
    (rsfc.per_subscriber) is what this measures."""
    D, W = a.duration or 40.0, a.warmup or 10.0
    sc = SCENARIOS["3g"]
    policies = policies_for(a.statics or [32768, 65536])
    wd = Path(a.workdir) / "uploads"
    out = {"scenario": "uploads", "duration_s": D, "warmup_s": W, "link": sc.link.to_dict(),
           "link_name": "3g", "policies": policies, "uploads": N_UPLOADS,
           "rule": "best static = highest mean over (a) and (b) of Jain index x "
                   "min(uploads/R_single, download/D_alone (b only))",
           "tests": {}, "summary": {}}
    base = {}
    for tag, direction in (("ul", "up"), ("dl", "down")):
        t_start = time.monotonic()
        with Bench(f"uploads-single-{tag}", sc.link, "off", workdir=wd, log=log) as b:
            b.begin(ping_s=D, linger_s=8)
            b.at(0, b.bulk, tag, direction, D)
            b.run_schedule()
            res = b.finish()
        base[tag] = flow_mbps(res["flows"][tag], W, D)
        out["tests"][f"single-{tag}"] = res
        log(f"  uploads single {direction}load (off): {fmt(base[tag])} Mbit/s "
            f"({time.monotonic() - t_start:.0f} s)")
    for policy in policies:
        out["tests"][policy] = {}
        for case in ("alone", "download"):
            t_start = time.monotonic()
            with Bench(f"uploads-{case}", sc.link, policy, workdir=wd, log=log) as b:
                b.begin(ping_s=D, linger_s=8)
                if case == "download":
                    b.at(0, b.bulk, "dl", "down", D)
                for i in range(N_UPLOADS):
                    b.at(0.5 * i, b.bulk, f"ul{i + 1}", "up", D - 0.5 * i)
                b.run_schedule()
                res = b.finish()
            out["tests"][policy][case] = res
            summarize_uploads(out)
            s = out["summary"][policy][case]
            log(f"  uploads {case:>8} {policy:>14}: uploads {fmt(s['upload_total_mbps'])} "
                f"Mbit/s, Jain {fmt(s['jain'], digits=3)}, download {fmt(s['download_mbps'])}, "
                f"RTT {_ms(s['rtt_p50_ms'])}/{_ms(s['rtt_p95_ms'])} ms "
                f"({time.monotonic() - t_start:.0f} s)")
    return out


def summarize_uploads(out: dict) -> None:
    """out["summary"], out["scores"], out["best_static"] from out["tests"] (--recompute)."""
    W, D, n = out["warmup_s"], out["duration_s"], out["uploads"]
    base = {tag: flow_mbps(out["tests"][f"single-{tag}"]["flows"][tag], W, D)
            for tag in ("ul", "dl")}
    out["single_upload_mbps"], out["download_alone_mbps"] = base["ul"], base["dl"]
    out["summary"] = {}
    for policy, cases in out["tests"].items():
        if policy.startswith("single-"):
            continue
        out["summary"][policy] = {}
        for case, res in cases.items():
            rates = [flow_mbps(res["flows"].get(f"ul{i + 1}", {}), W, D) for i in range(n)]
            total = sum(rates) if all(r is not None for r in rates) else None
            dl = flow_mbps(res["flows"].get("dl", {}), W, D) if case == "download" else None
            st = rtt_stats(res, W, D)
            out["summary"][policy][case] = {
                "upload_mbps": rates, "upload_total_mbps": total, "jain": jain(rates),
                "download_mbps": dl, "rtt_p50_ms": st["p50"], "rtt_p95_ms": st["p95"],
                "errors": res["errors"]}

    def score(case: str, c: dict) -> float | None:
        if c["jain"] is None or c["upload_total_mbps"] is None or not base["ul"]:
            return None
        share = c["upload_total_mbps"] / base["ul"]
        if case == "download":
            if c["download_mbps"] is None or not base["dl"]:
                return None
            share = min(share, c["download_mbps"] / base["dl"])
        return c["jain"] * share

    _score_cases(out, score)


def format_uploads(out: dict) -> str:
    S = out["summary"]
    pol = out["policies"]
    rows = []
    for case, label in (("alone", "(a) uploads alone"), ("download", "(b) with a download")):
        rows.append((f"{label}: sum [Mbit/s]",
                     [fmt(S[p][case]["upload_total_mbps"]) for p in pol]))
        rows.append(("  each [Mbit/s]", ["/".join(fmt(r) for r in S[p][case]["upload_mbps"])
                                         for p in pol]))
        rows.append(("  Jain index", [fmt(S[p][case]["jain"], digits=3) for p in pol]))
        if case == "download":
            rows.append(("  download [Mbit/s]", [fmt(S[p][case]["download_mbps"]) for p in pol]))
        rows.append(("  phone RTT p50/p95 [ms]",
                     [f"{_ms(S[p][case]['rtt_p50_ms'])}/{_ms(S[p][case]['rtt_p95_ms'])}"
                      for p in pol]))
    return table(f"scenario uploads: {out['uploads']} uploads from one phone, 0.5 s apart, "
                 f"3g link; window {out['warmup_s']:g}-{out['duration_s']:g} s; one upload "
                 f"alone {fmt(out['single_upload_mbps'])} Mbit/s, download alone "
                 f"{fmt(out['download_alone_mbps'])} Mbit/s; {out['rule']} (*)", pol, rows,
                 out.get("best_static"))


# ---- scenario: changes -----------------------------------------------------------------------
def run_changes(a, log) -> dict:
    """Changing conditions on the 3g link, download + upload: (1) uplink rate 2 -> 0.5 -> 2
    Mbit/s, (2) base RTT 40 -> 240 -> 40 ms, in thirds of the test; (3) an upload older than
    the daemon (rsfcd starts at a third of the test) and a new upload after it."""
    D, W = a.duration or 45.0, a.warmup or 8.0
    sc = SCENARIOS["3g"]
    link = sc.link
    policies = policies_for(a.statics or [32768, 65536])
    wd = Path(a.workdir) / "changes"
    t1, t2 = D / 3, 2 * D / 3
    low = 500_000
    extra = 100.0  # ms each way
    eff = payload_fraction(True, "tbf")
    out = {"scenario": "changes", "duration_s": D, "warmup_s": W, "link": link.to_dict(),
           "link_name": "3g", "policies": policies, "steps_s": [t1, t2],
           "rule": "best static = highest mean over the phases of (1) and (2) of "
                   "min(download/capacity, upload/capacity)",
           "tests": {}, "summary": {}}
    phases = [("p1", W, t1), ("p2", t1 + 2, t2), ("p3", t2 + 2, D)]
    for policy in policies:
        out["tests"][policy], out["summary"][policy] = {}, {}
        for case in ("rate", "delay"):
            t_start = time.monotonic()
            with Bench(f"changes-{case}", link, policy, workdir=wd, log=log,
                       extra_delay_ms=extra if case == "delay" else 0) as b:
                b.begin(ping_s=D, linger_s=20)
                b.at(0, b.bulk, "dl", "down", D)
                b.at(0, b.bulk, "ul", "up", D)
                if case == "rate":
                    b.at(t1, b.set_uplink_rate, low)
                    b.at(t2, b.set_uplink_rate, link.up.rate_bps)
                else:
                    b.at(t1, b.set_extra_delay, True)
                    b.at(t2, b.set_extra_delay, False)
                b.run_schedule()
                res = b.finish()
            s = {"phases": {}, "errors": res["errors"]}
            for ph, lo, hi in phases:
                up_rate = low if case == "rate" and ph == "p2" else link.up.rate_bps
                dl = flow_mbps(res["flows"].get("dl", {}), lo, hi)
                ul = flow_mbps(res["flows"].get("ul", {}), lo, hi)
                cap_ul, cap_dl = up_rate * eff / 1e6, link.down.rate_bps * eff / 1e6
                st = rtt_stats(res, lo, hi)
                s["phases"][ph] = {"window": [lo, hi], "dl_mbps": dl, "ul_mbps": ul,
                                   "cap_dl_mbps": cap_dl, "cap_ul_mbps": cap_ul,
                                   "dl_fraction": dl / cap_dl if dl is not None else None,
                                   "ul_fraction": ul / cap_ul if ul is not None else None,
                                   "rtt_p50_ms": st["p50"], "rtt_p95_ms": st["p95"]}
            out["tests"][policy][case] = res
            out["summary"][policy][case] = s
            log(f"  changes {case:>5} {policy:>14}: " + "; ".join(
                f"{ph} dl {fmt(v['dl_mbps'])} ul {fmt(v['ul_mbps'])} RTT "
                f"{_ms(v['rtt_p50_ms'])}/{_ms(v['rtt_p95_ms'])}" for ph, v in s["phases"].items())
                + f" ({time.monotonic() - t_start:.0f} s)")
    scores = {}
    for p, cases in out["summary"].items():
        v = [min(ph["dl_fraction"], ph["ul_fraction"]) for c in cases.values()
             for ph in c["phases"].values()
             if ph["dl_fraction"] is not None and ph["ul_fraction"] is not None]
        scores[p] = sum(v) / len(v) if v else None
    out["scores"] = scores
    out["best_static"] = best = pick_best_static(scores)
    # (3) The daemon starts under a running upload: off, the best static, rsfc.
    for policy in ["off"] + ([best] if best else []) + ["rsfc"]:
        t_start = time.monotonic()
        with Bench("changes-late", link, policy, workdir=wd, log=log,
                   daemon_at_start=False) as b:
            b.begin(ping_s=D, linger_s=8)
            b.at(0, b.bulk, "old", "up", D)
            b.at(t1, b.start_daemon)
            b.at(t1 + 5, b.bulk, "new", "up", D - t1 - 5)
            b.run_schedule()
            res = b.finish()
        old, new = res["flows"].get("old", {}), res["flows"].get("new", {})
        rew = [v for ls, v in res.get("daemon_metrics_labeled", {}).get(
            "rsfcd_windows_rewritten_total", []) if ls.get("direction") == "to_subscriber"]
        new_port = int(new["local"].rsplit(":", 1)[1]) if new.get("local") else None
        old_port = int(old["local"].rsplit(":", 1)[1]) if old.get("local") else None
        s = {"old_before_mbps": flow_mbps(old, W, t1),
             "old_after_mbps": flow_mbps(old, t1 + 1, t1 + 5),
             "old_with_new_mbps": flow_mbps(old, t1 + 10, D),
             "new_mbps": flow_mbps(new, t1 + 10, D),
             "rtt_before": rtt_stats(res, W, t1), "rtt_after": rtt_stats(res, t1 + 10, D),
             "unregulated_flows": res.get("daemon_metrics", {}).get(
                 "rsfcd_flows_unregulated_total"),
             "windows_rewritten_to_phone": sum(rew) if rew else 0,
             "decisions_old": sum(1 for d in res["decisions"] if d[1] == old_port),
             "decisions_new": sum(1 for d in res["decisions"] if d[1] == new_port),
             "errors": res["errors"]}
        out["tests"].setdefault(policy, {})["late"] = res
        out["summary"].setdefault(policy, {})["late"] = s
        log(f"  changes  late {policy:>14}: old {fmt(s['old_before_mbps'])} -> "
            f"{fmt(s['old_after_mbps'])} -> {fmt(s['old_with_new_mbps'])}, new "
            f"{fmt(s['new_mbps'])} Mbit/s, unregulated {s['unregulated_flows']}, decisions "
            f"old/new {s['decisions_old']}/{s['decisions_new']} "
            f"({time.monotonic() - t_start:.0f} s)")
    return out


def format_changes(out: dict) -> str:
    S = out["summary"]
    pol = out["policies"]
    t1, t2 = out["steps_s"]
    parts = [f"scenario changes: 3g link (up 2 Mbit/s 1 MiB, down 7.2 Mbit/s 256 KiB, 40 ms), "
             f"download + upload, steps at {t1:g} s and {t2:g} s; {out['rule']} (*)"]
    for case, title in (("rate", "(1) uplink rate 2 -> 0.5 -> 2 Mbit/s"),
                        ("delay", "(2) base RTT 40 -> 240 -> 40 ms")):
        rows = []
        for ph in ("p1", "p2", "p3"):
            any_ph = S[pol[0]][case]["phases"][ph]
            lo, hi = any_ph["window"]
            rows.append((f"{ph} [{lo:g}-{hi:g} s] download [Mbit/s]",
                         [f"{fmt(S[p][case]['phases'][ph]['dl_mbps'])} "
                          f"({_pctf(S[p][case]['phases'][ph]['dl_fraction'])})" for p in pol]))
            rows.append((f"  upload [Mbit/s] (cap {any_ph['cap_ul_mbps']:.2f})",
                         [f"{fmt(S[p][case]['phases'][ph]['ul_mbps'])} "
                          f"({_pctf(S[p][case]['phases'][ph]['ul_fraction'])})" for p in pol]))
            rows.append(("  phone RTT p50/p95 [ms]",
                         [f"{_ms(S[p][case]['phases'][ph]['rtt_p50_ms'])}/"
                          f"{_ms(S[p][case]['phases'][ph]['rtt_p95_ms'])}" for p in pol]))
        parts.append(table("\n" + title, pol, rows, out.get("best_static")))
    late = [p for p in pol if "late" in S.get(p, {})]
    if late:
        L = {p: S[p]["late"] for p in late}
        rows = [
            ("old upload before daemon [Mbit/s]", [fmt(L[p]["old_before_mbps"]) for p in late]),
            ("  right after it starts", [fmt(L[p]["old_after_mbps"]) for p in late]),
            ("  with the new upload", [fmt(L[p]["old_with_new_mbps"]) for p in late]),
            ("new upload [Mbit/s]", [fmt(L[p]["new_mbps"]) for p in late]),
            ("phone RTT p50/p95 before / after", [f"{_rtt(L[p]['rtt_before'])} / "
                                                  f"{_rtt(L[p]['rtt_after'])}" for p in late]),
            ("flows seen without handshake", [fmt(L[p]["unregulated_flows"], digits=0)
                                              for p in late]),
            ("decision records old / new", [f"{L[p]['decisions_old']}/{L[p]['decisions_new']}"
                                            for p in late]),
        ]
        parts.append(table(f"\n(3) rsfcd starts at {t1:g} s under a running upload; a new "
                           f"upload from {t1 + 5:g} s", late, rows, out.get("best_static")))
    return "\n".join(parts)


# ---- scenario: stacks ---------------------------------------------------------------------
STACKS = [("cubic", True), ("cubic", False), ("bbr", True), ("bbr", False)]


def run_stacks(a, log) -> dict:
    """Download + upload on the 3g link from phones with different stacks: CUBIC or BBR
    uploads, TCP timestamps on or off (the download is always the server's CUBIC)."""
    D, W = a.duration or 28.0, a.warmup or 10.0
    sc = SCENARIOS["3g"]
    policies = policies_for(a.statics or [32768, 65536])
    wd = Path(a.workdir) / "stacks"
    out = {"scenario": "stacks", "duration_s": D, "warmup_s": W, "link": sc.link.to_dict(),
           "link_name": "3g", "policies": policies,
           "rule": "best static per stack = highest min(download/capacity, upload/capacity); "
                   "ties within 1 %: lower RTT p95",
           "tests": {}, "summary": {}, "best_static": {}}
    for cc, ts in STACKS:
        variant = f"{cc}-{'ts' if ts else 'nots'}"
        eff = payload_fraction(ts, "tbf")
        cap_dl, cap_ul = sc.link.down.rate_bps * eff / 1e6, sc.link.up.rate_bps * eff / 1e6
        out["tests"][variant], out["summary"][variant] = {}, {}
        for policy in policies:
            t_start = time.monotonic()
            with Bench(f"stacks-{variant}", sc.link, policy, cc_phone=cc, phone_timestamps=ts,
                       workdir=wd, log=log) as b:
                b.begin(ping_s=D, linger_s=8)
                b.at(0, b.bulk, "dl", "down", D)
                b.at(0, b.bulk, "ul", "up", D)
                b.run_schedule()
                res = b.finish()
            dl = flow_mbps(res["flows"].get("dl", {}), W, D)
            ul = flow_mbps(res["flows"].get("ul", {}), W, D)
            st = rtt_stats(res, W, D)
            s = {"dl_mbps": dl, "ul_mbps": ul, "cap_dl_mbps": cap_dl, "cap_ul_mbps": cap_ul,
                 "dl_fraction": dl / cap_dl if dl is not None else None,
                 "ul_fraction": ul / cap_ul if ul is not None else None,
                 "rtt_p50_ms": st["p50"], "rtt_p95_ms": st["p95"], "errors": res["errors"]}
            s["score"] = (min(s["dl_fraction"], s["ul_fraction"])
                          if dl is not None and ul is not None else None)
            out["tests"][variant][policy] = res
            out["summary"][variant][policy] = s
            log(f"  stacks {variant:>10} {policy:>14}: dl {fmt(dl)} ul {fmt(ul)} Mbit/s, RTT "
                f"{_rtt(st)} ms ({time.monotonic() - t_start:.0f} s)")
        out["best_static"][variant] = pick_best_static(
            {p: v["score"] for p, v in out["summary"][variant].items()},
            {p: v["rtt_p95_ms"] or 1e9 for p, v in out["summary"][variant].items()})
    return out


def format_stacks(out: dict) -> str:
    parts = [f"scenario stacks: download (server CUBIC) + upload (phone's stack), 3g link; "
             f"{out['duration_s']:g} s per test, first {out['warmup_s']:g} s skipped; "
             f"{out['rule']} (*)"]
    for variant, S in out["summary"].items():
        pol = list(S)
        rows = [
            ("download [Mbit/s]", [f"{fmt(S[p]['dl_mbps'])} ({_pctf(S[p]['dl_fraction'])})"
                                   for p in pol]),
            ("upload [Mbit/s]", [f"{fmt(S[p]['ul_mbps'])} ({_pctf(S[p]['ul_fraction'])})"
                                 for p in pol]),
            ("phone RTT p50/p95 [ms]", [f"{_ms(S[p]['rtt_p50_ms'])}/{_ms(S[p]['rtt_p95_ms'])}"
                                        for p in pol]),
        ]
        parts.append(table(f"\nphone {variant}", pol, rows, out["best_static"].get(variant)))
    return "\n".join(parts)


# ---- main -------------------------------------------------------------------------------
RUNNERS = {"trace": (run_trace, format_trace), "web": (run_web, format_web),
           "fairness": (run_fairness, format_fairness), "changes": (run_changes, format_changes),
           "stacks": (run_stacks, format_stacks), "uploads": (run_uploads, format_uploads)}


def format_any(out: dict) -> str:
    return RUNNERS[out["scenario"]][1](out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    ap.add_argument("scenario", nargs="?", choices=sorted(RUNNERS))
    ap.add_argument("--duration", type=float, help="seconds per test (default per scenario)")
    ap.add_argument("--warmup", type=float, help="seconds skipped at the start of each test")
    ap.add_argument("--statics", help="static clamp sizes to try, bytes, comma-separated")
    ap.add_argument("--extra-policies",
                    help="more policies after rsfc, comma-separated (lab/scenarios.py's "
                         "policy_config: rsfc+drwa, rsfc[key=value;...], observe)")
    ap.add_argument("--traces", help=f"trace: names (default {','.join(TRACE_NAMES)})")
    ap.add_argument("--trace-offset", type=float,
                    help="trace: start the traces this many seconds in (default: the "
                         "representative window, see representative_offset)")
    ap.add_argument("--json", help="output file (default lab/out/<scenario>-<time>.json)")
    ap.add_argument("--workdir", default="/tmp/rsfc-lab4", help="logs, configs, decision logs")
    ap.add_argument("--no-plots", action="store_true", help="skip lab/plots.py")
    ap.add_argument("--show", metavar="JSON", help="print the table of a saved run")
    ap.add_argument("--recompute", action="store_true",
                    help="with --show: derive the summary from the saved samples again "
                         "(fairness, uploads)")
    a = ap.parse_args(argv)
    if a.show:
        out = json.loads(Path(a.show).read_text())
        if a.recompute:
            summarize = {"fairness": summarize_fairness, "uploads": summarize_uploads}
            if out["scenario"] not in summarize:
                ap.error(f"--recompute: not for {out['scenario']}")
            summarize[out["scenario"]](out)
        print(format_any(out))
        return 0
    if not a.scenario:
        ap.error("a scenario is needed (or --show)")
    a.statics = [int(x) for x in a.statics.split(",")] if a.statics else None
    if a.extra_policies:
        _EXTRA_POLICIES.extend(p.strip() for p in a.extra_policies.split(",") if p.strip())
        for p in _EXTRA_POLICIES:
            try:
                check_policy(p)  # reject a bad policy before running anything
            except ValueError as e:
                ap.error(str(e))
    if a.duration and a.warmup and a.warmup >= a.duration:
        ap.error("--warmup must be shorter than --duration")
    topo_mod.require_root_and_tools(("ip", "iptables-legacy", "ip6tables-legacy", "sysctl", "tc",
                                     "ss"))
    for b in (topo_mod.rsfcd_binary(), linkem_binary()):
        if not b.exists():
            raise SystemExit(f"missing {b} (build targets rsfcd and rsfc-linkem; "
                             f"RSFC_BUILD_DIR picks the build directory)")
    if a.scenario == "stacks":
        topo_mod.ensure_host_cc_allowed("bbr")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out_path = Path(a.json) if a.json else OUT_DIR / f"{a.scenario}-{stamp}.json"
    out_path.parent.mkdir(parents=True, exist_ok=True)
    log = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    t_start = time.monotonic()
    run, fmt = RUNNERS[a.scenario]
    out = run(a, log)
    out["meta"] = {"time": stamp, "kernel": os.uname().release, "wall_s": round(
        time.monotonic() - t_start), "rsfcd": str(topo_mod.rsfcd_binary()),
        "git": subprocess.run(["git", "-C", str(REPO), "describe", "--always", "--dirty"],
                              capture_output=True, text=True).stdout.strip()}
    out_path.write_text(json.dumps(out))
    print(fmt(out))
    print(f"(JSON: {out_path}; {out['meta']['wall_s']} s)")
    if not a.no_plots:
        try:
            import plots
            for p in plots.plot_run(out_path):
                print(f"(plot: {p})")
        except ImportError as e:
            print(f"(no plots: {e})")
    errors = [e for e in _all_errors(out)]
    return 1 if errors else 0


def _all_errors(obj):
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k == "errors" and isinstance(v, list):
                yield from v
            elif k != "tests":
                yield from _all_errors(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _all_errors(v)


if __name__ == "__main__":
    sys.exit(main())
