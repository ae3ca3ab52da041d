"""Started as root outside systemd, rsfcd keeps only CAP_NET_ADMIN once its queues and its
metrics socket are bound (CAP_NET_BIND_SERVICE too when the metrics port is below 1024):
effective, permitted and bounding sets of every thread, nothing inheritable or ambient,
no_new_privs. The uid stays 0. With that it still clamps, reloads on SIGHUP and drains its
queue on SIGTERM (which needs CAP_NET_ADMIN)."""

import math
import os
import signal
import time
from pathlib import Path

from helpers import static_cfg
from wire import Conn, check_window

CAP_NET_BIND_SERVICE = 10
CAP_NET_ADMIN = 12
TARGET = 20000


def thread_status(pid: int) -> dict[str, dict[str, str]]:
    """Every thread's /proc status fields, by thread name."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        fields = dict(line.split(":\t", 1) for line in (task / "status").read_text().splitlines()
                      if ":\t" in line)
        out[f"{fields['Name'].strip()}/{task.name}"] = {k: v.strip() for k, v in fields.items()}
    return out


def assert_keeps_only(pid: int, keep: int) -> None:
    threads = thread_status(pid)
    assert len(threads) >= 2, f"main thread and a worker expected: {list(threads)}"
    for name, f in threads.items():
        for key in ("CapEff", "CapPrm", "CapBnd"):
            assert int(f[key], 16) == keep, f"{name}: {key} {f[key]}, want {keep:#x}"
        assert int(f["CapInh"], 16) == 0, f"{name}: CapInh {f['CapInh']}"
        assert int(f["CapAmb"], 16) == 0, f"{name}: CapAmb {f['CapAmb']}"
        assert f["NoNewPrivs"] == "1", f"{name}: NoNewPrivs {f['NoNewPrivs']}"
        assert f["Uid"].split()[0] == "0", f"{name}: uid {f['Uid']}"


def test_root_keeps_only_net_admin_and_still_works(wire, rsfcd):
    d = rsfcd(static_cfg(uplink=TARGET))
    assert_keeps_only(d.proc.pid, 1 << CAP_NET_ADMIN)
    assert "privileges: kept cap_net_admin, bounding set cap_net_admin" in d.log_path.read_text()

    c = Conn(wire)
    c.handshake()
    want = math.ceil(TARGET / (1 << 7))
    check_window(c.to_phone(ack_off=1_000_000, window=0xFFFF), want, "clamp after the drop")

    os.kill(d.proc.pid, signal.SIGHUP)
    deadline = time.monotonic() + 5
    while "reload:" not in d.log_path.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "applied" in d.log_path.read_text(), d.log_tail()

    assert d.stop() == 0, d.log_tail()
    log = d.log_path.read_text()
    assert "drained" in log and "unbound" in log, log


def test_low_metrics_port_keeps_bind_service(rsfcd):
    d = rsfcd({"metrics": {"listen": "127.0.0.1:80"}})
    assert_keeps_only(d.proc.pid, (1 << CAP_NET_ADMIN) | (1 << CAP_NET_BIND_SERVICE))
