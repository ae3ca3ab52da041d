"""Crafted packets through the lab: raw frames sent on one end's interface, captured on the
other end's interface, compared byte for byte.

Crafted traffic runs between "phantom" addresses that no namespace owns (the last router
has a static neighbour entry with a MAC nobody has): no kernel answers with a RST, yet the
far end's interface sees every frame.
"""

from __future__ import annotations

import math
import os
import random
import select
import socket
import struct
import time
from dataclasses import dataclass, field

from scapy.all import (  # noqa: F401  (re-exported for tests)
    ICMP, IP, TCP, UDP, Ether, ICMPv6EchoRequest, IPOption_EOL, IPOption_NOP,
    IPOption_Router_Alert, IPv6, IPv6ExtHdrDestOpt, IPv6ExtHdrFragment, IPv6ExtHdrHopByHop,
    PadN, Raw, wrpcap)

# Phantom ends (inside the lab's subscriber / server nets, owned by nobody).
PH4, PH6 = "198.18.0.77", "2001:2:0:1::77"
SV4, SV6 = "198.19.0.77", "2001:2:0:2::77"
PHANTOM_MAC = "02:00:00:00:00:77"
HOPS = 2  # gw and bs each decrement TTL / hop limit once

ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4


def phantom_ips(v6: bool):
    return (PH6, SV6) if v6 else (PH4, SV4)


def setup_phantoms(topo) -> None:
    for addr in (PH4, PH6):
        topo.phantom("phone", addr, PHANTOM_MAC)
    for addr in (SV4, SV6):
        topo.phantom("srv", addr, PHANTOM_MAC)


def ip_addrs(ipb: bytes) -> tuple[bytes, bytes]:
    if ipb[0] >> 4 == 4:
        return ipb[12:16], ipb[16:20]
    return ipb[8:24], ipb[24:40]


def forwarded(ipb: bytes, hops: int = HOPS) -> bytes:
    """What a packet looks like after `hops` routers that changed nothing else (raw, so it
    works for malformed packets too): TTL/hop limit lowered, IPv4 header checksum redone."""
    b = bytearray(ipb)
    if b[0] >> 4 == 4:
        b[8] -= hops
        ihl = (b[0] & 0x0F) * 4
        b[10:12] = b"\0\0"
        b[10:12] = struct.pack("!H", inet_checksum(bytes(b[:ihl])))
    else:
        b[7] -= hops
    return bytes(b)


def inet_checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def scapy_ip(ipb: bytes):
    return IP(ipb) if ipb[0] >> 4 == 4 else IPv6(ipb)


def with_window(ipb: bytes, window: int, hops: int = HOPS) -> bytes:
    """Expected bytes of a well-formed TCP packet forwarded with its window set to `window`:
    built by scapy (checksums recomputed by scapy, independent of rsfcd's code)."""
    p = scapy_ip(forwarded(ipb, hops))
    p[TCP].window = window
    del p[TCP].chksum
    return bytes(p)


def checksums_valid(ipb: bytes) -> bool:
    """Recomputes the IPv4 header and TCP checksums with scapy and compares."""
    p = scapy_ip(ipb)
    again = p.copy()
    if IP in again:
        del again[IP].chksum
    if TCP in again:
        del again[TCP].chksum
    return bytes(again) == ipb


def tcp_window(ipb: bytes) -> int:
    return scapy_ip(ipb)[TCP].window


def expected_raw(orig_raw: int, scale: int, target: int, min_window: int = 2920,
                 ack: int | None = None, edge: int | None = None) -> int:
    """The docs/DESIGN.md §5 rules, written out independently for the tests: lower to
    max(target, floor) rounded UP through min(scale, 14); keep a previously advertised
    right edge; never above the original."""
    s = min(scale, 14)
    want = max(target, min_window)
    if want >= orig_raw << s:
        return orig_raw
    raw = min(math.ceil(want / (1 << s)), 0xFFFF)
    if edge is not None and ack is not None:
        need = (edge - ack) % (1 << 32)
        if 0 < need < (1 << 31):
            raw = max(raw, math.ceil(need / (1 << s)))
    return min(raw, orig_raw)


class Port:
    """An AF_PACKET socket bound to one interface inside one namespace."""

    def __init__(self, topo, role: str, dev: str, peer_mac: str):
        with topo.netns(role):
            self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
            self.sock.bind((dev, ETH_P_ALL))
        self.role, self.dev = role, dev
        self.peer_mac = peer_mac
        self.mac = topo.mac(role, dev)

    def close(self):
        self.sock.close()

    def drain(self):
        while select.select([self.sock], [], [], 0)[0]:
            self.sock.recv(65536)

    def recv(self, timeout: float):
        """One incoming frame (not our own outgoing ones), or None."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.sock], [], [], left)[0]:
                return None
            data, addr = self.sock.recvfrom(65536)
            if addr[2] != PACKET_OUTGOING:
                return data


@dataclass
class Exchange:
    sent: bytes            # IP packet as sent
    got: bytes | None      # IP packet as it arrived on the far side (None = lost)
    label: str = ""

    @property
    def got_window(self) -> int:
        assert self.got is not None, f"{self.label}: packet did not arrive"
        return tcp_window(self.got)


class Wire:
    """Sends crafted IP packets from one end (phone or srv) and captures them at the other.
    Every frame sent or captured is kept for a pcap (`write_pcap`)."""

    def __init__(self, topo, timeout: float = 2.0):
        self.topo = topo
        self.timeout = timeout
        self.ports = {
            "phone": Port(topo, "phone", "eth0", topo.mac("bs", "phone0")),
            "srv": Port(topo, "srv", "eth0", topo.mac("gw", "srv0")),
        }
        self.frames: list[tuple[float, bytes]] = []
        self.pcap_path = topo.workdir / "crafted.pcap"

    def close(self):
        for p in self.ports.values():
            p.close()

    def write_pcap(self) -> None:
        pkts = []
        for ts, f in self.frames:
            e = Ether(f)
            e.time = ts
            pkts.append(e)
        if pkts:
            wrpcap(str(self.pcap_path), pkts)

    def send(self, frm: str, ipb: bytes, label: str = "", expect: bool = True) -> Exchange:
        """Sends IP packet `ipb` from `frm` ("phone"/"srv"); waits for it on the other end.
        With expect=False, only waits a short while and returns what (if anything) came."""
        src_port = self.ports[frm]
        dst_port = self.ports["srv" if frm == "phone" else "phone"]
        ethertype = 0x0800 if ipb[0] >> 4 == 4 else 0x86DD
        frame = (bytes.fromhex(src_port.peer_mac.replace(":", "")) +
                 bytes.fromhex(src_port.mac.replace(":", "")) + struct.pack("!H", ethertype) + ipb)
        want = ip_addrs(ipb)
        dst_port.drain()
        self.frames.append((time.time(), frame))
        src_port.sock.send(frame)
        deadline = time.monotonic() + (self.timeout if expect else 0.3)
        while True:
            f = dst_port.recv(max(0.0, deadline - time.monotonic()))
            if f is None:
                return Exchange(ipb, None, label)
            et = struct.unpack("!H", f[12:14])[0]
            if et not in (0x0800, 0x86DD):
                continue
            got = f[14:]
            if ip_addrs(got) == want:
                self.frames.append((time.time(), f))
                return Exchange(ipb, got, label)


def tcp_ip(v6: bool, src: str, dst: str, tcp, ipopts=None, ext=None, ip_id: int = 0x1234,
           ttl: int = 64):
    """IP packet bytes (checksums computed by scapy) carrying scapy layer `tcp`."""
    if v6:
        pkt = IPv6(src=src, dst=dst, hlim=ttl)
        if ext is not None:
            pkt = pkt / ext
        pkt = pkt / tcp
    else:
        kw = {"options": ipopts} if ipopts is not None else {}
        pkt = IP(src=src, dst=dst, ttl=ttl, id=ip_id, flags="DF", **kw) / tcp
    return bytes(pkt)


@dataclass
class Conn:
    """A crafted TCP connection between a phantom phone and a phantom server.

    Sequence numbers are tracked relative to the ISNs; `to_phone(...)` builds segments the
    server sends (their window is the uplink knob), `from_phone(...)` the phone's (downlink
    knob). ISNs close to 2^32 make the numbers wrap."""

    wire: Wire
    v6: bool = False
    phone_wscale: int | None = 7
    srv_wscale: int | None = 7
    phone_port: int = field(default_factory=lambda: random.randint(20000, 60000))
    srv_port: int = 443
    phone_isn: int = 0xFFFFF000
    srv_isn: int = 0x7FFFFFF0
    timestamps: bool = True
    phone_sent: int = 0  # bytes after the SYN
    srv_sent: int = 0
    phone_addr: str | None = None  # default: the phantom phone / server of the family
    srv_addr: str | None = None

    @property
    def phone(self):
        return self.phone_addr or (PH6 if self.v6 else PH4)

    @property
    def srv(self):
        return self.srv_addr or (SV6 if self.v6 else SV4)

    def _opts(self, wscale, syn: bool):
        opts = [("MSS", 1460)] if syn else []
        if syn:
            opts.append(("SAckOK", b""))
        if self.timestamps:
            opts.append(("Timestamp", (123456, 0 if syn else 654321)))
        if syn and wscale is not None:
            opts += [("NOP", None), ("WScale", wscale)]
        return opts

    def syn(self, window: int = 64240) -> Exchange:
        t = TCP(sport=self.phone_port, dport=self.srv_port, seq=self.phone_isn, ack=0,
                flags="S", window=window, options=self._opts(self.phone_wscale, True))
        return self.wire.send("phone", tcp_ip(self.v6, self.phone, self.srv, t), "SYN")

    def synack(self, window: int = 65160) -> Exchange:
        t = TCP(sport=self.srv_port, dport=self.phone_port, seq=self.srv_isn,
                ack=(self.phone_isn + 1) % 2**32, flags="SA", window=window,
                options=self._opts(self.srv_wscale, True))
        self.synack_window = window
        return self.wire.send("srv", tcp_ip(self.v6, self.srv, self.phone, t), "SYN-ACK")

    def scales_in_force(self) -> tuple[int, int]:
        """(phone, server) shifts: RFC 7323 scaling is on only if both SYNs carry it."""
        if self.phone_wscale is None or self.srv_wscale is None:
            return 0, 0
        return min(self.phone_wscale, 14), min(self.srv_wscale, 14)

    def handshake(self, syn_window: int = 64240, synack_window: int = 65160) -> list[Exchange]:
        """SYN, SYN-ACK, ACK. The SYNs must arrive untouched. The third ACK advertises
        exactly the edge the SYN offered (the least window that keeps it), which no policy
        may lower either, so it must arrive untouched too."""
        ack3 = math.ceil(syn_window / (1 << self.scales_in_force()[0]))
        xs = [self.syn(syn_window), self.synack(synack_window),
              self.from_phone(ack_off=0, window=ack3, label="ACK3")]
        for x in xs:
            assert_bytes(x, forwarded(x.sent), f"handshake {x.label} must pass unchanged")
        return xs

    def to_phone(self, ack_off: int, window: int, payload: bytes = b"", flags: str = "A",
                 label: str = "", **ipkw) -> Exchange:
        """Server → phone segment acking phone_isn+1+ack_off, carrying `payload`."""
        t = TCP(sport=self.srv_port, dport=self.phone_port,
                seq=(self.srv_isn + 1 + self.srv_sent) % 2**32,
                ack=(self.phone_isn + 1 + ack_off) % 2**32, flags=flags, window=window,
                options=self._opts(None, False))
        if payload:
            t = t / Raw(payload)
        self.srv_sent += len(payload)
        return self.wire.send("srv", tcp_ip(self.v6, self.srv, self.phone, t, **ipkw),
                              label or f"to_phone ack+{ack_off} win={window}")

    def from_phone(self, ack_off: int, window: int, payload: bytes = b"", flags: str = "A",
                   label: str = "", **ipkw) -> Exchange:
        t = TCP(sport=self.phone_port, dport=self.srv_port,
                seq=(self.phone_isn + 1 + self.phone_sent) % 2**32,
                ack=(self.srv_isn + 1 + ack_off) % 2**32, flags=flags, window=window,
                options=self._opts(None, False))
        if payload:
            t = t / Raw(payload)
        self.phone_sent += len(payload)
        return self.wire.send("phone", tcp_ip(self.v6, self.phone, self.srv, t, **ipkw),
                              label or f"from_phone ack+{ack_off} win={window}")

    def ack_abs(self, ack_off: int) -> int:
        return (self.phone_isn + 1 + ack_off) % 2**32


def describe(ipb: bytes | None) -> str:
    if ipb is None:
        return "<nothing arrived>"
    try:
        return scapy_ip(ipb).summary() + " " + ipb.hex()
    except Exception:  # pragma: no cover - describing a failure must not fail
        return ipb.hex()


def assert_bytes(x: Exchange, expected: bytes, what: str = "") -> None:
    assert x.got is not None, f"{x.label}: nothing arrived ({what})"
    if x.got != expected:
        diff = [i for i in range(max(len(x.got), len(expected)))
                if i >= len(x.got) or i >= len(expected) or x.got[i] != expected[i]]
        raise AssertionError(
            f"{x.label}: {what}: bytes differ at offsets {diff[:16]}\n"
            f"  sent     {describe(x.sent)}\n  expected {describe(expected)}\n"
            f"  got      {describe(x.got)}")


def check_window(x: Exchange, raw: int, what: str = "") -> None:
    """x arrived as sent except for the window `raw` (and the hops), checksums valid."""
    assert_bytes(x, with_window(x.sent, raw), what or f"window {raw}")
    assert checksums_valid(x.got), f"{x.label}: checksum invalid after rewrite"


def unique_port() -> int:
    return random.randint(20000, 60000) ^ (os.getpid() & 0x7FF)
