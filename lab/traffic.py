#!/usr/bin/python3
"""Traffic for the lab experiments: bulk TCP flows and web page loads over real kernel TCP
(stdlib only; run inside a namespace with `ip netns exec`).

Every time is CLOCK_MONOTONIC (shared by all network namespaces) minus --t0, so the
samples of every process of one experiment line up with each other and with rsfcd's
decision log.

    traffic.py server --port 5300 --t0 T            # on srv; JSON on stdout at SIGTERM/SIGINT
    traffic.py bulk --dst 198.19.0.2 --port 5300 --dir up --tag ul --duration 30 --cc cubic --t0 T
    traffic.py web --dst 198.19.0.2 --port 5300 --start 5 --stop 60 --t0 T
    traffic.py ping --dst 198.19.0.2 --duration 60 --t0 T     # lab/pinger.py, on t0's clock

One server answers everything on one port; the first line a client sends says what it is:
  BULK-UP <tag>\\n              the client sends until it stops; the server reads to EOF
  BULK-DOWN <tag> <seconds>\\n  the server sends for <seconds>, then closes its side
  GET /<bytes> HTTP/1.1\\r\\n...  HTTP/1.1 keep-alive: a response with <bytes> of body

Throughput is measured at the SENDER from the kernel's tcp_info: `delivered` counts every
segment the receiver has got, acknowledged cumulatively or by SACK, each once. After a
drop-tail loss the receiver's in-order byte count stalls for a whole buffer's time and then
jumps; the delivered count does not, so rates over any window (phases of an experiment)
are right. The sender samples every --sample seconds:
    [t, delivered_bytes, bytes_acked, bytes_retrans, cwnd_bytes, srtt_ms, snd_wnd_bytes]
snd_wnd is the window the sender's kernel accepted from the receiver (after rsfcd).
The receiver samples [t, bytes_received_in_order].
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import select
import signal
import socket
import struct
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

CHUNK = 64 * 1024
_PAYLOAD = bytes(CHUNK)

# struct tcp_info offsets (linux/tcp.h; stable ABI, fields only ever appended).
_TI_SND_MSS = 16      # u32
_TI_RTT = 68          # u32, us (smoothed)
_TI_SND_CWND = 80     # u32, segments
_TI_BYTES_ACKED = 120  # u64
_TI_DELIVERED = 192    # u32, segments (acked or sacked, each once)
_TI_BYTES_RETRANS = 208  # u64
_TI_SND_WND = 228      # u32, bytes (Linux >= 5.19)
_TI_LEN = 232


def now_rel(t0: float) -> float:
    return time.monotonic() - t0


def tcp_sample(sock: socket.socket, t: float) -> list | None:
    try:
        raw = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
    except OSError:
        return None
    if len(raw) < _TI_LEN:
        raw = raw + bytes(_TI_LEN - len(raw))
    mss = struct.unpack_from("I", raw, _TI_SND_MSS)[0]
    rtt_us = struct.unpack_from("I", raw, _TI_RTT)[0]
    cwnd = struct.unpack_from("I", raw, _TI_SND_CWND)[0]
    acked = struct.unpack_from("Q", raw, _TI_BYTES_ACKED)[0]
    delivered = struct.unpack_from("I", raw, _TI_DELIVERED)[0]
    retrans = struct.unpack_from("Q", raw, _TI_BYTES_RETRANS)[0]
    snd_wnd = struct.unpack_from("I", raw, _TI_SND_WND)[0]
    # delivered counts segments of the current MSS; the SYN counts as one.
    return [round(t, 4), max(0, delivered - 1) * mss, acked, retrans, cwnd * mss,
            round(rtt_us / 1000.0, 2), snd_wnd]


def set_cc(sock: socket.socket, cc: str | None) -> None:
    if cc:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, cc.encode())


def send_for(sock: socket.socket, seconds: float, t0: float, sample: float,
             stop: threading.Event | None = None, samples: list | None = None) -> list:
    """Sends as fast as the socket takes data for `seconds` (or until `stop`), sampling
    tcp_info; then waits for the peer's FIN (everything delivered). Returns the samples,
    appended to `samples` as they are taken when given (a caller that reports before the
    drain ends, e.g. the server stopped at the end of a test, still has them)."""
    samples = [] if samples is None else samples
    sock.setblocking(False)
    start = time.monotonic()
    end = start + seconds
    next_sample = start
    while True:
        t = time.monotonic()
        if t >= next_sample:
            s = tcp_sample(sock, t - t0)
            if s:
                samples.append(s)
            next_sample += sample
        if t >= end or (stop is not None and stop.is_set()):
            break
        _, w, _ = select.select([], [sock], [], max(0.0, min(next_sample, end) - t))
        if w:
            try:
                sock.send(_PAYLOAD)
            except BlockingIOError:
                pass
            except OSError:
                break
    try:
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        pass
    # Drain: keep sampling until the peer closes (its FIN after our last byte), so the
    # buffer's tail is measured too. Bounded: a dead path must not hang the experiment.
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        t = time.monotonic()
        if t >= next_sample:
            s = tcp_sample(sock, t - t0)
            if s:
                samples.append(s)
            next_sample += sample
        r, _, _ = select.select([sock], [], [], max(0.0, next_sample - t))
        if r:
            try:
                if not sock.recv(4096):
                    break
            except BlockingIOError:
                continue
            except OSError:
                break
    s = tcp_sample(sock, now_rel(t0))
    if s:
        samples.append(s)
    return samples


def recv_all(sock: socket.socket, t0: float, sample: float, first: bytes = b"",
             samples: list | None = None) -> list:
    """Reads to EOF; samples [t, bytes] every `sample` seconds (and at the end), appended
    to `samples` as they are taken when given (see send_for)."""
    samples = [] if samples is None else samples
    total = len(first)
    buf = bytearray(256 * 1024)
    sock.setblocking(True)
    sock.settimeout(sample)
    next_sample = time.monotonic()
    while True:
        try:
            n = sock.recv_into(buf)
        except socket.timeout:
            n = -1
        except OSError:
            break
        t = time.monotonic()
        if n == 0:
            break
        if n > 0:
            total += n
        if t >= next_sample:
            samples.append([round(t - t0, 4), total])
            next_sample = t + sample
    samples.append([round(now_rel(t0), 4), total])
    return samples


# ---- server ----------------------------------------------------------------------------
class Server:
    def __init__(self, port: int, t0: float, sample: float, v6: bool = False):
        self.t0 = t0
        self.sample = sample
        self.conns: list[dict] = []
        self.lock = threading.Lock()
        fam = socket.AF_INET6 if v6 else socket.AF_INET
        self.sock = socket.socket(fam, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("::" if v6 else "0.0.0.0", port))
        self.sock.listen(128)
        self.web_requests = 0
        self.web_bytes = 0

    def serve(self, stop: threading.Event) -> None:
        self.sock.settimeout(0.2)
        while not stop.is_set():
            try:
                c, peer = self.sock.accept()
            except socket.timeout:
                continue
            threading.Thread(target=self._handle, args=(c, peer), daemon=True).start()

    def _handle(self, c: socket.socket, peer) -> None:
        try:
            c.settimeout(30)
            head = b""
            while b"\n" not in head and len(head) < 4096:
                d = c.recv(4096)
                if not d:
                    return
                head += d
            line, _, rest = head.partition(b"\n")
            words = line.decode(errors="replace").split()
            rec = {"peer": f"{peer[0]}:{peer[1]}", "t_accept": round(now_rel(self.t0), 4)}
            # A bulk transfer's record is listed at once and its samples filled in as they are
            # taken: a server stopped while a transfer still drains (a trace's outage holding
            # the tail) reports what was measured instead of nothing.
            if words and words[0] == "BULK-UP":
                rec.update(kind="up", tag=words[1] if len(words) > 1 else "", recv_samples=[])
                with self.lock:
                    self.conns.append(rec)
                recv_all(c, self.t0, self.sample, rest, samples=rec["recv_samples"])
            elif words and words[0] == "BULK-DOWN":
                rec.update(kind="down", tag=words[1], duration=float(words[2]), send_samples=[])
                with self.lock:
                    self.conns.append(rec)
                send_for(c, float(words[2]), self.t0, self.sample, samples=rec["send_samples"])
            else:
                if words and words[0] == "GET":
                    rec.update(kind="web")
                    self._web(c, head)
                    rec["t_close"] = round(now_rel(self.t0), 4)
                else:
                    rec.update(kind="unknown", line=line[:80].decode(errors="replace"))
                with self.lock:
                    self.conns.append(rec)
        except OSError:
            pass
        finally:
            c.close()

    def _web(self, c: socket.socket, data: bytes) -> None:
        """HTTP/1.1 keep-alive: GET /<n> -> n bytes of body, until the client closes."""
        c.setblocking(True)
        c.settimeout(120)
        while True:
            while b"\r\n\r\n" not in data:
                d = c.recv(4096)
                if not d:
                    return
                data += d
            req, _, data = data.partition(b"\r\n\r\n")
            path = req.split(b"\r\n", 1)[0].split()[1].decode()
            try:
                n = int(path.lstrip("/"))
            except ValueError:
                c.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                continue
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
                      b"Content-Length: %d\r\n\r\n" % n)
            left = n
            while left > 0:
                k = min(left, CHUNK)
                c.sendall(_PAYLOAD[:k])
                left -= k
            with self.lock:
                self.web_requests += 1
                self.web_bytes += n


def cmd_server(a) -> int:
    srv = Server(a.port, a.t0, a.sample, v6=a.v6)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    print("ready", file=sys.stderr, flush=True)
    srv.serve(stop)
    time.sleep(0.3)  # let handlers that just finished append their records
    with srv.lock:
        # Copies: a transfer still draining keeps appending to its own sample list.
        out = {"conns": [{k: list(v) if isinstance(v, list) else v for k, v in r.items()}
                         for r in srv.conns], "web_requests": srv.web_requests,
               "web_bytes": srv.web_bytes}
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")
    sys.stdout.flush()
    os._exit(0)  # handler threads may still be blocked in recv


# ---- bulk client -------------------------------------------------------------------------
def connect(dst: str, port: int, cc: str | None, timeout: float = 30) -> socket.socket:
    fam = socket.AF_INET6 if ":" in dst else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_STREAM)
    set_cc(s, cc)
    s.settimeout(timeout)
    s.connect((dst, port))
    return s


def cmd_bulk(a) -> int:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    out = {"tag": a.tag, "dir": a.dir, "cc": a.cc, "t_start": round(now_rel(a.t0), 4)}
    try:
        s = connect(a.dst, a.port, a.cc)
    except OSError as e:
        out["error"] = f"connect: {e}"
        json.dump(out, sys.stdout)
        return 1
    out["t_connected"] = round(now_rel(a.t0), 4)
    out["local"] = "%s:%d" % s.getsockname()[:2]
    if a.dir == "up":
        s.sendall(f"BULK-UP {a.tag}\n".encode())
        out["send_samples"] = send_for(s, a.duration, a.t0, a.sample, stop)
    else:
        s.sendall(f"BULK-DOWN {a.tag} {a.duration}\n".encode())
        out["recv_samples"] = recv_all(s, a.t0, a.sample)
    s.close()
    out["t_end"] = round(now_rel(a.t0), 4)
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")
    return 0


# ---- web client --------------------------------------------------------------------------
def http_get(s: socket.socket, nbytes: int) -> int:
    """One GET on a keep-alive connection; returns the body bytes read."""
    s.sendall(b"GET /%d HTTP/1.1\r\nHost: srv\r\nConnection: keep-alive\r\n\r\n" % nbytes)
    data = b""
    while b"\r\n\r\n" not in data:
        d = s.recv(65536)
        if not d:
            raise OSError("connection closed in the headers")
        data += d
    head, _, body = data.partition(b"\r\n\r\n")
    length = None
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"content-length":
            length = int(v)
    if length is None:
        raise OSError("no Content-Length")
    got = len(body)
    while got < length:
        d = s.recv(min(262144, length - got))
        if not d:
            raise OSError("connection closed in the body")
        got += len(d)
    return got


def load_page(dst: str, port: int, objects: list[int], conns: int, cc: str | None,
              timeout: float) -> tuple[bool, str]:
    """Loads one page: objects[0] first (the HTML) on one connection, then the rest over
    `conns` parallel keep-alive connections (opened with the first, like a browser's
    preconnect). Returns (complete, error)."""
    deadline = time.monotonic() + timeout
    work: queue.Queue[int] = queue.Queue()
    for n in objects[1:]:
        work.put(n)
    html_done = threading.Event()
    errors: list[str] = []
    socks: list[socket.socket] = []

    def worker(i: int) -> None:
        try:
            s = connect(dst, port, cc, timeout=max(0.1, deadline - time.monotonic()))
            socks.append(s)
            s.settimeout(max(0.1, deadline - time.monotonic()))
            if i == 0:
                http_get(s, objects[0])
                html_done.set()
            elif not html_done.wait(max(0.0, deadline - time.monotonic())):
                return
            while True:
                try:
                    n = work.get_nowait()
                except queue.Empty:
                    return
                s.settimeout(max(0.1, deadline - time.monotonic()))
                http_get(s, n)
        except OSError as e:
            errors.append(str(e))
            html_done.set()

    threads = [threading.Thread(target=worker, args=(i,), daemon=True)
               for i in range(conns if len(objects) > 1 else 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()) + 1)
    complete = not errors and work.empty() and all(not t.is_alive() for t in threads)
    for s in socks:
        try:
            s.close()
        except OSError:
            pass
    return complete, "; ".join(errors[:2])


PAGES = {
    # One 320 KB object over one connection.
    "single": ([320 * 1024], 1),
    # A 30 KB HTML page, then 29 objects of 10 KB over 6 parallel connections (320 KB).
    "multi": ([30 * 1024] + [10 * 1024] * 29, 6),
}


def cmd_web(a) -> int:
    kinds = a.pages.split(",")
    loads = []
    t_start = a.t0 + a.start
    while time.monotonic() < t_start:
        time.sleep(min(0.05, t_start - time.monotonic()))
    i = 0
    while now_rel(a.t0) < a.stop:
        kind = kinds[i % len(kinds)]
        objects, conns = PAGES[kind]
        t = now_rel(a.t0)
        complete, err = load_page(a.dst, a.port, objects, conns, a.cc, a.timeout)
        dt = now_rel(a.t0) - t
        loads.append({"page": kind, "t": round(t, 4), "seconds": round(dt, 4),
                      "complete": complete, "error": err})
        print(f"web: {kind} {dt:.2f} s{'' if complete else ' INCOMPLETE ' + err}",
              file=sys.stderr, flush=True)
        i += 1
        time.sleep(a.gap)
    json.dump({"loads": loads, "pages": {k: {"objects": len(v[0]), "bytes": sum(v[0]),
                                             "connections": v[1]} for k, v in PAGES.items()},
               "timeout_s": a.timeout}, sys.stdout)
    sys.stdout.write("\n")
    return 0


def cmd_ping(a) -> int:
    import pinger  # lab/pinger.py; its sample times are relative to its own start
    start = now_rel(a.t0)
    r = pinger.ping(a.dst, a.interval, a.duration, a.linger, 56)
    r["samples"] = [[round(t + start, 4), rtt] for t, rtt in r["samples"]]
    r["t_start"] = round(start, 4)
    json.dump(r, sys.stdout)
    sys.stdout.write("\n")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for p in (sub.add_parser("server"), sub.add_parser("bulk"), sub.add_parser("web"),
              sub.add_parser("ping")):
        p.add_argument("--port", type=int, default=5300)
        p.add_argument("--t0", type=float, required=True,
                       help="CLOCK_MONOTONIC seconds of the experiment's time zero")
        p.add_argument("--sample", type=float, default=0.1, help="sampling period [s]")
        if p.prog.endswith("server"):
            p.add_argument("--v6", action="store_true")
            p.set_defaults(func=cmd_server)
        else:
            p.add_argument("--dst", required=True)
            p.add_argument("--cc", default=None, help="TCP congestion control of the client")
    bulk = sub.choices["bulk"]
    bulk.add_argument("--dir", choices=("up", "down"), required=True)
    bulk.add_argument("--tag", default="flow")
    bulk.add_argument("--duration", type=float, required=True)
    bulk.set_defaults(func=cmd_bulk)
    web = sub.choices["web"]
    web.add_argument("--pages", default="single,multi", help="page kinds, in turn")
    web.add_argument("--start", type=float, default=0.0, help="first load at t0 + start")
    web.add_argument("--stop", type=float, required=True, help="no new load after t0 + stop")
    web.add_argument("--gap", type=float, default=1.0, help="think time between loads [s]")
    web.add_argument("--timeout", type=float, default=60.0, help="a load gives up after [s]")
    web.set_defaults(func=cmd_web)
    ping = sub.choices["ping"]
    ping.add_argument("--duration", type=float, required=True)
    ping.add_argument("--interval", type=float, default=0.1)
    ping.add_argument("--linger", type=float, default=6.0,
                      help="seconds to wait for late replies after the last request")
    ping.set_defaults(func=cmd_ping)
    a = ap.parse_args(argv)
    return a.func(a)


if __name__ == "__main__":
    sys.exit(main())
