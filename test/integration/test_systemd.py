"""systemd Type=notify with WatchdogSec=: a unix datagram socket stands in for systemd's
NOTIFY_SOCKET. rsfcd says READY=1 once its queue is bound, then WATCHDOG=1 regularly, but
only while its worker makes progress: with the worker thread frozen (ptrace-interrupted,
the rest of the process running), the pings stop; thawed, they resume."""

import ctypes
import os
import socket
import time
from pathlib import Path

PTRACE_DETACH = 17
PTRACE_SEIZE = 0x4206
PTRACE_INTERRUPT = 0x4207
WALL = 0x40000000

_libc = ctypes.CDLL(None, use_errno=True)
_libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
_libc.ptrace.restype = ctypes.c_long


def _ptrace(req: int, tid: int) -> None:
    if _libc.ptrace(req, tid, None, None) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"ptrace({req:#x}, {tid}): {os.strerror(err)}")


class FrozenThread:
    """Stops one thread of another process (PTRACE_SEIZE + PTRACE_INTERRUPT: no group stop,
    its siblings keep running) until the block ends."""

    def __init__(self, tid: int):
        self.tid = tid

    def __enter__(self):
        _ptrace(PTRACE_SEIZE, self.tid)
        _ptrace(PTRACE_INTERRUPT, self.tid)
        os.waitpid(self.tid, WALL)
        return self

    def __exit__(self, *exc):
        _ptrace(PTRACE_DETACH, self.tid)
        return False


def thread_id(pid: int, name: str) -> int:
    for task in Path(f"/proc/{pid}/task").iterdir():
        if (task / "comm").read_text().strip() == name:
            return int(task.name)
    raise AssertionError(f"no thread {name} in process {pid}")


def collect(sock: socket.socket, seconds: float) -> list[str]:
    out = []
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        sock.settimeout(left)
        try:
            out.append(sock.recv(4096).decode())
        except TimeoutError:
            break
    return out


def test_watchdog_pings_only_while_the_worker_progresses(lab, rsfcd, monkeypatch):
    path = lab.workdir / "notify.sock"
    sd = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sd.bind(str(path))
    # WatchdogSec=2: a check every 0.5 s; the idle worker's 1 s tick proves its progress.
    monkeypatch.setenv("NOTIFY_SOCKET", str(path))
    monkeypatch.setenv("WATCHDOG_USEC", "2000000")
    monkeypatch.delenv("WATCHDOG_PID", raising=False)
    d = rsfcd()
    try:
        first = collect(sd, 3.5)
        assert first and first[0] == "READY=1", first
        bound = lab.run("gw", ["cat", "/proc/net/netfilter/nfnetlink_queue"]).stdout
        assert bound.split() and bound.split()[0] == "0", f"queue 0 not bound: {bound!r}"
        assert first.count("WATCHDOG=1") >= 2, first

        worker = thread_id(d.proc.pid, "rsfcd-q0")
        with FrozenThread(worker):
            collect(sd, 1.1)  # pings the gate let through just before the freeze
            frozen = collect(sd, 3)
            d.metrics()  # the main thread still serves /metrics
        assert "WATCHDOG=1" not in frozen, frozen

        thawed = collect(sd, 3)
        assert thawed.count("WATCHDOG=1") >= 1, thawed
        assert "made no progress" in d.log_path.read_text()
    finally:
        sd.close()
