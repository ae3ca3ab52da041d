#!/usr/bin/python3
"""ICMP echo RTT sampler for the lab (the machine has no iputils ping).

Sends one echo request every --interval seconds for --duration seconds (raw socket: run as
root, inside the namespace whose RTT is wanted), waits --linger seconds for late replies
(bloated buffers: several seconds), then prints one JSON object:

    {"dst": ..., "sent": N, "received": M, "lost": N-M,
     "samples": [[t_send_s, rtt_ms], ...]}   # t_send_s relative to the first request

IPv4 and IPv6 (the address decides). Only replies to our own identifier count.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import select
import socket
import struct
import sys
import time


def _checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    s = (s >> 16) + (s & 0xFFFF)
    s += s >> 16
    return ~s & 0xFFFF


def ping(dst: str, interval: float, duration: float, linger: float, size: int) -> dict:
    v6 = ipaddress.ip_address(dst).version == 6
    if v6:
        sock = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6)
        echo_req, echo_rep = 128, 129
    else:
        sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
        echo_req, echo_rep = 8, 0
    sock.setblocking(False)
    ident = os.getpid() & 0xFFFF
    payload = b"rsfc-lab" + bytes(max(0, size - 8))
    sent_at: dict[int, float] = {}
    rtts: dict[int, float] = {}
    t0 = time.monotonic()
    next_send = t0
    seq = 0
    stop_sending = t0 + duration
    deadline = stop_sending + linger
    while True:
        now = time.monotonic()
        if now >= deadline or (now >= stop_sending and len(rtts) == len(sent_at)):
            break
        if now >= next_send and now < stop_sending:
            hdr = struct.pack("!BBHHH", echo_req, 0, 0, ident, seq & 0xFFFF)
            # The kernel fills in the ICMPv6 checksum (it needs the pseudo-header).
            csum = 0 if v6 else _checksum(hdr + payload)
            pkt = struct.pack("!BBHHH", echo_req, 0, csum, ident, seq & 0xFFFF) + payload
            try:
                sock.sendto(pkt, (dst, 0))
                sent_at[seq & 0xFFFF] = now
            except OSError:
                sent_at[seq & 0xFFFF] = now  # counted as sent and lost
            seq += 1
            next_send += interval
            continue
        wait_until = min(next_send if now < stop_sending else deadline, deadline)
        r, _, _ = select.select([sock], [], [], max(0.0, wait_until - now))
        if not r:
            continue
        while True:
            try:
                data, _ = sock.recvfrom(4096)
            except BlockingIOError:
                break
            t = time.monotonic()
            icmp = data if v6 else data[(data[0] & 0x0F) * 4:]
            if len(icmp) < 8:
                continue
            typ, _, _, rid, rseq = struct.unpack("!BBHHH", icmp[:8])
            if typ == echo_rep and rid == ident and rseq in sent_at and rseq not in rtts:
                rtts[rseq] = (t - sent_at[rseq]) * 1000.0
    sock.close()
    samples = sorted([sent_at[s] - t0, r] for s, r in rtts.items())
    return {"dst": dst, "interval_s": interval, "sent": len(sent_at), "received": len(rtts),
            "lost": len(sent_at) - len(rtts), "samples": samples}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dst")
    ap.add_argument("--interval", type=float, default=0.2)
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--linger", type=float, default=5.0,
                    help="seconds to wait for replies after the last request")
    ap.add_argument("--size", type=int, default=56, help="payload bytes")
    a = ap.parse_args(argv)
    json.dump(ping(a.dst, a.interval, a.duration, a.linger, a.size), sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
