"""Crafted TCP through the real daemon: the window that arrives on the far side is clamped
exactly as docs/DESIGN.md §5 says, and nothing else changes (byte-exact comparison, checksums
recomputed by scapy)."""

import math

import pytest

from helpers import static_cfg
from wire import (IPOption_EOL, IPOption_NOP, IPOption_Router_Alert, IPv6ExtHdrDestOpt,
                  IPv6ExtHdrHopByHop, Conn, PadN, assert_bytes, check_window, expected_raw,
                  forwarded)

TARGET = 20000  # not a multiple of any scale unit > 32: rounding shows
FAMILIES = [pytest.param(False, id="v4"), pytest.param(True, id="v6")]
FAR = 10_000_000  # an ACK offset far beyond the SYN-ACK's right edge


@pytest.mark.parametrize("v6", FAMILIES)
@pytest.mark.parametrize("knob,scale", [("uplink", 0), ("uplink", 7), ("uplink", 14),
                                        ("uplink", 15), ("downlink", 7), ("downlink", 15)])
def test_clamp_through_window_scale(wire, rsfcd, v6, knob, scale):
    """A static clamp encodes ceil(target / 2^min(scale,14)) in the ACKs of one knob and
    leaves the other direction alone; pure and data-carrying (odd length) ACKs."""
    cfg = static_cfg(uplink=TARGET) if knob == "uplink" else static_cfg(downlink=TARGET)
    d = rsfcd(cfg)
    # The ACK sender's scale is the one that matters: give the other side a different one.
    if knob == "uplink":
        c = Conn(wire, v6=v6, srv_wscale=scale, phone_wscale=3)
        send, other = c.to_phone, c.from_phone
    else:
        c = Conn(wire, v6=v6, phone_wscale=scale, srv_wscale=3)
        send, other = c.from_phone, c.to_phone
    c.handshake()
    s = min(scale, 14)
    want = math.ceil(TARGET / (1 << s))
    assert expected_raw(0xFFFF, scale, TARGET) == want  # the test's own model agrees

    x = send(ack_off=FAR, window=0xFFFF)
    check_window(x, want, f"pure ACK, scale {scale}")
    assert (x.got_window << s) >= TARGET and ((x.got_window - 1) << s) < TARGET

    x = send(ack_off=FAR + 1001, window=0xFFFF, payload=b"\x5a" * 1001, flags="PA")
    check_window(x, want, "data-carrying ACK, odd payload length")

    # Just above the target: lowered to the rounded-up target.
    x = send(ack_off=FAR + 5000, window=want + 1)
    check_window(x, want, "window one unit above target")

    # Already at or below the target: only lower, never raise.
    for raw in (want, max(1, (TARGET // 2) >> s)):
        x = send(ack_off=FAR + 9000, window=raw)
        assert_bytes(x, forwarded(x.sent), f"window {raw} <= target must pass unchanged")

    # The other knob is off: its ACKs pass untouched.
    x = other(ack_off=FAR, window=0xFFFF)
    assert_bytes(x, forwarded(x.sent), "other knob is off")

    m = d.metrics()
    direction = "to_subscriber" if knob == "uplink" else "from_subscriber"
    assert m.value("rsfcd_windows_rewritten_total", direction=direction) == 3
    assert m.value("rsfcd_windows_rewritten_total") == 3


def test_scaling_off_unless_both_syns_carry_it(wire, rsfcd):
    """Phone announces wscale 7, the server none: scaling is off both ways (RFC 7323), so
    the phone's windows are in plain bytes and must be clamped as such."""
    rsfcd(static_cfg(uplink=TARGET, downlink=TARGET))
    c = Conn(wire, phone_wscale=7, srv_wscale=None)
    c.handshake()
    x = c.from_phone(ack_off=FAR, window=0xFFFF)
    check_window(x, TARGET, "downlink, scaling off")
    x = c.to_phone(ack_off=FAR, window=0xFFFF)
    check_window(x, TARGET, "uplink, scaling off")


def test_ipv4_options_and_ipv6_extension_headers_are_parsed(wire, rsfcd):
    """The TCP header behind IPv4 options / IPv6 hop-by-hop + destination options is found
    and clamped; everything else (options, ext headers) arrives identical."""
    rsfcd(static_cfg(uplink=TARGET))
    c4 = Conn(wire, v6=False, srv_wscale=7)
    c4.handshake()
    x = c4.to_phone(ack_off=FAR, window=0xFFFF, payload=b"abc", flags="PA",
                    ipopts=[IPOption_Router_Alert(), IPOption_NOP(), IPOption_NOP(),
                            IPOption_NOP(), IPOption_EOL()])
    assert (x.sent[0] & 0x0F) == 7, "test packet should carry 8 bytes of IPv4 options"
    check_window(x, math.ceil(TARGET / 128), "IPv4 with options")

    c6 = Conn(wire, v6=True, srv_wscale=7)
    c6.handshake()
    ext = (IPv6ExtHdrHopByHop(options=[PadN(optdata=b"\0" * 4)]) /
           IPv6ExtHdrDestOpt(options=[PadN(optdata=b"\0" * 12)]))
    x = c6.to_phone(ack_off=FAR, window=0xFFFF, payload=b"abcde", flags="PA", ext=ext)
    assert x.sent[6] == 0, "test packet should start with a hop-by-hop header"
    check_window(x, math.ceil(TARGET / 128), "IPv6 with HBH + destination options")


@pytest.mark.parametrize("v6", FAMILIES)
def test_right_edge_never_moves_back(wire, rsfcd, v6):
    """ack + win<<s already advertised to the phone is kept: a later ACK's window is raised
    just enough, never above its own original value."""
    scale = 7
    unit = 1 << scale
    d = rsfcd(static_cfg(uplink=TARGET))
    c = Conn(wire, v6=v6, srv_wscale=scale)
    synack_window = 65160
    c.handshake(synack_window=synack_window)
    want = math.ceil(TARGET / unit)

    # 1. The SYN-ACK (never touched) advertised [isn+1, isn+1+65160): the first ACKs must
    #    keep that edge reachable although the target is smaller.
    x = c.to_phone(ack_off=0, window=0xFFFF)
    need = math.ceil(synack_window / unit)
    check_window(x, need, "first ACK holds the SYN-ACK's edge")
    # That ACK (rounded up) now advertises the edge isn+1 + need*unit.
    x = c.to_phone(ack_off=40000, window=0xFFFF)
    check_window(x, math.ceil((need * unit - 40000) / unit), "edge from SYN-ACK, ack+40000")

    # 2. Far beyond: clamped to the target. Edge E1 = A + want*unit.
    a = 1_000_000
    x = c.to_phone(ack_off=a, window=0xFFFF)
    check_window(x, want, "clamped ACK1")
    e1 = c.ack_abs(a) + want * unit

    # 3. ACK2 at A+1: the target alone would keep the edge; exact model check.
    x = c.to_phone(ack_off=a + 1, window=0xFFFF)
    check_window(x, expected_raw(0xFFFF, scale, TARGET, ack=c.ack_abs(a + 1), edge=e1),
                  "ACK2 at A+1")

    # 4. An older (reordered) ACK at A-3000: must be held at E1 -> raised above target.
    x = c.to_phone(ack_off=a - 3000, window=0xFFFF)
    held = math.ceil((want * unit + 3000) / unit)
    assert held > want
    check_window(x, held, "reordered older ACK keeps the edge")

    # 5. Same, but its own original window is below what the edge needs: never raised above
    #    the original -> passes unchanged.
    orig = held - 2
    assert orig > want
    x = c.to_phone(ack_off=a - 3000, window=orig)
    assert_bytes(x, forwarded(x.sent), "window is never raised above the original")

    # 6. ACK2 at A+1 whose original window would itself move the edge back: unchanged.
    x = c.to_phone(ack_off=a + 1, window=want - 5)
    assert_bytes(x, forwarded(x.sent), "sender's own smaller window passes unchanged")

    m = d.metrics()
    assert m.value("rsfcd_right_edge_holds_total", direction="to_subscriber") >= 3, \
        "right-edge holds should be counted"


def test_right_edge_after_lowering_the_clamp(wire, rsfcd):
    """SIGHUP lowers the static window on an existing flow: the reduction takes effect only
    as ACKs advance past the edge advertised under the old value."""
    scale = 7
    unit = 1 << scale
    d = rsfcd(static_cfg(uplink=64000))
    a_flow = Conn(wire, srv_wscale=scale, phone_port=40001)
    probe_flow = Conn(wire, srv_wscale=scale, phone_port=40002)
    a_flow.handshake()
    probe_flow.handshake()
    a = 1_000_000
    high, low = math.ceil(64000 / unit), math.ceil(8000 / unit)
    check_window(a_flow.to_phone(ack_off=a, window=0xFFFF), high, "before reload")
    edge = a_flow.ack_abs(a) + high * unit

    d.reload(static_cfg(uplink=8000))
    # The other flow tells when the new value is in force.
    probe = 10_000_000
    for _ in range(40):
        probe += 100_000
        x = probe_flow.to_phone(ack_off=probe, window=0xFFFF)
        if x.got is not None and x.got_window == low:
            break
    else:
        raise AssertionError(f"reload to 8000 bytes never took effect; last {x.got_window}")

    for off in (a + 10, a + 20000, a + 50000):
        x = a_flow.to_phone(ack_off=off, window=0xFFFF)
        want = expected_raw(0xFFFF, scale, 8000, ack=a_flow.ack_abs(off), edge=edge)
        assert want > low
        check_window(x, want, f"held at the pre-reload edge, ack+{off - a}")
    x = a_flow.to_phone(ack_off=a + high * unit + 1, window=0xFFFF)
    check_window(x, low, "past the old edge: the new value")


@pytest.mark.parametrize("v6", FAMILIES)
def test_rsfc_starts_the_handshake_at_the_startup_floor(wire, rsfcd, v6):
    """rsfc on both knobs with the shipped startup floor (rsfc.initial_window_bytes 16384):
    the first right edge of each direction is the handshake's, and an edge is never pulled
    back, so the phone's SYN (timestamps on) and the server's SYN-ACK arrive with their
    windows (never scaled) lowered to 16384, every other byte as sent and the checksums valid;
    the phone's ACK of the SYN-ACK, before any download, offers the server no more."""
    rsfcd({"uplink": {"policy": "rsfc"}, "downlink": {"policy": "rsfc"}})
    c = Conn(wire, v6=v6)
    check_window(c.syn(64240), 16384, "SYN: the server's first edge")
    check_window(c.synack(65160), 16384, "SYN-ACK: the phone's first edge")
    x = c.from_phone(ack_off=0, window=502, label="ACK3")
    check_window(x, 16384 // 128, "the handshake's ACK: 16 KB at the phone's scale 7")
