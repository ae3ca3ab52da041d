#!/usr/bin/python3
"""Bloated-cellular-link scenarios: real kernel TCP (iperf3, CUBIC on phone and server) and
ICMP RTT from the phone through an emulated cellular link (lab/shaping.py, in the bs
namespace of lab/topo.py) with rsfcd on the gateway, for several uplink policies side by
side in one run.

Per policy, each test on a fresh topology (no queue, TCP metric cache or daemon state
leaks from one test into the next):
  dl    download alone                    (+ ping: the RTT the download alone causes)
  ul    upload alone                      (+ ping)
  both  download + concurrent upload      (+ ping: the phone's RTT under load)
Throughput is the receiver's (iperf3 JSON intervals; the server's for uploads), averaged
over the intervals after the warm-up; RTT percentiles over the same window.

    /usr/bin/python3 lab/scenarios.py --scenario 3g
    /usr/bin/python3 lab/scenarios.py --scenario lte --policies off,static:65536,rsfc
    /usr/bin/python3 lab/scenarios.py --scenario 3g --validate     # the emulated link alone
    /usr/bin/python3 lab/scenarios.py --show lab/out/3g-....json    # table of an earlier run

Policies (lab/policies.py): none (no rsfcd, no NFQUEUE on the gateway), off, observe,
static:BYTES, rsfc, rsfc[key=value;...] (dotted keys nest: rsfc[tuning.probe_below=0.3]),
rsfc+drwa, rsfc+drwa[key=value;rsfc.key=value;...].
Needs root, iperf3, build/rsfcd and build/lab/rsfc-linkem (RSFC_BUILD_DIR=... otherwise).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import topo as topo_mod  # noqa: E402
from measure import fmt, mean_rate, payload_fraction, percentile, receiver_intervals  # noqa: E402
from policies import POLICY_FORMS, check_policy, policy_binary, policy_config  # noqa: E402
from shaping import LINKS, LinkSpec, Shaping  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
OUT_DIR = REPO / "lab" / "out"
DL_PORT, UL_PORT = 5201, 5202


@dataclass
class Scenario:
    name: str
    description: str
    link: LinkSpec
    phone_timestamps: bool = True
    # Targets (fractions / milliseconds) of the issue for rsfc.
    min_dl_fraction: float = 0.90      # download with upload >= this x download alone
    min_ul_fraction: float = 0.90      # upload with download >= this x unregulated upload
    max_added_p95_ms: float = 100.0    # p95 under load <= download-alone p95 + this


SCENARIOS = {
    "3g": Scenario("3g", "3G: up 2 Mbit/s 1 MiB buffer, down 7.2 Mbit/s 256 KiB, 40 ms base RTT",
                   LINKS["3g"]),
    "lte": Scenario("lte", "LTE: up 10 Mbit/s 2 MiB buffer, down 30 Mbit/s 1 MiB, 60 ms base RTT",
                    LINKS["lte"]),
    "3g-nots": Scenario("3g-nots", "3G as above, phone without TCP timestamps", LINKS["3g"],
                        phone_timestamps=False, min_dl_fraction=0.80, min_ul_fraction=0.80,
                        max_added_p95_ms=200.0),
}

DEFAULT_POLICIES = "off,static:8192,static:32768,rsfc"


# ---- one test -------------------------------------------------------------------------
@dataclass
class TestResult:
    policy: str
    kind: str
    dl_mbps: float | None = None
    ul_mbps: float | None = None
    rtt_p50_ms: float | None = None
    rtt_p95_ms: float | None = None
    ping_sent: int = 0
    ping_lost: int = 0
    dl_intervals: list = field(default_factory=list)
    ul_intervals: list = field(default_factory=list)
    ping_samples: list = field(default_factory=list)
    linkem: list = field(default_factory=list)
    tc: dict = field(default_factory=dict)
    # TBF engine: share of each bottleneck's capacity sent between the warm-up and the end
    # (all traffic: a download's ACKs take part of the uplink).
    up_busy: float | None = None
    down_busy: float | None = None
    daemon_metrics: dict = field(default_factory=dict)
    errors: list = field(default_factory=list)


class _BusyMeter:
    """Bytes each TBF bottleneck sent, read at given seconds after start: how busy the link
    was in between (TBF engine only; linkem reports its own counters)."""

    def __init__(self, shaping: Shaping, link, engine: str):
        self.shaping, self.link, self.engine = shaping, link, engine
        self.t0 = time.monotonic()
        self.reads: list[tuple[float, int, int]] = []
        self.timers: list[threading.Timer] = []

    def at(self, t: float) -> None:
        if self.engine != "tbf":
            return
        tm = threading.Timer(max(0.0, t - (time.monotonic() - self.t0)), self._read)
        tm.daemon = True
        tm.start()
        self.timers.append(tm)

    def _read(self) -> None:
        stats = self.shaping.tc_stats()

        def sent(name: str) -> int | None:
            for q in stats.get(name, []):
                if q.get("kind") == "tbf" and q.get("root"):
                    return int(q.get("bytes", 0))
            return None
        up, down = sent("up"), sent("down")
        if up is not None and down is not None:
            self.reads.append((time.monotonic(), up, down))

    def cancel(self) -> None:
        for tm in self.timers:
            tm.cancel()

    def fractions(self) -> tuple[float | None, float | None]:
        if len(self.reads) < 2:
            return None, None
        (a, u0, d0), (b, u1, d1) = self.reads[0], self.reads[-1]
        dt = b - a
        if dt <= 0:
            return None, None

        def frac(n: int, rate_bps: int) -> float | None:
            return n * 8 / (rate_bps * dt) if rate_bps else None
        return frac(u1 - u0, self.link.up.rate_bps), frac(d1 - d0, self.link.down.rate_bps)


def _wait_listening(t: topo_mod.Topology, role: str, port: int, timeout: float = 5) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = t.run(role, ["ss", "-Hltn", f"sport = :{port}"], check=False)
        if r.stdout.strip():
            return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {role}:{port} after {timeout}s")


_SEQ = 0


def run_test(scenario: Scenario, policy: str, kind: str, duration: float, warmup: float,
             engine: str = "tbf", workdir: Path | None = None, ping_interval: float = 0.1,
             log=print) -> TestResult:
    """One test on a fresh topology. kind: idle | dl | ul | both."""
    global _SEQ
    _SEQ += 1
    name = f"lbs{os.getpid() % 100000}t{_SEQ}"
    res = TestResult(policy=policy, kind=kind)
    cfg = policy_config(policy)
    tag = re.sub(r"[^A-Za-z0-9_.=-]", "_", policy.replace(":", ""))
    wd = (workdir or Path("/tmp/rsfc-lab")) / f"{scenario.name}-{tag}-{kind}"
    with topo_mod.Topology(name, cc_phone="cubic", cc_srv="cubic",
                           phone_timestamps=scenario.phone_timestamps, workdir=wd) as t:
        with Shaping(t, scenario.link, engine=engine) as shaping:
            daemon = None
            if cfg is not None:
                # RSFC_LAB_KNOBS=uplink (etc.): the rules queue only what the knobs need
                # (rsfcd-iptables.sh -k); default every TCP packet.
                t.nfqueue_rules([0], knobs=os.environ.get("RSFC_LAB_KNOBS", "all"))
                daemon = topo_mod.Daemon(t, cfg, binary=policy_binary(policy))
            procs = {}
            cc = ["-C", "cubic"]
            if kind in ("dl", "both"):
                t.popen("srv", ["iperf3", "-s", "-1", "-J", "-p", str(DL_PORT)],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                _wait_listening(t, "srv", DL_PORT)
            if kind in ("ul", "both"):
                t.popen("srv", ["iperf3", "-s", "-1", "-J", "-p", str(UL_PORT)],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                _wait_listening(t, "srv", UL_PORT)
            procs["ping"] = t.popen("phone", ["/usr/bin/python3", str(REPO / "lab" / "pinger.py"),
                                              topo_mod.SRV4, "--interval", str(ping_interval),
                                              "--duration", str(duration), "--linger", "6"],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            secs = str(int(round(duration)))
            if kind in ("dl", "both"):
                procs["dl"] = t.popen("phone", ["iperf3", "-c", topo_mod.SRV4, "-p", str(DL_PORT),
                                                "-R", *cc, "-t", secs, "-i", "1", "-J"],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            if kind in ("ul", "both"):
                procs["ul"] = t.popen("phone", ["iperf3", "-c", topo_mod.SRV4, "-p", str(UL_PORT),
                                                *cc, "-t", secs, "-i", "1", "-J",
                                                "--get-server-output"],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            busy = _BusyMeter(shaping, scenario.link, engine)
            busy.at(warmup)
            busy.at(duration - 0.5)
            outs = wait_clients(procs, res, duration + 90)
            busy.cancel()
            res.up_busy, res.down_busy = busy.fractions()
            res.linkem = shaping.linkem_stats()
            res.tc = shaping.tc_stats()
            if daemon is not None:
                if not daemon.alive():
                    res.errors.append(f"rsfcd died: {daemon.log_tail(5)}")
                else:
                    try:
                        m = daemon.metrics()
                        res.daemon_metrics = {k: sum(v.values()) for k, v in m.items()}
                    except Exception as e:  # noqa: BLE001 (diagnostics only)
                        res.errors.append(f"metrics: {e}")
                daemon.stop()
            if not shaping.alive():
                res.errors.append("rsfc-linkem died")
    parse_outputs(res, outs, duration, warmup)
    for e in res.errors:
        log(f"  ! {policy} {kind}: {e}")
    return res


def wait_clients(procs: dict, res: TestResult, timeout: float) -> dict:
    """Waits for the test's clients ({key: Popen}) and returns their stdout by key; a client
    that times out is killed, and it and any non-zero exit go to res.errors."""
    outs = {}
    for key, p in procs.items():
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            res.errors.append(f"{key}: timed out")
        outs[key] = out
        if p.returncode != 0:
            res.errors.append(f"{key}: exit {p.returncode}: {(err or out)[-300:]}")
    return outs


def parse_outputs(res: TestResult, outs: dict, duration: float, warmup: float) -> None:
    """The clients' outputs (iperf3 JSON of "dl"/"ul", the pinger's JSON of "ping") into
    `res`: the receivers' intervals and mean rates after `warmup`, the phone's RTT
    percentiles within [warmup, duration]; what cannot be read goes to res.errors."""
    for key, upload in (("dl", False), ("ul", True)):
        if key not in outs:
            continue
        try:
            report = json.loads(outs[key])
        except json.JSONDecodeError:
            res.errors.append(f"{key}: no iperf3 JSON")
            continue
        if report.get("error"):
            res.errors.append(f"{key}: iperf3: {report['error']}")
        iv = receiver_intervals(report, upload)
        rate = mean_rate(iv, warmup)
        if key == "dl":
            res.dl_intervals, res.dl_mbps = iv, rate
        else:
            res.ul_intervals, res.ul_mbps = iv, rate
    try:
        ping = json.loads(outs.get("ping") or "{}")
        res.ping_samples = ping.get("samples", [])
        win = [s for s in res.ping_samples if warmup <= s[0] <= duration]
        rtts = [r for _, r in win]
        res.rtt_p50_ms = percentile(rtts, 0.50)
        res.rtt_p95_ms = percentile(rtts, 0.95)
        res.ping_sent = ping.get("sent", 0)
        res.ping_lost = ping.get("lost", 0)
    except json.JSONDecodeError:
        res.errors.append("ping: no JSON")


# ---- the table ------------------------------------------------------------------------
def summarize(scenario: Scenario, results: dict[str, dict[str, TestResult]]) -> dict:
    """Per policy: the numbers of the table and the target checks."""
    summary = {}
    ul_unregulated = None
    if "off" in results and "ul" in results["off"]:
        ul_unregulated = results["off"]["ul"].ul_mbps
    for policy, tests in results.items():
        dl, ul, both = tests.get("dl"), tests.get("ul"), tests.get("both")
        s = {
            "dl_alone_mbps": dl.dl_mbps if dl else None,
            "ul_alone_mbps": ul.ul_mbps if ul else None,
            "dl_with_ul_mbps": both.dl_mbps if both else None,
            "ul_with_dl_mbps": both.ul_mbps if both else None,
            "rtt_dl_alone_p50_ms": dl.rtt_p50_ms if dl else None,
            "rtt_dl_alone_p95_ms": dl.rtt_p95_ms if dl else None,
            "rtt_ul_alone_p50_ms": ul.rtt_p50_ms if ul else None,
            "rtt_ul_alone_p95_ms": ul.rtt_p95_ms if ul else None,
            "rtt_load_p50_ms": both.rtt_p50_ms if both else None,
            "rtt_load_p95_ms": both.rtt_p95_ms if both else None,
            "ping_load_loss_pct": (100.0 * both.ping_lost / both.ping_sent
                                   if both and both.ping_sent else None),
            "up_busy_with_dl": both.up_busy if both else None,
        }
        # The rest of the busy uplink is not the upload: the download's ACKs (and the pings).
        s["up_other_with_dl"] = None
        if s["up_busy_with_dl"] is not None and s["ul_with_dl_mbps"] is not None:
            wire = scenario.link.up.rate_bps * payload_fraction(scenario.phone_timestamps, "tbf")
            s["up_other_with_dl"] = s["up_busy_with_dl"] - s["ul_with_dl_mbps"] * 1e6 / wire
        base_ul = ul_unregulated if ul_unregulated else s["ul_alone_mbps"]
        s["dl_fraction"] = (s["dl_with_ul_mbps"] / s["dl_alone_mbps"]
                            if s["dl_with_ul_mbps"] is not None and s["dl_alone_mbps"] else None)
        s["ul_fraction"] = (s["ul_with_dl_mbps"] / base_ul
                            if s["ul_with_dl_mbps"] is not None and base_ul else None)
        s["added_p95_ms"] = (s["rtt_load_p95_ms"] - s["rtt_dl_alone_p95_ms"]
                             if s["rtt_load_p95_ms"] is not None
                             and s["rtt_dl_alone_p95_ms"] is not None else None)
        s["targets"] = {
            "dl": s["dl_fraction"] is not None and s["dl_fraction"] >= scenario.min_dl_fraction,
            "ul": s["ul_fraction"] is not None and s["ul_fraction"] >= scenario.min_ul_fraction,
            "rtt": s["added_p95_ms"] is not None
            and s["added_p95_ms"] <= scenario.max_added_p95_ms,
        }
        s["errors"] = [e for t in tests.values() for e in t.errors]
        summary[policy] = s
    # "At least as good as the best static on each column" (rsfc only).
    statics = [p for p in summary if p.startswith("static:")]
    if "rsfc" in summary and statics:
        r = summary["rsfc"]
        columns = (("dl_with_ul_mbps", True), ("ul_with_dl_mbps", True),
                   ("rtt_load_p95_ms", False))

        def no_worse(value, ref, higher_is_better):
            # 3 % (throughput) / 10 ms (RTT) of measurement noise count as a tie.
            if value is None or ref is None:
                return None
            return value >= ref * 0.97 if higher_is_better else value <= ref + 10

        better = {}
        for key, higher_is_better in columns:
            vals = [summary[p][key] for p in statics if summary[p][key] is not None]
            best = (max(vals) if higher_is_better else min(vals)) if vals else None
            better[key] = no_worse(r[key], best, higher_is_better)
        r["vs_best_static"] = better
        # The best single static clamp: the one that meets the most targets (ties: the
        # higher sum of the download and upload fractions), compared column by column with
        # the same noise allowance. A per-column best mixes clamps no operator could run at
        # once (8 KB keeps the download whole by starving the upload).
        def rank(p):
            t = summary[p]["targets"]
            fr = (summary[p]["dl_fraction"] or 0) + (summary[p]["ul_fraction"] or 0)
            return (sum(bool(v) for v in t.values()), fr)
        single = max(statics, key=rank)
        one = {"static": single}
        for key, higher_is_better in columns:
            one[key] = no_worse(r[key], summary[single][key], higher_is_better)
        r["vs_best_single_static"] = one
    return summary


def format_table(scenario: Scenario, summary: dict, duration: float, warmup: float) -> str:
    policies = list(summary)
    rows = [
        ("download alone [Mbit/s]", lambda s: fmt(s["dl_alone_mbps"])),
        ("upload alone [Mbit/s]", lambda s: fmt(s["ul_alone_mbps"])),
        ("download w/ upload [Mbit/s]", lambda s: fmt(s["dl_with_ul_mbps"])),
        ("  = % of download alone", lambda s: _pct(s["dl_fraction"], s["targets"]["dl"])),
        ("upload w/ download [Mbit/s]", lambda s: fmt(s["ul_with_dl_mbps"])),
        ("  = % of unregulated upload", lambda s: _pct(s["ul_fraction"], s["targets"]["ul"])),
        ("RTT dl alone p50/p95 [ms]",
         lambda s: f"{fmt(s['rtt_dl_alone_p50_ms'], digits=0)}/"
                   f"{fmt(s['rtt_dl_alone_p95_ms'], digits=0)}"),
        ("RTT ul alone p50/p95 [ms]",
         lambda s: f"{fmt(s['rtt_ul_alone_p50_ms'], digits=0)}/"
                   f"{fmt(s['rtt_ul_alone_p95_ms'], digits=0)}"),
        ("RTT under load p50/p95 [ms]",
         lambda s: f"{fmt(s['rtt_load_p50_ms'], digits=0)}/"
                   f"{fmt(s['rtt_load_p95_ms'], digits=0)}"),
        ("  p95 added by the upload [ms]",
         lambda s: fmt(s["added_p95_ms"], digits=0) + (" ok" if s["targets"]["rtt"] else "")),
        ("ping loss under load [%]", lambda s: fmt(s["ping_load_loss_pct"], digits=1)),
        ("uplink busy w/ download [%]", _busy_cell),  # (upload + the rest)
    ]
    width0 = max(len(r[0]) for r in rows) + 2
    cols = [max(12, len(p) + 2) for p in policies]
    lines = [f"scenario {scenario.name}: {scenario.description}",
             f"duration {duration:g} s per test, first {warmup:g} s skipped; targets: download "
             f">= {scenario.min_dl_fraction:.0%}, upload >= {scenario.min_ul_fraction:.0%}, "
             f"p95 added <= {scenario.max_added_p95_ms:g} ms ('ok' = met)"]
    lines.append("".ljust(width0) + "".join(p.rjust(w) for p, w in zip(policies, cols)))
    for label, f in rows:
        lines.append(label.ljust(width0) + "".join(f(summary[p]).rjust(w)
                                                   for p, w in zip(policies, cols)))
    def yn(v):
        return "-" if v is None else ("yes" if v else "NO")

    r = summary.get("rsfc", {}).get("vs_best_static")
    if r:
        lines.append(f"rsfc vs best static per column: download {yn(r['dl_with_ul_mbps'])}, "
                     f"upload {yn(r['ul_with_dl_mbps'])}, p95 RTT {yn(r['rtt_load_p95_ms'])}")
    one = summary.get("rsfc", {}).get("vs_best_single_static")
    if one:
        lines.append(f"rsfc vs the best single static ({one['static']}): download "
                     f"{yn(one['dl_with_ul_mbps'])}, upload {yn(one['ul_with_dl_mbps'])}, "
                     f"p95 RTT {yn(one['rtt_load_p95_ms'])}")
    errs = [(p, e) for p in policies for e in summary[p]["errors"]]
    for p, e in errs:
        lines.append(f"error [{p}]: {e}")
    return "\n".join(lines)


def _busy_cell(s) -> str:
    # "97 (89+8)": busy = the upload's data + the rest (the download's ACKs, the pings).
    b, o = s.get("up_busy_with_dl"), s.get("up_other_with_dl")
    if b is None:
        return "-"
    if o is None:
        return f"{100 * b:.1f}"
    return f"{100 * b:.1f} ({100 * (b - o):.0f}+{100 * o:.0f})"


def _pct(frac, ok):
    if frac is None:
        return "-"
    return f"{100 * frac:.0f}%" + (" ok" if ok else "")


# ---- validation of the emulated link ---------------------------------------------------
def validate(scenario: Scenario, engine: str, duration: float, warmup: float, log=print) -> dict:
    """The link alone (no rsfcd): idle RTT vs base RTT, single-flow CUBIC goodput vs rate,
    and the RTT with a full buffer vs base RTT + buffer/rate."""
    link = scenario.link
    # Goodput per wire byte: TBF counts the Ethernet header, linkem the IP packet.
    hdr = 40 + (12 if scenario.phone_timestamps else 0)
    l2 = 14 if engine == "tbf" else 0
    eff = (1500 - hdr) / (1500 + l2)
    idle = run_test(scenario, "none", "idle", min(duration, 10), 1, engine=engine, log=log)
    dl = run_test(scenario, "none", "dl", duration, warmup, engine=engine, log=log)
    ul = run_test(scenario, "none", "ul", duration, warmup, engine=engine, log=log)
    max_rtt_ul = max((r for _, r in ul.ping_samples), default=None)
    max_rtt_dl = max((r for _, r in dl.ping_samples), default=None)
    v = {
        "engine": engine,
        "base_rtt_ms": link.base_rtt_ms,
        "idle_rtt_p50_ms": idle.rtt_p50_ms, "idle_rtt_p95_ms": idle.rtt_p95_ms,
        "dl_rate_mbps": link.down.rate_bps / 1e6, "dl_goodput_expected_mbps":
            link.down.rate_bps * eff / 1e6, "dl_goodput_mbps": dl.dl_mbps,
        "ul_rate_mbps": link.up.rate_bps / 1e6, "ul_goodput_expected_mbps":
            link.up.rate_bps * eff / 1e6, "ul_goodput_mbps": ul.ul_mbps,
        # A full uplink buffer (the upload fills it) adds buffer/rate to the RTT.
        "ul_full_buffer_rtt_expected_ms": link.base_rtt_ms
            + link.up.buffer_bytes * 8 / link.up.rate_bps * 1000,
        "ul_max_rtt_ms": max_rtt_ul, "ul_rtt_p95_ms": ul.rtt_p95_ms,
        "dl_full_buffer_rtt_expected_ms": link.base_rtt_ms
            + link.down.buffer_bytes * 8 / link.down.rate_bps * 1000,
        "dl_max_rtt_ms": max_rtt_dl, "dl_rtt_p95_ms": dl.rtt_p95_ms,
        "linkem": {"idle": idle.linkem, "dl": dl.linkem, "ul": ul.linkem},
        "errors": idle.errors + dl.errors + ul.errors,
    }
    return v


def format_validation(scenario: Scenario, v: dict) -> str:
    return "\n".join([
        f"validation of the emulated link, scenario {scenario.name} (engine {v['engine']}, "
        f"no rsfcd)",
        f"  idle RTT p50/p95         {fmt(v['idle_rtt_p50_ms'], digits=1)}/"
        f"{fmt(v['idle_rtt_p95_ms'], digits=1)} ms   (base {v['base_rtt_ms']:g} ms)",
        f"  download goodput         {fmt(v['dl_goodput_mbps'])} Mbit/s   (rate "
        f"{v['dl_rate_mbps']:g}, goodput at full rate {v['dl_goodput_expected_mbps']:.2f})",
        f"  upload goodput           {fmt(v['ul_goodput_mbps'])} Mbit/s   (rate "
        f"{v['ul_rate_mbps']:g}, goodput at full rate {v['ul_goodput_expected_mbps']:.2f})",
        f"  RTT, upload alone        max {fmt(v['ul_max_rtt_ms'], digits=0)} p95 "
        f"{fmt(v['ul_rtt_p95_ms'], digits=0)} ms   (base + full uplink buffer "
        f"{v['ul_full_buffer_rtt_expected_ms']:.0f})",
        f"  RTT, download alone      max {fmt(v['dl_max_rtt_ms'], digits=0)} p95 "
        f"{fmt(v['dl_rtt_p95_ms'], digits=0)} ms   (base + full downlink buffer "
        f"{v['dl_full_buffer_rtt_expected_ms']:.0f})",
    ] + [f"  error: {e}" for e in v["errors"]])


# ---- main -----------------------------------------------------------------------------
def run_scenario(scenario: Scenario, policies: list[str], duration: float, warmup: float,
                 engine: str = "tbf", kinds=("dl", "ul", "both"), log=print):
    results: dict[str, dict[str, TestResult]] = {}
    for policy in policies:
        policy_config(policy)  # reject an unknown policy before running anything (main()
        # has also had rsfcd check each configuration)
    seen: dict[str, int] = {}
    for policy in policies:
        # A policy listed again (side-by-side repeats) gets its own column: "rsfc #2".
        seen[policy] = seen.get(policy, 0) + 1
        label = policy if seen[policy] == 1 else f"{policy} #{seen[policy]}"
        results[label] = {}
        for kind in kinds:
            t0 = time.monotonic()
            r = run_test(scenario, policy, kind, duration, warmup, engine=engine, log=log)
            results[label][kind] = r
            log(f"  {scenario.name} {label:>14} {kind:>4}: dl {fmt(r.dl_mbps)} ul "
                f"{fmt(r.ul_mbps)} Mbit/s, RTT p50/p95 {fmt(r.rtt_p50_ms, digits=0)}/"
                f"{fmt(r.rtt_p95_ms, digits=0)} ms ({time.monotonic() - t0:.0f} s)")
    return results


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", default="3g", choices=sorted(SCENARIOS))
    ap.add_argument("--policies", default=DEFAULT_POLICIES,
                    help=f"comma-separated (default {DEFAULT_POLICIES}; forms: {POLICY_FORMS})")
    ap.add_argument("--duration", type=float, default=40, help="seconds per test")
    ap.add_argument("--warmup", type=float, default=10, help="seconds skipped per test")
    ap.add_argument("--engine", default="tbf", choices=("tbf", "linkem"),
                    help="bottleneck: kernel TBF (default) or rsfc-linkem's own")
    ap.add_argument("--validate", action="store_true",
                    help="measure the emulated link alone (no rsfcd) instead")
    ap.add_argument("--kinds", default="dl,ul,both",
                    help="tests per policy: dl (download alone), ul (upload alone), both")
    ap.add_argument("--json", help="output file (default lab/out/<scenario>-<time>.json)")
    ap.add_argument("--show", metavar="JSON", help="print the table of an earlier run's JSON")
    a = ap.parse_args(argv)
    if a.show:
        saved = json.loads(Path(a.show).read_text())
        m = saved["meta"]
        print(format_table(SCENARIOS[m["scenario"]], saved["summary"], m["duration_s"],
                           m["warmup_s"]))
        return 0
    if a.warmup >= a.duration:
        ap.error("--warmup must be shorter than --duration")
    scenario = SCENARIOS[a.scenario]
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out_path = Path(a.json) if a.json else OUT_DIR / f"{scenario.name}-{stamp}.json"
    out_path.parent.mkdir(parents=True, exist_ok=True)
    meta = {"scenario": scenario.name, "description": scenario.description,
            "link": scenario.link.to_dict(), "phone_timestamps": scenario.phone_timestamps,
            "duration_s": a.duration, "warmup_s": a.warmup, "engine": a.engine,
            "kernel": os.uname().release, "time": stamp}
    log = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    if a.validate:
        v = validate(scenario, a.engine, a.duration, a.warmup, log=log)
        out_path.write_text(json.dumps({"meta": meta, "validation": v}, indent=1))
        print(format_validation(scenario, v))
        print(f"(JSON: {out_path})")
        return 1 if v["errors"] else 0
    policies = [p.strip() for p in a.policies.split(",") if p.strip()]
    kinds = tuple(k.strip() for k in a.kinds.split(",") if k.strip())
    for p in policies:
        try:
            check_policy(p)
        except ValueError as e:
            ap.error(str(e))
    results = run_scenario(scenario, policies, a.duration, a.warmup, engine=a.engine,
                           kinds=kinds, log=log)
    summary = summarize(scenario, results)
    out_path.write_text(json.dumps({
        "meta": meta, "summary": summary,
        "tests": {p: {k: vars(r) for k, r in t.items()} for p, t in results.items()},
    }, indent=1))
    print(format_table(scenario, summary, a.duration, a.warmup))
    print(f"(JSON: {out_path})")
    return 1 if any(s["errors"] for s in summary.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
