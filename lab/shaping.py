#!/usr/bin/python3
"""The emulated cellular link, applied inside the "base station" (bs) namespace of a
lab/topo.py Topology:

    phone eth0 ── phone0 [bs] gw0 ── ran0 gw ...
                   ▲           ▲
      downlink bottleneck    uplink bottleneck     (egress of each bs interface)
      + downlink delay       + uplink delay        (rsfc-linkem on NFQUEUE, FORWARD -i ...)

Why a separate namespace: a queue on the phone's own interface is capped by TCP Small
Queues (~130 KB per flow) and never bloats like a cellular buffer; forwarded packets are
not (veth orphans them), so a drop-tail buffer here fills like a real one.

Per direction: a one-way propagation delay and a bottleneck (rate + drop-tail buffer in
bytes), or a capacity trace instead of the rate. Two bottleneck engines:
  - "tbf":    the kernel's TBF on the bs egress (rate + byte FIFO); linkem only delays.
  - "linkem": rsfc-linkem does rate/trace + buffer + delay (needed for traces).
The kernel here has no netem, so the delay is always rsfc-linkem (NFQUEUE, copy-meta, no
fail-open, queue numbers of the bs namespace's own).

    with Topology("lb1") as t, Shaping(t, LINKS["3g"]) as s:   # or LinkSpec.symmetric_rtt(...)
        ...
        print(s.linkem_stats())

The named links (LINKS: 3g, lte, 2g) are the ones lab/scenarios.py's scenarios and the
suite (lab/exps/suite.py) run on. Capacity traces (Mahimahi format) are
lab/traces/NAME.{up,down} (traces_dir, trace_path); TraceFile counts the delivery
opportunities a trace offers in a window, as rsfc-linkem plays it.

CLI (on a topology left up by `lab/topo.py up --name X`):
    lab/shaping.py apply --name X --scenario 3g      # stays in the foreground until Ctrl-C
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import topo as topo_mod  # noqa: E402

REPO = Path(__file__).resolve().parent.parent

UPLINK_QUEUE = 10    # NFQUEUE numbers inside the bs namespace (not the gateway's)
DOWNLINK_QUEUE = 11


@dataclass
class Direction:
    """One direction of the cellular link."""
    rate_bps: int = 0          # bottleneck rate; 0 = none (unless trace)
    buffer_bytes: int = 0      # drop-tail buffer of the bottleneck; 0 = unlimited
    delay_ms: float = 0.0      # one-way propagation delay
    trace: str | None = None   # Mahimahi trace file (linkem engine only)

    def linkem_arg(self, queue_num: int, with_bottleneck: bool) -> str:
        parts = [f"queue={queue_num}", f"delay={self.delay_ms:g}ms"]
        if with_bottleneck:
            if self.trace:
                parts.append(f"trace={self.trace}")
            elif self.rate_bps:
                parts.append(f"rate={self.rate_bps}")
            if self.buffer_bytes:
                parts.append(f"buffer={self.buffer_bytes}")
        return ",".join(parts)

    def buffer_s(self, rate_bps: float | None = None) -> float | None:
        """Seconds a full buffer takes to drain at the direction's rate (or `rate_bps`,
        e.g. a trace's mean): the most queueing delay this direction can add. None without
        a buffer limit or a rate."""
        rate = rate_bps or self.rate_bps
        return self.buffer_bytes * 8 / rate if self.buffer_bytes and rate else None


@dataclass
class LinkSpec:
    up: Direction = field(default_factory=Direction)
    down: Direction = field(default_factory=Direction)

    @property
    def base_rtt_ms(self) -> float:
        return self.up.delay_ms + self.down.delay_ms

    def to_dict(self) -> dict:
        return {"up": asdict(self.up), "down": asdict(self.down), "base_rtt_ms": self.base_rtt_ms}

    @classmethod
    def symmetric_rtt(cls, up_bps: int, up_buf: int, down_bps: int, down_buf: int,
                      rtt_ms: float) -> "LinkSpec":
        """Constant rates and drop-tail buffers; the base RTT split evenly (half each way)."""
        return cls(up=Direction(up_bps, up_buf, rtt_ms / 2),
                   down=Direction(down_bps, down_buf, rtt_ms / 2))


KIB, MIB = 1024, 1024 * 1024

# The named cellular links (lab/scenarios.py's scenarios and the suite of lab/exps/suite.py
# run on them). 2g: as phones in developing markets see it, 100 kbit/s both ways, 200 ms
# base RTT, 10 s of drop-tail buffer each way (125 000 bytes); its bandwidth-delay product
# (2500 bytes) is under two segments.
LINKS = {
    "3g": LinkSpec.symmetric_rtt(2_000_000, 1 * MIB, 7_200_000, 256 * KIB, 40),
    "lte": LinkSpec.symmetric_rtt(10_000_000, 2 * MIB, 30_000_000, 1 * MIB, 60),
    "2g": LinkSpec.symmetric_rtt(100_000, 125_000, 100_000, 125_000, 200),
}


def linkem_binary() -> Path:
    build = os.environ.get("RSFC_BUILD_DIR")
    return (Path(build) if build else REPO / "build") / "lab" / "rsfc-linkem"


# ---- capacity traces -------------------------------------------------------------------
def traces_dir() -> Path:
    """lab/traces in the repository (RSFC_TRACES_DIR overrides). Raises if missing."""
    env = os.environ.get("RSFC_TRACES_DIR")
    d = Path(env) if env else REPO / "lab" / "traces"
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


# ---- the emulated link ----------------------------------------------------------------
class Shaping:
    """Applies a LinkSpec in the bs namespace; removes it on exit (the namespace itself
    belongs to the Topology)."""

    def __init__(self, topo: topo_mod.Topology, link: LinkSpec, engine: str = "tbf",
                 binary: Path | None = None, realtime: bool = True):
        if engine not in ("tbf", "linkem"):
            raise ValueError(f"unknown bottleneck engine {engine!r}")
        if engine == "tbf" and (link.up.trace or link.down.trace):
            raise ValueError("capacity traces need engine='linkem'")
        self.topo = topo
        self.link = link
        self.engine = engine
        self.binary = Path(binary) if binary else linkem_binary()
        self.realtime = realtime
        self.proc: subprocess.Popen | None = None
        self._lines: queue.Queue[str] = queue.Queue()
        self._reader: threading.Thread | None = None
        self.final_stats: list[dict] | None = None

    def __enter__(self):
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    def _script(self, name: str, *args) -> None:
        self.topo.node_script("bs", name, *[str(a) for a in args])

    def start(self) -> "Shaping":
        if not self.binary.exists():
            raise RuntimeError(f"rsfc-linkem not found at {self.binary} "
                               f"(build target rsfc-linkem; set RSFC_BUILD_DIR)")
        phone_if = self.topo.iface("bs", "phone")
        core_if = self.topo.iface("bs", "gw")
        if self.engine == "tbf":
            # Uplink leaves bs towards the gateway, downlink towards the phone.
            for dev, d in ((core_if, self.link.up), (phone_if, self.link.down)):
                if d.rate_bps:
                    self._script("bs-bottleneck.sh", dev, d.rate_bps, d.buffer_bytes or 100_000_000)
        with_bottleneck = self.engine == "linkem"
        argv = [str(self.binary),
                "--link", self.link.up.linkem_arg(UPLINK_QUEUE, with_bottleneck),
                "--link", self.link.down.linkem_arg(DOWNLINK_QUEUE, with_bottleneck)]
        if self.realtime:
            argv.append("--realtime")
        self.log_path = self.topo.workdir / "linkem.log"
        self.topo.workdir.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        try:
            self.proc = self.topo.popen("bs", argv, stdout=subprocess.PIPE, stderr=log,
                                        stdin=subprocess.DEVNULL, text=True, bufsize=1)
        finally:
            log.close()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        try:
            line = self._lines.get(timeout=10)
        except queue.Empty:
            line = None
        if line != "ready":
            raise RuntimeError(f"rsfc-linkem did not start ({line!r}); see {self.log_path}")
        self._script("bs-delay.sh", UPLINK_QUEUE, DOWNLINK_QUEUE, phone_if, core_if)
        return self

    def _read(self) -> None:
        assert self.proc and self.proc.stdout
        for line in self.proc.stdout:
            self._lines.put(line.strip())

    def _collect(self, n: int, timeout: float) -> list[dict]:
        out = []
        deadline = time.monotonic() + timeout
        while len(out) < n:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if line.startswith("{"):
                out.append(json.loads(line))
        return out

    def linkem_stats(self) -> list[dict]:
        """Counters of both directions now: [uplink, downlink]."""
        if self.proc is None or self.proc.poll() is not None:
            return self.final_stats or []
        os.kill(self.proc.pid, signal.SIGUSR1)
        return self._collect(2, 3)

    def tc_stats(self) -> dict:
        """`tc -s -j qdisc` of both bs interfaces (TBF engine: drops and backlog)."""
        out = {}
        for name, towards in (("up", "gw"), ("down", "phone")):
            r = self.topo.run("bs", ["tc", "-s", "-j", "qdisc", "show", "dev",
                                     self.topo.iface("bs", towards)], check=False)
            try:
                out[name] = json.loads(r.stdout)
            except json.JSONDecodeError:
                out[name] = []
        return out

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        try:
            if self.topo.is_up:
                self.topo.node_script("bs", "bs-delay.sh", "--flush")
                for towards in ("gw", "phone"):
                    self._script("bs-bottleneck.sh", self.topo.iface("bs", towards), "--clear")
        except Exception:
            pass
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=5)
            if self._reader:
                self._reader.join(timeout=2)
            self.final_stats = self._collect(2, 0.5)
        self.proc = None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="apply an emulated cellular link to a lab "
                                 "topology left up by `lab/topo.py up`")
    sub = ap.add_subparsers(dest="cmd", required=True)
    ap_apply = sub.add_parser("apply", help="apply until Ctrl-C, then remove")
    ap_apply.add_argument("--name", required=True)
    ap_apply.add_argument("--scenario", "--link", dest="link", default="3g",
                          choices=sorted(LINKS), help="named link (default 3g)")
    ap_apply.add_argument("--engine", default="tbf", choices=("tbf", "linkem"))
    a = ap.parse_args(argv)
    t = topo_mod.Topology(a.name).attach()  # its namespaces are not ours to delete
    link = LINKS[a.link]
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    s = Shaping(t, link, engine=a.engine)
    try:
        s.start()
        print(f"{a.link} applied in {t.ns('bs')}: {json.dumps(link.to_dict())}; "
              f"Ctrl-C removes it", flush=True)
        signal.sigwait({signal.SIGINT, signal.SIGTERM})
    finally:
        s.stop()
    print(json.dumps(s.final_stats))
    return 0


if __name__ == "__main__":
    sys.exit(main())
