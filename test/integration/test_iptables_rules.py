"""conf/rsfcd-iptables.sh -k: only the flows a knob works on reach rsfcd.

The rule set of each mode (iptables-legacy-save in a scratch namespace), and on the lab's
real kernel TCP: with `-k uplink` a download's packets never reach the queue (its phone
sends more than the threshold, but only pure ACKs), while an upload's packets do, whichever
side opened the connection; with `-H` the upload is clamped (rsfcd learnt the window scales
from the handshake) and a download costs the queue its two handshake packets."""

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from helpers import SsSampler, iperf3_client, iperf3_server, static_cfg, wait_listening
from test_real_tcp import assert_snd_wnd_clamped
from topo import PHONE4, SRV4, SRV6

SCRIPT = Path(__file__).resolve().parents[2] / "conf" / "rsfcd-iptables.sh"
ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}


def bytes_match(n: int, d: str) -> str:
    return (f"-m connbytes --connbytes {n} --connbytes-mode bytes --connbytes-dir {d} "
            f"-m connbytes --connbytes 200 --connbytes-mode avgpkt --connbytes-dir {d} "
            f"-g RSFCD-Q")


@pytest.fixture
def scratch():
    """A fresh network namespace; run(*argv) runs a command in it and returns stdout."""
    ns = f"rsfc-ipr-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", ns], check=True)

    def run(*argv):
        return subprocess.run(["ip", "netns", "exec", ns, *argv], check=True,
                              capture_output=True, text=True, env=ENV).stdout
    try:
        yield run
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)


def saved(run, ipt: str = "iptables-legacy") -> list[str]:
    """The rules of the filter table, as iptables-save prints them."""
    return [r for r in run(f"{ipt}-save", "-t", "filter").splitlines() if r.startswith("-A")]


# Every mode's chain starts with a conntrack match without a target: it turns connection
# tracking on in the namespace, for rsfcd's flow adoption (RSFCD_CONNTRACK=no leaves it out).
CONNTRACK_ON = "-A RSFCD -m conntrack --ctstate INVALID"


def test_rule_set_per_mode(scratch):
    run = scratch
    # -k all (the default): the rules of before, no queueing chain.
    run("sh", str(SCRIPT), "add", "-q", "0", "-i", "ran0")
    assert saved(run) == [
        "-A FORWARD -j RSFCD",
        CONNTRACK_ON,
        "-A RSFCD -i ran0 -p tcp -j NFQUEUE --queue-num 0 --queue-bypass",
        "-A RSFCD -o ran0 -p tcp -j NFQUEUE --queue-num 0 --queue-bypass",
    ]

    # -k uplink: the phone's own bytes are conntrack's "original" direction when it opened
    # the connection (a packet from it in ORIGINAL, to it in REPLY), "reply" otherwise.
    for _ in range(2):  # idempotent
        run("sh", str(SCRIPT), "add", "-q", "0", "-i", "ran0", "-k", "uplink")
    assert saved(run) == [
        "-A FORWARD -j RSFCD",
        CONNTRACK_ON,
        f"-A RSFCD -i ran0 -p tcp -m conntrack --ctdir ORIGINAL {bytes_match(65536, 'original')}",
        f"-A RSFCD -i ran0 -p tcp -m conntrack --ctdir REPLY {bytes_match(65536, 'reply')}",
        f"-A RSFCD -o ran0 -p tcp -m conntrack --ctdir REPLY {bytes_match(65536, 'original')}",
        f"-A RSFCD -o ran0 -p tcp -m conntrack --ctdir ORIGINAL {bytes_match(65536, 'reply')}",
        "-A RSFCD-Q -p tcp -j NFQUEUE --queue-num 0 --queue-bypass",
    ]

    # -k downlink: the bytes towards the phone, i.e. the other direction in every case.
    run("sh", str(SCRIPT), "add", "-q", "0", "-i", "ran0", "-k", "downlink", "-t", "1000")
    assert saved(run) == [
        "-A FORWARD -j RSFCD",
        CONNTRACK_ON,
        f"-A RSFCD -i ran0 -p tcp -m conntrack --ctdir ORIGINAL {bytes_match(1000, 'reply')}",
        f"-A RSFCD -i ran0 -p tcp -m conntrack --ctdir REPLY {bytes_match(1000, 'original')}",
        f"-A RSFCD -o ran0 -p tcp -m conntrack --ctdir REPLY {bytes_match(1000, 'reply')}",
        f"-A RSFCD -o ran0 -p tcp -m conntrack --ctdir ORIGINAL {bytes_match(1000, 'original')}",
        "-A RSFCD-Q -p tcp -j NFQUEUE --queue-num 0 --queue-bypass",
    ]

    # Both knobs, prefixes of both families, handshakes, subscriber balancing over 2 queues:
    # either direction qualifies a flow; the queueing chain keys on the phone's address.
    run("sh", str(SCRIPT), "add", "-q", "2:3", "-p", "198.18.0.0/16", "-p", "2001:2::/48",
        "-k", "uplink,downlink", "-H")
    for ipt, p in (("iptables-legacy", "198.18.0.0/16"), ("ip6tables-legacy", "2001:2::/48")):
        rules = saved(run, ipt)
        sel = [r for r in rules if r.startswith("-A RSFCD ")]
        assert sel == [
            CONNTRACK_ON,
            f"-A RSFCD -s {p} -p tcp -m tcp --tcp-flags SYN SYN -g RSFCD-Q",
            f"-A RSFCD -d {p} -p tcp -m tcp --tcp-flags SYN SYN -g RSFCD-Q",
            f"-A RSFCD -s {p} -p tcp {bytes_match(65536, 'original')}",
            f"-A RSFCD -s {p} -p tcp {bytes_match(65536, 'reply')}",
            f"-A RSFCD -d {p} -p tcp {bytes_match(65536, 'original')}",
            f"-A RSFCD -d {p} -p tcp {bytes_match(65536, 'reply')}",
        ], (ipt, sel)
        queue = [r for r in rules if r.startswith("-A RSFCD-Q ")]
        u32 = [r for r in queue if "--u32" in r]
        assert len(u32) == 4, (ipt, queue)  # 2 queues x 2 directions
        assert {r.split("--queue-num ")[1].split()[0] for r in u32} == {"2", "3"}, queue
        assert f"-A RSFCD-Q -s {p} -d {p} -p tcp -j NFQUEUE --queue-balance 2:3 " \
               "--queue-bypass" in queue, queue

    # Back to -k all: the queueing chain goes; `del` leaves nothing behind.
    run("sh", str(SCRIPT), "add", "-q", "0", "-i", "ran0")
    assert "RSFCD-Q" not in run("iptables-legacy", "-S")
    run("sh", str(SCRIPT), "add", "-q", "0", "-i", "ran0", "-k", "uplink")
    run("sh", str(SCRIPT), "del")
    for ipt in ("iptables-legacy", "ip6tables-legacy"):
        assert "RSFCD" not in run(ipt, "-S"), ipt


def test_knob_options_refused():
    cases = [
        (["-k", "uplink"], "-k uplink needs -i or -p"),
        (["-k", "uplink", "-i", "ran0", "-P", "all"], "-k uplink queues TCP flows only"),
        (["-k", "sideways", "-i", "ran0"], "bad -k 'sideways'"),
        (["-k", "uplink", "-i", "ran0", "-t", "64k"], "bad -t '64k'"),
        (["-k", "uplink", "-i", "ran0", "-t", "0100"], "bad -t '0100'"),
        (["-H", "-i", "ran0"], "-H goes with -k"),
    ]
    for args, want in cases:
        r = subprocess.run(["sh", str(SCRIPT), "add", *args], capture_output=True, text=True,
                           env={**ENV, "IPTABLES": "/bin/false", "IP6TABLES": "/bin/false"})
        assert r.returncode != 0, args
        assert want in r.stderr, (args, r.stderr)


# ---- on real kernel TCP ----------------------------------------------------------------

def install(lab, *args):
    lab.run("gw", ["sh", str(SCRIPT), "add", "-q", "0", "-i", "ran0", *args])


def forwarded(lab) -> int:
    """Packets the gateway forwarded (both families): the FORWARD jump's counter. With the
    veths' offloads these are GRO packets of up to 64 KB, while the kernel segments them
    before queueing: rsfcd sees more packets than this counts."""
    n = 0
    for ipt in ("iptables-legacy", "ip6tables-legacy"):
        out = lab.run("gw", [ipt, "-w", "-n", "-v", "-x", "-L", "FORWARD"]).stdout
        n += sum(int(line.split()[0]) for line in out.splitlines() if " RSFCD " in line)
    return n


def queued(d) -> int:
    return int(d.metrics().value("rsfcd_packets_total"))


class Counts:
    """Packets forwarded and packets queued to rsfcd over a `with` block."""

    def __init__(self, lab, d):
        self.lab, self.d = lab, d

    def __enter__(self):
        self.fwd0, self.q0 = forwarded(self.lab), queued(self.d)
        return self

    def __exit__(self, *exc):
        self.fwd = forwarded(self.lab) - self.fwd0
        self.q = queued(self.d) - self.q0
        return False


def segments(res: dict) -> int:
    """Data segments an iperf3 run moved at most (bytes / MSS; the lab's MSS is 1448 with
    timestamps, 1428 on IPv6), a lower bound on the packets of the flow."""
    return res["end"]["sum_sent"]["bytes"] // 1448


def phone_server_upload(lab, port: int, seconds: float) -> dict:
    """The server opens the connection and the phone sends (iperf3 -R towards the phone)."""
    lab.popen("phone", ["iperf3", "-s", "-1", "-p", str(port)], stdout=subprocess.DEVNULL,
              stderr=subprocess.DEVNULL)
    wait_listening(lab, "phone", port)
    r = lab.run("srv", ["iperf3", "-c", PHONE4, "-p", str(port), "-t", str(seconds), "-R",
                        "-J"], check=False, timeout=seconds + 20)
    assert r.returncode == 0, r.stdout[-500:]
    return json.loads(r.stdout)


def test_uplink_mode_queues_uploads_only(lab, rsfcd):
    install(lab, "-k", "uplink")
    d = rsfcd(static_cfg(uplink=20000), rules=False)

    iperf3_server(lab, 5401, lab.workdir / "iperf3-down.log")
    with Counts(lab, d) as down:
        res = iperf3_client(lab, SRV4, 5401, 2, reverse=True)
    print(f"download: {segments(res)} segments, {down.fwd} packets forwarded, {down.q} queued")
    # Its ACKs alone are more than 64 KB from the phone.
    assert segments(res) > 20000, "the download moved too little to tell"
    assert down.q == 0, f"{down.q} packets of a download-only flow reached rsfcd"

    iperf3_server(lab, 5402, lab.workdir / "iperf3-up.log")
    with Counts(lab, d) as up:
        res = iperf3_client(lab, SRV4, 5402, 2)
    print(f"upload, phone opened it: {segments(res)} segments, {up.q} packets queued")
    assert segments(res) > 20000, "the upload moved too little to tell"
    # All but the first 64 KB of the upload, and its ACKs.
    assert up.q > segments(res), f"only {up.q} packets of {segments(res)} segments queued"

    with Counts(lab, d) as resp:
        res = phone_server_upload(lab, 5403, 2)
    print(f"upload, server opened it: {segments(res)} segments, {resp.q} packets queued")
    assert resp.q > segments(res), f"only {resp.q} packets of {segments(res)} segments queued"
    # No handshake was queued: every flow reached rsfcd mid-stream.
    m = d.metrics()
    assert m.value("rsfcd_flows_created_total") == 2
    assert m.value("rsfcd_flows_unregulated_total") == 2


def test_uplink_mode_with_handshakes_clamps_the_upload(lab, rsfcd, artifacts):
    install(lab, "-k", "uplink", "-H")
    clamp = 20000
    d = rsfcd(static_cfg(uplink=clamp), rules=False)

    iperf3_server(lab, 5411, lab.workdir / "iperf3-down.log")
    with Counts(lab, d) as down:
        res = iperf3_client(lab, SRV6, 5411, 2, reverse=True)
    print(f"download: {segments(res)} segments, {down.fwd} packets forwarded, {down.q} queued")
    assert segments(res) > 20000, "the download moved too little to tell"
    # The SYN and SYN-ACK of iperf3's control and data connections.
    assert down.q == 4, f"{down.q} packets of a download reached rsfcd, want its 4 handshakes"

    iperf3_server(lab, 5412, lab.workdir / "iperf3-up.log")
    with Counts(lab, d) as up, SsSampler(lab, "phone", 5412) as ss:
        res = iperf3_client(lab, SRV6, 5412, 3)
    ss.dump(lab.workdir / "ss-phone.txt")
    artifacts.add("ss samples (phone)", lab.workdir / "ss-phone.txt")
    print(f"upload: {segments(res)} segments, {up.q} packets queued, "
          f"{res['end']['sum_received']['bits_per_second'] / 1e6:.0f} Mbit/s")
    assert up.q > segments(res), f"only {up.q} packets of {segments(res)} segments queued"
    assert_snd_wnd_clamped(ss.samples, clamp, "phone (uplink knob, -k uplink -H)")
    m = d.metrics()
    assert m.value("rsfcd_windows_rewritten_total", direction="to_subscriber") > 100
    assert m.value("rsfcd_flows_unregulated_total") == 0
