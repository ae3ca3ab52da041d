"""What rsfcd must NOT touch, and what /metrics says about it: SYN/SYN-ACK, flows whose
handshake was not seen, malformed and non-TCP packets (byte-identical on the far side,
counted by reason, daemon still serving)."""

import math

import pytest

from helpers import static_cfg
from wire import (ICMP, IP, TCP, UDP, Conn, ICMPv6EchoRequest, IPv6, IPv6ExtHdrFragment, Raw,
                  SV4, SV6, PH4, PH6, assert_bytes, forwarded, with_window)

FAR = 10_000_000


@pytest.mark.parametrize("v6", [False, True], ids=["v4", "v6"])
def test_syn_and_synack_never_touched(wire, rsfcd, v6):
    d = rsfcd(static_cfg(uplink=4000, downlink=4000))
    c = Conn(wire, v6=v6)
    c.handshake(syn_window=65535, synack_window=65535)  # asserts byte-identical delivery
    m = d.metrics()
    assert m.value("rsfcd_windows_rewritten_total") == 0
    assert m.value("rsfcd_packets_total", outcome="passed") == 3


@pytest.mark.parametrize("v6", [False, True], ids=["v4", "v6"])
def test_flow_without_handshake_is_never_touched(wire, rsfcd, v6):
    d = rsfcd(static_cfg(uplink=4000, downlink=4000))
    c = Conn(wire, v6=v6)  # no handshake: the scales are unknown
    for _ in range(3):
        x = c.to_phone(ack_off=FAR, window=0xFFFF, payload=b"z" * 11, flags="PA")
        assert_bytes(x, forwarded(x.sent), "unknown scale: to phone")
        x = c.from_phone(ack_off=FAR, window=0xFFFF)
        assert_bytes(x, forwarded(x.sent), "unknown scale: from phone")
    m = d.metrics()
    assert m.value("rsfcd_flows_unregulated_total") == 1
    assert m.value("rsfcd_packets_total", direction="to_subscriber", outcome="unregulated") == 3
    assert m.value("rsfcd_packets_total", direction="from_subscriber", outcome="unregulated") == 3
    assert m.value("rsfcd_windows_rewritten_total") == 0


def _malformed(c: Conn):
    """(label, parse_error reason or None, IP bytes) sent server -> phone on a flow whose
    handshake rsfcd has seen, so a mis-parse would show as a rewritten window."""
    v6 = c.v6
    src, dst = (SV6, PH6) if v6 else (SV4, PH4)
    seq, ack = (c.srv_isn + 1) % 2**32, c.ack_abs(FAR)
    ports = dict(sport=c.srv_port, dport=c.phone_port)

    def ip(payload, **kw):
        if v6:
            return bytes(IPv6(src=src, dst=dst, hlim=64, **kw) / payload)
        return bytes(IP(src=src, dst=dst, ttl=64, id=7, **kw) / payload)

    def tcp(**kw):
        return TCP(seq=seq, ack=ack, flags="A", window=0xFFFF, **ports, **kw)

    cases = [
        ("data offset 4", "bad_tcp_data_offset", ip(tcp(dataofs=4))),
        ("data offset 15 beyond packet", "bad_tcp_data_offset", ip(tcp(dataofs=15) / Raw(b"x" * 7))),
        ("TS option running past header", "bad_tcp_options",
         ip(tcp(dataofs=6) / Raw(b"\x08\x0a\x00\x00"))),
        ("option length 1", "bad_tcp_options", ip(tcp(dataofs=6) / Raw(b"\x02\x01\x00\x00"))),
        ("12 bytes of TCP", "truncated_tcp", ip(Raw(bytes(tcp())[:12]), **({"nh": 6} if v6 else {"proto": 6}))),
        ("UDP", "not_tcp", ip(UDP(sport=53, dport=c.phone_port) / Raw(b"q" * 13))),
    ]
    if v6:
        cases += [
            ("fragment header, first fragment", "ipv6_fragment",
             ip(IPv6ExtHdrFragment(m=1, offset=0, id=99) / tcp() / Raw(b"f" * 16))),
            ("fragment header, later fragment", "ipv6_fragment",
             ip(IPv6ExtHdrFragment(nh=6, m=0, offset=100, id=99) / Raw(b"g" * 24))),
            ("destination options running past the packet", "bad_ipv6_ext_header",
             ip(Raw(bytes([6, 10]) + b"\0" * 6), nh=60)),
            ("ESP", "not_tcp", ip(Raw(b"\0\0\0\1\0\0\0\1" + b"e" * 9), nh=50)),
            ("ICMPv6 echo", "not_tcp", ip(ICMPv6EchoRequest(id=1, seq=1, data=b"ping!"))),
        ]
    else:
        cases += [
            ("first fragment (MF)", "ipv4_fragment", ip(tcp() / Raw(b"f" * 16), flags="MF")),
            ("later fragment", "ipv4_fragment", ip(Raw(b"g" * 24), frag=100, proto=6)),
            ("ICMP echo", "not_tcp", ip(ICMP(type=8, id=1, seq=1) / Raw(b"ping!"))),
        ]
    return cases


@pytest.mark.parametrize("v6", [False, True], ids=["v4", "v6"])
def test_malformed_and_non_tcp_pass_unchanged(wire, rsfcd, v6):
    """Every protocol is queued (no -p tcp), so rsfcd sees UDP/ICMP/ESP too. (IPv4 packets
    with a bad header length, total length or options never get past the kernel's own
    checks, so they cannot reach the daemon through a forwarding gateway.) Without the
    rules' connection tracking: with it the kernel reassembles fragments before FORWARD, and
    holds a lone fragment until it times out."""
    d = rsfcd(static_cfg(uplink=4000), proto="all", conntrack=False)
    c = Conn(wire, v6=v6, srv_wscale=7)
    c.handshake()
    before = d.metrics()
    cases = _malformed(c)
    expected: dict[str, int] = {}
    for label, reason, pkt in cases:
        x = wire.send("srv", pkt, label)
        assert_bytes(x, forwarded(pkt), f"malformed/non-TCP '{label}' must pass byte-identical")
        expected[reason] = expected.get(reason, 0) + 1
    assert d.alive(), "rsfcd died on malformed input"
    m = d.metrics()
    for reason, n in expected.items():
        got = m.value("rsfcd_parse_errors_total", reason=reason) - \
            before.value("rsfcd_parse_errors_total", reason=reason)
        assert got == n, f"parse_errors_total{{reason={reason}}}: {got}, want {n}"
    assert m.value("rsfcd_parse_errors_total") - before.value("rsfcd_parse_errors_total") == \
        len(cases)
    assert m.value("rsfcd_packets_total", outcome="unparsed") == len(cases)
    assert m.value("rsfcd_windows_rewritten_total") == 0
    # Still serving the flow.
    x = c.to_phone(ack_off=FAR, window=0xFFFF)
    assert_bytes(x, with_window(x.sent, math.ceil(4000 / 128)), "clamp after malformed input")


def test_both_ends_subscribers_untouched(wire, rsfcd):
    """Neither direction is 'to the subscriber' when both ends are inside the networks."""
    d = rsfcd(static_cfg(uplink=4000, downlink=4000, subscriber_networks=["198.18.0.0/15"]))
    c = Conn(wire)
    c.handshake()
    x = c.to_phone(ack_off=FAR, window=0xFFFF)
    assert_bytes(x, forwarded(x.sent), "both ends are subscribers")
    m = d.metrics()
    assert m.value("rsfcd_packets_total", outcome="not_subscriber") == 4
    assert m.value("rsfcd_flows_created_total") == 0


def test_metrics_count_what_happened(wire, rsfcd):
    d = rsfcd(static_cfg(uplink=20000))
    a = Conn(wire, phone_port=41000)
    a.handshake()  # SYN (from) + SYN-ACK (to) + ACK (from): passed
    for i in range(2):
        x = a.to_phone(ack_off=FAR + i, window=0xFFFF)  # rewritten
        assert x.got_window == math.ceil(20000 / 128)
    a.to_phone(ack_off=FAR + 5, window=10)  # below the clamp: passed
    b = Conn(wire, phone_port=41001)  # no handshake
    b.to_phone(ack_off=FAR, window=0xFFFF)  # unregulated
    b.from_phone(ack_off=FAR, window=0xFFFF)  # unregulated
    wire.send("srv", bytes(IP(src=SV4, dst=PH4) / TCP(sport=443, dport=41002, dataofs=4)),
              "data offset 4")  # unparsed
    m = d.metrics()
    want = {
        ("to_subscriber", "rewritten"): 2,
        ("to_subscriber", "passed"): 2,
        ("from_subscriber", "passed"): 2,
        ("to_subscriber", "unregulated"): 1,
        ("from_subscriber", "unregulated"): 1,
    }
    for (direction, outcome), n in want.items():
        got = m.value("rsfcd_packets_total", direction=direction, outcome=outcome)
        assert got == n, f"packets_total{{direction={direction},outcome={outcome}}} = {got}, want {n}"
    assert m.value("rsfcd_packets_total", outcome="unparsed") == 1
    assert m.value("rsfcd_packets_total") == 9
    assert m.value("rsfcd_packets_total", queue="0") == 9
    assert m.value("rsfcd_windows_rewritten_total", direction="to_subscriber") == 2
    assert m.value("rsfcd_windows_rewritten_total", direction="from_subscriber") == 0
    assert m.value("rsfcd_parse_errors_total", reason="bad_tcp_data_offset") == 1
    assert m.value("rsfcd_flows_created_total") == 2
    assert m.value("rsfcd_flows_unregulated_total") == 1
    assert m.value("rsfcd_flows_active") == 2
