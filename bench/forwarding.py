#!/usr/bin/python3
"""Forwarding benchmark of the NFQUEUE rule modes (conf/rsfcd-iptables.sh -k) on a
download-heavy mix: nine download flows per upload flow, real kernel TCP through the lab's
namespaces phone ── bs ── gw ── srv (lab/topo.py) with no emulated link, so everything runs
as fast as the CPUs allow. The senders' interfaces get gso_max_segs 1: TCP sends one MSS
per packet, so the gateway forwards (and NFQUEUE hands rsfcd) wire-sized packets.

One run interleaves the configurations, REPEATS times each, on one topology:

  plain        no rules: the kernel forwards alone
  all          -k all (every TCP packet of the phone queued), rsfcd
  all-floor    -k all, nfq-accept (build/nfq-accept: accepts every packet through the
               daemon's own NfQueue code; the floor of the cost per queued packet)
  uplink       -k uplink (the uplink knob's flows; their window scales adopted from
               conntrack), rsfcd
  all-2q       -k all over queues 0:1 (kernel balancing), rsfcd with two workers
  down-rsfc    -k all, rsfcd with the downlink knob's rsfc as well (the downloads' windows
               regulated)
  down-paced   the same with downlink pacing (pacing.enabled, DESIGN.md §4b): the pacer
               holds downloads' data in the kernel's queue, and every verdict's search in that
               queue (the kernel walks it from its oldest entry) passes the held packets

rsfcd runs `uplink.policy: observe` (every estimator of the rsfc controller runs on each
packet, no window is changed, so every configuration moves the same traffic mix) and
`downlink.policy: off`, except in the two `down-` configurations, which regulate the
downloads and are compared with each other only. Per configuration and repeat it measures, over MEASURE seconds after
WARMUP: packets forwarded by gw (ran0's rx + tx counters), packets queued (id_sequence of
/proc/net/netfilter/nfnetlink_queue), the consumer's CPU (utime + stime of
/proc/PID/stat, and its busiest thread), and the machine's softirq time (/proc/stat).

Reported (medians over the repeats of ratios taken within one repeat):
  (a) queued share under `uplink`                      target <= 20 %
  (b) forwarding rate `uplink` / `plain`               target >= 80 %
  (c) CPU per queued packet, rsfcd / nfq-accept (`all`) target <= 1.1
  (d) forwarding rate `all-2q` / `all`                 target >= 1.7 where the queue is
      the bottleneck (see the busiest worker's CPU share: ~100 % means it was)
  (e) CPU per queued packet, `down-paced` / `down-rsfc`: what pacing costs the worker,
      the kernel's verdict searches included (no target; the share of queued packets the
      pacer held is printed with it)

A full queue accepts instead of queueing (fail-open): a queued share under 100 % with
`-k all` is the part of the traffic rsfcd could not keep up with and never saw.

Usage (root; builds first: cmake --build build --target rsfcd nfq-accept):
  nice -n 19 /usr/bin/python3 bench/forwarding.py [--repeats 3] [--measure 4] [--json F]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "lab"))

import topo  # noqa: E402

SCRIPT = REPO / "conf" / "rsfcd-iptables.sh"
DOWN_FLOWS, UP_FLOWS = 9, 1
PORTS = list(range(5501, 5501 + DOWN_FLOWS + UP_FLOWS))  # one iperf3 pair per flow
HZ = os.sysconf("SC_CLK_TCK")

CONFIGS = {
    "plain": {"rules": None, "consumer": None},
    "all": {"rules": ["-q", "0"], "consumer": "rsfcd", "queues": [0]},
    "all-floor": {"rules": ["-q", "0"], "consumer": "floor", "queues": [0]},
    "uplink": {"rules": ["-q", "0", "-k", "uplink"], "consumer": "rsfcd", "queues": [0]},
    "all-2q": {"rules": ["-q", "0:1", "-b", "kernel"], "consumer": "rsfcd", "queues": [0, 1]},
    "down-rsfc": {"rules": ["-q", "0"], "consumer": "rsfcd", "queues": [0],
                  "config": {"downlink": {"policy": "rsfc"}}},
    "down-paced": {"rules": ["-q", "0"], "consumer": "rsfcd", "queues": [0],
                   "config": {"downlink": {"policy": "rsfc"}, "pacing": {"enabled": True}}},
}

RSFCD_CONFIG = {"uplink": {"policy": "observe"}, "downlink": {"policy": "off"}}
HELD = "rsfcd_pacing_packets_held_total"


def build_dir() -> Path:
    return Path(os.environ.get("RSFC_BUILD_DIR", REPO / "build"))


def link_counters(t: topo.Topology) -> tuple[int, int]:
    """Packets and bytes through gw's ran0, both directions (what gw forwarded, plus the
    odd neighbour message)."""
    out = t.run("gw", ["ip", "-s", "-j", "link", "show", "ran0"]).stdout
    st = json.loads(out)[0]["stats64"]
    return (st["rx"]["packets"] + st["tx"]["packets"], st["rx"]["bytes"] + st["tx"]["bytes"])


def queue_ids(t: topo.Topology) -> int:
    """Packets queued so far, all bound queues (id_sequence counts per binding)."""
    text = t.run("gw", ["cat", "/proc/net/netfilter/nfnetlink_queue"]).stdout
    return sum(int(line.split()[7]) for line in text.splitlines() if line.split())


def bound_queues(t: topo.Topology) -> set[int]:
    text = t.run("gw", ["cat", "/proc/net/netfilter/nfnetlink_queue"]).stdout
    return {int(line.split()[0]) for line in text.splitlines() if line.split()}


def proc_cpu(pid: int) -> tuple[int, dict[int, int]]:
    """utime + stime of the process and of each of its threads, in clock ticks."""
    def ticks(path: Path) -> int:
        f = path.read_text().rsplit(")", 1)[1].split()
        return int(f[11]) + int(f[12])  # fields 14, 15 of stat
    threads = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            threads[int(task.name)] = ticks(task / "stat")
        except (OSError, IndexError):
            pass
    return ticks(Path(f"/proc/{pid}/stat")), threads


def softirq_and_total() -> tuple[int, int]:
    f = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return f[6], sum(f[:8])  # softirq; user..steal


class Consumer:
    """rsfcd (observe) or nfq-accept, in gw, bound to the configuration's queues."""

    def __init__(self, t: topo.Topology, kind: str, queues: list[int], config: dict | None = None):
        self.t, self.kind, self.queues, self.config = t, kind, queues, config or {}
        self.daemon = None
        self.proc = None

    def __enter__(self):
        if self.kind == "rsfcd":
            self.daemon = topo.Daemon(self.t, {**RSFCD_CONFIG, **self.config,
                                               "queues": self.queues},
                                      binary=build_dir() / "rsfcd")
            self.pid = self.daemon.pid
        else:
            self.proc = self.t.popen("gw", [str(build_dir() / "nfq-accept"),
                                            *map(str, self.queues)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self.pid = self.proc.pid
        deadline = time.monotonic() + 10
        while not set(self.queues) <= bound_queues(self.t):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.kind} did not bind queues {self.queues}")
            time.sleep(0.05)
        return self

    def __exit__(self, *exc):
        if self.daemon:
            self.daemon.stop()
        elif self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
        return False


def start_traffic(t: topo.Topology, seconds: float) -> list[subprocess.Popen]:
    """Nine downloads (iperf3 -R) and one upload, one iperf3 process each (the scheduler
    shares the CPUs per process, so each flow gets about a tenth), starting together."""
    procs = []
    for i, port in enumerate(PORTS):
        extra = ["-R"] if i < DOWN_FLOWS else []
        procs.append(t.popen("phone", ["iperf3", "-c", topo.SRV4, "-p", str(port), "-t",
                                       str(seconds), "-J", "-C", "cubic", *extra],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL))
    return procs


def start_servers(t: topo.Topology) -> None:
    for port in PORTS:
        t.popen("srv", ["iperf3", "-s", "-1", "-p", str(port)], stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL)
    for port in PORTS:
        deadline = time.monotonic() + 5
        while not t.run("srv", ["ss", "-tlnH", f"( sport = :{port} )"]).stdout.strip():
            if time.monotonic() > deadline:
                raise RuntimeError(f"iperf3 server on {port} did not listen")
            time.sleep(0.05)


def run_one(t: topo.Topology, name: str, warmup: float, measure: float) -> dict:
    cfg = CONFIGS[name]
    if cfg["rules"] is None:
        t.run("gw", ["sh", str(SCRIPT), "del"])
    else:
        t.run("gw", ["sh", str(SCRIPT), "add", "-i", "ran0", *cfg["rules"]])
    start_servers(t)
    consumer = (Consumer(t, cfg["consumer"], cfg["queues"], cfg.get("config"))
                if cfg["consumer"] else None)
    held = [0.0, 0.0]
    try:
        if consumer:
            consumer.__enter__()
        procs = start_traffic(t, warmup + measure + 1)
        time.sleep(warmup)
        p0, b0 = link_counters(t)
        q0 = queue_ids(t) if consumer else 0
        c0 = proc_cpu(consumer.pid) if consumer else (0, {})
        if consumer and consumer.daemon:
            held[0] = consumer.daemon.metrics().value(HELD)
        s0 = softirq_and_total()
        w0 = time.monotonic()
        time.sleep(measure)
        p1, b1 = link_counters(t)
        q1 = queue_ids(t) if consumer else 0
        c1 = proc_cpu(consumer.pid) if consumer else (0, {})
        s1 = softirq_and_total()
        if consumer and consumer.daemon:
            held[1] = consumer.daemon.metrics().value(HELD)
        dt = time.monotonic() - w0
        moved = {"down": 0, "up": 0}
        for i, p in enumerate(procs):
            label = "down" if i < DOWN_FLOWS else "up"
            out, _ = p.communicate(timeout=warmup + measure + 30)
            res = json.loads(out)
            if "error" in res:
                raise RuntimeError(f"{name}: iperf3 {label}: {res['error']}")
            moved[label] += res["end"]["sum_received"]["bytes"]
    finally:
        if consumer:
            consumer.__exit__(None, None, None)
    pkts = p1 - p0
    cpu_s = (c1[0] - c0[0]) / HZ
    busiest = max(((c1[1].get(tid, 0) - c0[1].get(tid, 0)) / HZ for tid in c1[1]), default=0)
    return {
        "config": name,
        "seconds": dt,
        "forwarded_pps": pkts / dt,
        "forwarded_bps": (b1 - b0) * 8 / dt,
        "queued": q1 - q0,
        "queued_share": (q1 - q0) / pkts if pkts else 0.0,
        "held_share": (held[1] - held[0]) / (q1 - q0) if q1 > q0 else 0.0,
        "consumer_cpu_s": cpu_s,
        "consumer_busiest_thread_share": busiest / dt,
        "cpu_us_per_queued": cpu_s * 1e6 / (q1 - q0) if q1 > q0 else None,
        "softirq_share": (s1[0] - s0[0]) / max(1, s1[1] - s0[1]),
        "iperf3_bytes": moved,
        "upload_share_of_bytes": moved["up"] / max(1, moved["up"] + moved["down"]),
    }


def summarise(runs: list[dict], repeats: int) -> dict:
    by = {(r["repeat"], r["config"]): r for r in runs}

    def med(f):
        vals = [f(rep) for rep in range(repeats)]
        vals = [v for v in vals if v is not None]
        return statistics.median(vals) if vals else None

    return {
        "a_queued_share_uplink": med(lambda k: by[(k, "uplink")]["queued_share"]),
        "b_forwarding_uplink_vs_plain": med(
            lambda k: by[(k, "uplink")]["forwarded_pps"] / by[(k, "plain")]["forwarded_pps"]),
        "b_forwarding_all_vs_plain": med(
            lambda k: by[(k, "all")]["forwarded_pps"] / by[(k, "plain")]["forwarded_pps"]),
        "c_cpu_per_queued_rsfcd_vs_floor": med(
            lambda k: by[(k, "all")]["cpu_us_per_queued"] / by[(k, "all-floor")]["cpu_us_per_queued"]),
        "d_forwarding_2q_vs_1q": med(
            lambda k: by[(k, "all-2q")]["forwarded_pps"] / by[(k, "all")]["forwarded_pps"]),
        "d_busiest_worker_share_1q": med(
            lambda k: by[(k, "all")]["consumer_busiest_thread_share"]),
        "d_busiest_worker_share_2q": med(
            lambda k: by[(k, "all-2q")]["consumer_busiest_thread_share"]),
        "e_cpu_per_queued_paced_vs_unpaced": med(
            lambda k: by[(k, "down-paced")]["cpu_us_per_queued"] /
            by[(k, "down-rsfc")]["cpu_us_per_queued"]),
        "e_held_share_paced": med(lambda k: by[(k, "down-paced")]["held_share"]),
    }


def table(runs: list[dict], repeats: int) -> str:
    lines = [f"{'config':<10} {'kpps fwd':>9} {'Mbit/s':>8} {'queued':>7} {'us/queued':>10} "
             f"{'cpu(s)':>7} {'busiest':>8} {'softirq':>8} {'up bytes':>9}"]
    for name in CONFIGS:
        rs = [r for r in runs if r["config"] == name]

        def m(key):
            vals = [r[key] for r in rs if r[key] is not None]
            return statistics.median(vals) if vals else float("nan")
        lines.append(f"{name:<10} {m('forwarded_pps') / 1e3:9.1f} {m('forwarded_bps') / 1e6:8.0f} "
                     f"{m('queued_share') * 100:6.1f}% {m('cpu_us_per_queued'):10.2f} "
                     f"{m('consumer_cpu_s'):7.2f} {m('consumer_busiest_thread_share') * 100:7.0f}% "
                     f"{m('softirq_share') * 100:7.0f}% {m('upload_share_of_bytes') * 100:8.1f}%")
    lines.append(f"(medians over {repeats} repeats; ratios below are medians of per-repeat ratios)")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--warmup", type=float, default=1.0)
    ap.add_argument("--measure", type=float, default=4.0)
    ap.add_argument("--json", type=Path, help="also write the results here")
    ap.add_argument("--name", default=f"fwdb{os.getpid() % 100000}")
    a = ap.parse_args(argv)
    for b in ("rsfcd", "nfq-accept"):
        if not (build_dir() / b).exists():
            sys.exit(f"{build_dir() / b} missing: cmake --build build --target rsfcd nfq-accept")
    t = topo.Topology(a.name, workdir=Path("/tmp/rsfc-fwdbench") / a.name)
    runs = []
    with t:
        # One MSS per packet from both senders (TCP takes the device's gso_max_segs).
        for role in ("phone", "srv"):
            t.run(role, ["ip", "link", "set", "dev", "eth0", "gso_max_segs", "1"])
        for rep in range(a.repeats):
            for name in CONFIGS:
                r = run_one(t, name, a.warmup, a.measure)
                r["repeat"] = rep
                runs.append(r)
                print(f"repeat {rep} {name:<10} {r['forwarded_pps'] / 1e3:7.1f} kpps, "
                      f"queued {r['queued_share'] * 100:5.1f} %, "
                      f"consumer {r['consumer_cpu_s']:.2f} s", file=sys.stderr, flush=True)
        t.run("gw", ["sh", str(SCRIPT), "del"])
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    out = {"commit": commit, "repeats": a.repeats, "warmup_s": a.warmup,
           "measure_s": a.measure, "cpus": os.cpu_count(),
           "loadavg_at_end": Path("/proc/loadavg").read_text().split()[:3],
           "summary": summarise(runs, a.repeats), "runs": runs}
    text = json.dumps(out, indent=1)
    if a.json:
        a.json.write_text(text + "\n")
    print(text)
    print(table(runs, a.repeats))
    s = out["summary"]
    print(f"(a) queued share, -k uplink:           {s['a_queued_share_uplink'] * 100:.1f} %  "
          f"(target <= 20 %)")
    print(f"(b) forwarding, -k uplink / plain:     {s['b_forwarding_uplink_vs_plain'] * 100:.0f} %  "
          f"(target >= 80 %; -k all: {s['b_forwarding_all_vs_plain'] * 100:.0f} %)")
    print(f"(c) CPU per queued packet rsfcd/floor: {s['c_cpu_per_queued_rsfcd_vs_floor']:.2f}x "
          f"(target <= 1.1x)")
    print(f"(d) forwarding 2 queues / 1 queue:     {s['d_forwarding_2q_vs_1q']:.2f}x "
          f"(target >= 1.7x; busiest worker {s['d_busiest_worker_share_1q'] * 100:.0f} % "
          f"of a CPU with 1 queue, {s['d_busiest_worker_share_2q'] * 100:.0f} % with 2)")
    print(f"(e) CPU per queued packet paced/not:   {s['e_cpu_per_queued_paced_vs_unpaced']:.2f}x "
          f"({s['e_held_share_paced'] * 100:.1f} % of the queued packets held by the pacer)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
