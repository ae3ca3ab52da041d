"""Several NFQUEUE queues, rules from conf/rsfcd-iptables.sh: with --queue-balance (a hash
of both addresses) both workers get packets and regulate their flows; with subscriber
balancing every flow of one phone reaches one worker (so its uploads share one
per-subscriber state), the worker the phone's address names, and different phones spread
over the workers."""

import ipaddress
import math
import os
import subprocess
from pathlib import Path

from helpers import static_cfg
from wire import PH4, PH6, PHANTOM_MAC, Conn, check_window

N_SERVERS = 16


def test_two_queues_balance(lab, wire, rsfcd):
    d = rsfcd(static_cfg(uplink=20000), queues=(0, 1))
    want = math.ceil(20000 / 128)
    for i in range(N_SERVERS):
        srv = f"198.19.0.{100 + i}"
        lab.phantom("srv", srv, PHANTOM_MAC)
        c = Conn(wire, srv_addr=srv, phone_addr=PH4, srv_wscale=7)
        c.handshake()
        check_window(c.to_phone(ack_off=1_000_000, window=0xFFFF), want,
                     f"flow to server {srv}")
    m = d.metrics()
    per_queue = {q: m.value("rsfcd_packets_total", queue=str(q)) for q in (0, 1)}
    assert sum(per_queue.values()) == 4 * N_SERVERS, per_queue
    assert all(n > 0 for n in per_queue.values()), f"one worker got nothing: {per_queue}"
    assert m.value("rsfcd_windows_rewritten_total") == N_SERVERS
    assert m.value("rsfcd_flows_created_total") == N_SERVERS


def rsfc_cfg() -> dict:
    # initial_window_bytes 0 (64 KB): the handshakes pass as sent, which Conn.handshake()
    # checks byte for byte (the default 16 KB lowers the SYN-ACK's window: test_clamp.py).
    return {"uplink": {"policy": "rsfc"}, "downlink": {"policy": "off"},
            "rsfc": {"per_subscriber": True, "initial_window_bytes": 0}}


def per_queue(d, name: str, queues) -> dict:
    m = d.metrics()
    return {q: m.value(name, queue=str(q)) for q in queues}


def test_subscriber_balance_keeps_a_phone_on_one_worker(lab, wire, rsfcd):
    queues = (0, 1, 2)
    d = rsfcd(rsfc_cfg(), queues=queues, balance="subscriber")
    # One phone (v4 and v6) uploading to 16 servers: every packet on the queue its address
    # names (the key is the address's low 6 bits for IPv4, the /64 prefix's for IPv6; bucket
    # k goes to queue k mod 3), and one subscriber entry per address for all its flows (an
    # upload's regulator takes it at the flow's first payload).
    for v6, phone in ((False, PH4), (True, PH6)):
        key = int(ipaddress.ip_address(phone)) >> (64 if v6 else 0)
        want_q = (key & 63) % len(queues)
        before = per_queue(d, "rsfcd_packets_total", queues)
        for i in range(N_SERVERS):
            srv = f"2001:2:0:2::{100 + i:x}" if v6 else f"198.19.0.{100 + i}"
            lab.phantom("srv", srv, PHANTOM_MAC)
            c = Conn(wire, v6=v6, srv_addr=srv, phone_addr=phone)
            c.handshake()
            c.from_phone(ack_off=0, window=502, payload=b"x" * 100)
            c.to_phone(ack_off=100, window=0xFFFF)
        after = per_queue(d, "rsfcd_packets_total", queues)
        delta = {q: after[q] - before[q] for q in queues}
        assert delta == {q: (5 * N_SERVERS if q == want_q else 0) for q in queues}, \
            f"{phone}: packets per queue {delta}, all expected on queue {want_q}"
    created = per_queue(d, "rsfcd_rsfc_subscribers_created_total", queues)
    assert sum(created.values()) == 2, f"one subscriber entry per phone address: {created}"
    assert d.metrics().value("rsfcd_flows_created_total") == 2 * N_SERVERS

    # Twelve phones to one server: each phone's packets on one queue, the one its address
    # names, and all three queues in use.
    lab.phantom("srv", "198.19.0.200", PHANTOM_MAC)
    used = set()
    for i in range(12):
        phone = f"198.18.0.{100 + i}"
        lab.phantom("phone", phone, PHANTOM_MAC)
        want_q = ((100 + i) & 63) % len(queues)
        before = per_queue(d, "rsfcd_packets_total", queues)
        c = Conn(wire, srv_addr="198.19.0.200", phone_addr=phone)
        c.handshake()
        c.to_phone(ack_off=0, window=0xFFFF)
        after = per_queue(d, "rsfcd_packets_total", queues)
        delta = {q: after[q] - before[q] for q in queues}
        assert delta == {q: (4 if q == want_q else 0) for q in queues}, \
            f"{phone}: packets per queue {delta}, all expected on queue {want_q}"
        used.add(want_q)
    assert used == set(queues)


def test_iptables_script_refuses_bad_options():
    """Bad options are refused with a clear line before any rule is touched."""
    script = Path(__file__).resolve().parents[2] / "conf" / "rsfcd-iptables.sh"
    cases = [
        (["-q", "0:1", "-b", "subscriber"], "-b subscriber needs -i or -p"),
        (["-q", "0:1", "-b", "subscriber", "-i", "ran0", "-p", "10.0.0.0/8"],
         "-b subscriber takes -i or -p, not both"),
        (["-q", "0:1", "-b", "fast", "-i", "ran0"], "bad -b 'fast'"),
        (["-q", "0:300", "-i", "ran0"], "at most 256 queues"),
        (["-q", "1:0"], "bad -q '1:0'"),
        (["-P", "udp"], "bad -P 'udp'"),
        (["-p", "10.0.0.0/8;reboot"], "bad prefix"),
    ]
    for args, want in cases:
        r = subprocess.run(["sh", str(script), "add", *args], capture_output=True, text=True,
                           env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
                                "IPTABLES": "/bin/false", "IP6TABLES": "/bin/false"})
        assert r.returncode != 0, args
        assert want in r.stderr, (args, r.stderr)


def test_iptables_script_upgrades_and_removes_its_jumps():
    """In a scratch namespace: `add` replaces an older TCP-only jump to the chain with one
    protocol-free jump (and stays idempotent), `del` leaves FORWARD and the chain list as
    they were."""
    script = Path(__file__).resolve().parents[2] / "conf" / "rsfcd-iptables.sh"
    ns = f"rsfc-ipt-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        def run(*argv):
            return subprocess.run(["ip", "netns", "exec", ns, *argv], check=True,
                                  capture_output=True, text=True).stdout

        for ipt in ("iptables-legacy", "ip6tables-legacy"):
            run(ipt, "-N", "RSFCD")
            run(ipt, "-I", "FORWARD", "1", "-p", "tcp", "-j", "RSFCD")  # an older install
        run("sh", str(script), "add", "-q", "0:3", "-i", "ran0")
        run("sh", str(script), "add", "-q", "0:3", "-i", "ran0")
        for ipt in ("iptables-legacy", "ip6tables-legacy"):
            fwd = [r for r in run(ipt, "-S", "FORWARD").splitlines() if "RSFCD" in r]
            assert fwd == ["-A FORWARD -j RSFCD"], (ipt, fwd)
            rules = run(ipt, "-S", "RSFCD").splitlines()
            # 4 queues: a power of two, one rule per queue and direction, plus the
            # subscriber-to-subscriber rule.
            assert len([r for r in rules if "--u32" in r]) == 8, rules
        run("sh", str(script), "del")
        for ipt in ("iptables-legacy", "ip6tables-legacy"):
            assert "RSFCD" not in run(ipt, "-S"), ipt
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)
