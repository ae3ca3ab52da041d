"""Helpers for the real-kernel tests: configs, `ss -tin` sampling, iperf3, tcpdump."""

from __future__ import annotations

import json
import math
import re
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import topo as topo_mod


def static_cfg(uplink: int | None = None, downlink: int | None = None, **extra) -> dict:
    """rsfcd config overrides: a static clamp on each knob given, the other knob off."""
    cfg = {
        "uplink": {"policy": "static" if uplink else "off",
                   "static_window_bytes": uplink or 65535},
        "downlink": {"policy": "static" if downlink else "off",
                     "static_window_bytes": downlink or 65535},
    }
    cfg.update(extra)
    return cfg


def round_up(nbytes: int, scale: int) -> int:
    """Bytes of the smallest raw window >= nbytes under `scale` (what rsfcd advertises)."""
    unit = 1 << min(scale, 14)
    return math.ceil(nbytes / unit) * unit


@dataclass
class SsSample:
    t: float
    local: str
    peer: str
    snd_wscale: int
    rcv_wscale: int
    snd_wnd: int
    bytes_acked: int
    bytes_received: int
    line: str


def parse_ss(text: str, t: float) -> list[SsSample]:
    out = []
    conn = None
    for line in text.splitlines():
        if not line.strip():
            continue
        if not line[0].isspace():  # [state] recv-q send-q local peer
            addrs = [tok for tok in line.split() if ":" in tok]
            conn = (addrs[0], addrs[1]) if len(addrs) >= 2 else None
            continue
        if conn is None:
            continue
        fields = dict(re.findall(r"(\w+):(\S+)", line))
        if "snd_wnd" not in fields:
            continue
        ws = fields.get("wscale", "0,0").split(",")
        out.append(SsSample(t, conn[0], conn[1], int(ws[0]), int(ws[1]), int(fields["snd_wnd"]),
                            int(fields.get("bytes_acked", 0)),
                            int(fields.get("bytes_received", 0)), line.strip()))
        conn = None
    return out


class SsSampler:
    """Polls `ss -tin` in one namespace in a background thread, keeping every sample of
    the connections whose peer port is `peer_port` (either end)."""

    def __init__(self, topo, role: str, port: int, interval: float = 0.05):
        self.topo, self.role, self.port, self.interval = topo, role, port, interval
        self.samples: list[SsSample] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=5)
        return False

    def _loop(self):
        flt = f"( sport = :{self.port} or dport = :{self.port} )"
        while not self._stop.is_set():
            try:
                r = self.topo.run(self.role, ["ss", "-tinH", "state", "established", flt],
                                  check=False, timeout=5)
                self.samples += parse_ss(r.stdout, time.monotonic())
            except Exception as e:  # keep sampling; reported by the test if it matters
                self.errors.append(repr(e))
            self._stop.wait(self.interval)

    def dump(self, path: Path) -> None:
        path.write_text("\n".join(f"{s.t:.3f} {s.local} {s.peer} {s.line}" for s in self.samples))


def wait_listening(topo, role: str, port: int, timeout: float = 5) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = topo.run(role, ["ss", "-tlnH", f"( sport = :{port} )"], check=False).stdout
        if out.strip():
            return
        time.sleep(0.05)
    raise AssertionError(f"nothing listening on port {port} in {role} after {timeout}s")


def iperf3_server(topo, port: int, log: Path):
    f = open(log, "wb")
    p = topo.popen("srv", ["iperf3", "-s", "-1", "-p", str(port)], stdout=f,
                   stderr=subprocess.STDOUT)
    f.close()
    wait_listening(topo, "srv", port)
    return p


def iperf3_client(topo, dst: str, port: int, seconds: float, reverse: bool = False,
                  extra=()) -> dict:
    cmd = ["iperf3", "-c", dst, "-p", str(port), "-t", str(seconds), "-C", "cubic", "-J",
           "-i", "0.5", *extra]
    if reverse:
        cmd.append("-R")
    r = topo.run("phone", cmd, check=False, timeout=seconds + 20)
    try:
        res = json.loads(r.stdout)
    except json.JSONDecodeError:
        raise AssertionError(f"iperf3 gave no JSON (rc {r.returncode}): {r.stdout[-500:]} "
                             f"{r.stderr[-500:]}")
    if r.returncode != 0 or "error" in res:
        raise AssertionError(f"iperf3 failed (rc {r.returncode}): {res.get('error')}")
    return res


class Tcpdump(topo_mod.Capture):
    """A bounded capture (first `count` packets, headers only) in one namespace."""

    def __init__(self, topo, role: str, dev: str, path: Path, count: int = 4000,
                 snaplen: int = 128):
        super().__init__(topo, role, dev, path, snaplen=snaplen, count=count, args=("-n",),
                         stop_timeout=3)
