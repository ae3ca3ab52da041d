"""rsfc-replay end to end.

- Crafted captures (scapy, no root): the CLI reads Ethernet+VLAN / raw-IPv6-nanosecond pcaps,
  counts flows and clamps, writes JSON lines and a JSON summary; rejects pcapng and bad
  arguments with exit status 2.
- A real capture (root, namespaces): a 3 s CUBIC upload phone -> server through gw, where
  rsfcd runs in `observe` behind NFQUEUE and tcpdump records gw's server-facing interface;
  then rsfc-replay on that pcap with the daemon's own config under static, observe and rsfc.

Run: RSFC_BUILD_DIR=build /usr/bin/python3 -m pytest -q test/integration/test_replay.py
(rsfc-replay and rsfcd are taken from RSFC_BUILD_DIR, default <repo>/build).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

import topo
from helpers import Tcpdump, iperf3_client, iperf3_server
from topo import PHONE4, PHONE6, SRV4, SRV6

REPO = Path(__file__).resolve().parents[2]
CLAMP = 16384
PORT = 5201


def replay_binary() -> Path:
    build = os.environ.get("RSFC_BUILD_DIR")
    path = (Path(build) if build else REPO / "build") / "rsfc-replay"
    if not path.exists():
        pytest.fail(f"rsfc-replay not found at {path} (build target rsfc-replay; "
                    f"set RSFC_BUILD_DIR)", pytrace=False)
    return path


@dataclass
class Replay:
    rc: int
    stdout: str
    stderr: str
    summary: dict | None
    lines: list[dict]

    def flows(self) -> list[dict]:
        return [x for x in self.lines if x["type"] == "flow"]

    def decisions(self) -> list[dict]:
        return [x for x in self.lines if x["type"] == "decision"]


def run_replay(pcap: Path, config: Path, workdir: Path, *args: str) -> Replay:
    tag = "-".join(a.replace(":", "") for a in args if not a.startswith("-")) or "default"
    out, summ = workdir / f"replay-{tag}.jsonl", workdir / f"replay-{tag}-summary.json"
    for p in (out, summ):
        p.unlink(missing_ok=True)
    r = subprocess.run([str(replay_binary()), "--config", str(config), *args, "--out", str(out),
                        "--summary", str(summ), str(pcap)],
                       capture_output=True, text=True, timeout=120)
    summary = json.loads(summ.read_text()) if summ.exists() else None
    lines = [json.loads(x) for x in out.read_text().splitlines()] if out.exists() else []
    return Replay(r.returncode, r.stdout, r.stderr, summary, lines)


def write_config(path: Path, **over) -> Path:
    path.write_text(topo.to_yaml(topo.deep_merge(topo.DEFAULT_CONFIG, over)))
    return path


# ---- crafted captures (no root) ----------------------------------------------------------

def _handshake_and_acks(wrap, ip, phone, srv, sport, n_acks):
    """SYN, SYN-ACK (both window scale 7), ACK, 3 data segments of 1000 bytes, then `n_acks`
    server ACKs offering 1000 << 7 bytes; 1 ms apart. `wrap` adds the link layer."""
    from scapy.layers.inet import TCP

    pk = []

    def add(segment, src, dst):
        p = wrap(ip(src=src, dst=dst) / segment)
        p.time = 1_700_000_000 + len(pk) * 0.001
        pk.append(p)

    opts = [("MSS", 1460), ("WScale", 7)]
    add(TCP(sport=sport, dport=PORT, flags="S", seq=1000, window=64240, options=opts),
        phone, srv)
    add(TCP(sport=PORT, dport=sport, flags="SA", seq=5000, ack=1001, window=65535,
            options=opts), srv, phone)
    add(TCP(sport=sport, dport=PORT, flags="A", seq=1001, ack=5001, window=502), phone, srv)
    for i in range(3):
        add(TCP(sport=sport, dport=PORT, flags="PA", seq=1001 + 1000 * i, ack=5001,
                window=502) / (b"x" * 1000), phone, srv)
    for i in range(1, n_acks + 1):
        add(TCP(sport=PORT, dport=sport, flags="A", seq=5001, ack=1001 + 10000 * i,
                window=1000), srv, phone)
    return pk


def test_cli_on_crafted_captures(tmp_path):
    from scapy.layers.inet import IP, TCP
    from scapy.layers.inet6 import IPv6
    from scapy.layers.l2 import Dot1Q, Ether
    from scapy.utils import wrpcap

    cfg = write_config(tmp_path / "rsfcd.yaml", uplink={"policy": "observe"})
    # IPv4 on Ethernet + 802.1Q, microsecond pcap; plus a flow without its handshake.
    vlan = lambda p: Ether() / Dot1Q(vlan=7) / p  # noqa: E731
    eth = _handshake_and_acks(vlan, IP, PHONE4, SRV4, 40000, 20)
    mid = vlan(IP(src=SRV4, dst=PHONE4) / TCP(sport=PORT, dport=40009, flags="A", window=900))
    mid.time = eth[-1].time + 0.001
    wrpcap(str(tmp_path / "eth.pcap"), eth + [mid])
    # IPv6 as raw IP in a nanosecond pcap.
    raw = _handshake_and_acks(lambda p: p, IPv6, PHONE6, SRV6, 40001, 10)
    wrpcap(str(tmp_path / "raw6.pcap"), raw, linktype=101, nano=True)

    r = run_replay(tmp_path / "eth.pcap", cfg, tmp_path, "--policy-uplink", f"static:{CLAMP}")
    assert r.rc == 0, r.stderr
    s = r.summary
    assert s["complete"] is True and s["linktype"] == "ethernet"
    assert s["records"] == len(eth) + 1
    assert s["flows"] == {"total": 2, "regulated": 1, "unregulated": 1, "without_acks": 0,
                          "clamped": 1}
    assert s["acks"]["uplink"] == {"policy": f"static:{CLAMP}", "acks": 20, "clamped": 20}
    assert s["acks"]["clamped_share"] == 1.0
    assert s["median_t_buff_ms"] is None
    assert sum(s["parse_errors"].values()) == 0
    (flow,) = [f for f in r.flows() if f["status"] == "regulated"]
    assert (flow["subscriber"], flow["subscriber_port"], flow["peer"], flow["peer_port"]) == \
        (PHONE4, 40000, SRV4, PORT)
    assert flow["bytes_from_subscriber"] == 3000
    assert flow["uplink"]["acks_rewritten"] == 20
    assert flow["uplink"]["window_median"] == CLAMP
    assert flow["uplink"]["advertised_median"] == 1000 << 7
    assert "flows: 2 total, 1 regulated, 1 unregulated" in r.stdout

    r6 = run_replay(tmp_path / "raw6.pcap", cfg, tmp_path, "--policy-uplink", "observe")
    assert r6.rc == 0, r6.stderr
    assert r6.summary["linktype"] == "raw"
    assert r6.summary["flows"]["regulated"] == 1 and r6.summary["flows"]["clamped"] == 0
    (f6,) = r6.flows()
    assert f6["subscriber"] == PHONE6 and f6["uplink"]["acks"] == 10
    assert f6["uplink"]["window_min"] == 1000 << 7
    # Nanosecond timestamps: the flow's packets are exactly 1 ms apart.
    assert f6["time_s"] == pytest.approx((len(raw) - 1) * 0.001, abs=1e-6)


def test_cli_errors_are_clear(tmp_path):
    from scapy.layers.inet import IP, TCP
    from scapy.layers.l2 import Ether
    from scapy.utils import wrpcap, wrpcapng

    cfg = write_config(tmp_path / "rsfcd.yaml", uplink={"policy": "observe"})
    pkt = Ether() / IP(src=PHONE4, dst=SRV4) / TCP()
    wrpcapng(str(tmp_path / "x.pcapng"), [pkt])
    r = run_replay(tmp_path / "x.pcapng", cfg, tmp_path)
    assert r.rc == 2 and "pcapng is not supported" in r.stderr, r.stderr

    wrpcap(str(tmp_path / "ok.pcap"), [pkt])
    for args, msg in ((("--policy-uplink", "drwa"), "drwa is for the downlink knob only"),
                      (("--policy-uplink", "static:12"), "1072 .. 1073725440"),
                      (("--policy-uplink", "off"), "both knobs are off"),
                      (("--bogus",), "unknown option --bogus")):
        r = run_replay(tmp_path / "ok.pcap", cfg, tmp_path, *args)
        assert r.rc == 2 and msg in r.stderr, (args, r.stderr)
    bad_cfg = tmp_path / "bad.yaml"
    bad_cfg.write_text("uplink: {policy: sometimes}\n")
    r = run_replay(tmp_path / "ok.pcap", bad_cfg, tmp_path)
    assert r.rc == 2 and "bad.yaml" in r.stderr, r.stderr

    # A capture cut inside its last record: what came before is reported, exit status 1.
    data = (tmp_path / "ok.pcap").read_bytes()
    (tmp_path / "cut.pcap").write_bytes(data + data[24:24 + 30])
    r = run_replay(tmp_path / "cut.pcap", cfg, tmp_path)
    assert r.rc == 1, r.stderr
    assert r.summary["complete"] is False and "cut short" in r.summary["error"]
    assert r.summary["records"] == 1


# ---- a real upload through the lab ---------------------------------------------------------

@dataclass
class Upload:
    pcap: Path
    config: Path
    workdir: Path
    metrics: topo.Metrics
    iperf: dict


@pytest.fixture(scope="module")
def upload(prerequisites, request):
    """A 3 s CUBIC upload (iperf3, 50 Mbit/s) phone -> srv; rsfcd in observe on gw; tcpdump
    on gw's srv0 (full packets). Kept in the workdir if a test of this module fails."""
    replay_binary()
    name = f"rp{os.getpid() % 100000:x}"
    workdir = Path(tempfile.gettempdir()) / "rsfc-replay-it" / name
    shutil.rmtree(workdir, ignore_errors=True)
    failed_before = request.session.testsfailed
    with topo.Topology(name=name, workdir=workdir) as t:
        t.nfqueue_rules([0])
        with topo.Daemon(t, {"uplink": {"policy": "observe"}}, binary=prerequisites) as d:
            iperf3_server(t, PORT, workdir / "iperf3-server.log")
            pcap = workdir / "gw-srv0.pcap"
            with Tcpdump(t, "gw", "srv0", pcap, count=10_000_000, snaplen=0):
                res = iperf3_client(t, SRV4, PORT, 3, extra=("-b", "50M"))
                time.sleep(1)  # let tcpdump drain its ring before SIGINT
            metrics = d.metrics()
            assert d.alive(), f"rsfcd died during the upload:\n{d.log_tail()}"
            config = d.config_path
    yield Upload(pcap, config, workdir, metrics, res)
    if request.session.testsfailed == failed_before:
        shutil.rmtree(workdir, ignore_errors=True)
    else:
        print(f"\nrsfc-replay lab artifacts kept in {workdir}")


def iperf_flows(r: Replay) -> list[dict]:
    return [f for f in r.flows() if (f["subscriber"], f["peer"], f["peer_port"]) ==
            (PHONE4, SRV4, PORT)]


def data_flow(r: Replay) -> dict:
    return max(iperf_flows(r), key=lambda f: f["bytes_from_subscriber"])


@pytest.mark.timeout(120)
def test_replay_static_on_real_upload(upload):
    received = upload.iperf["end"]["sum_received"]["bytes"]
    r = run_replay(upload.pcap, upload.config, upload.workdir, "--policy-uplink",
                   f"static:{CLAMP}")
    assert r.rc == 0, r.stderr
    s = r.summary
    assert s["complete"] and s["truncated_records"] == 0
    # tcpdump records everything on srv0 (IPv6 neighbour discovery too): not TCP is no error.
    assert {k: v for k, v in s["parse_errors"].items() if v and k != "not_tcp"} == {}
    # iperf3's control and data connections, both with their handshake in the capture.
    flows = iperf_flows(r)
    assert len(flows) == 2, r.flows()
    assert all(f["status"] == "regulated" and f["initiator"] == "subscriber" for f in flows)
    assert s["flows"]["regulated"] >= 2 and s["flows"]["unregulated"] == 0
    d = data_flow(r)
    # Every byte the server got went past gw (retransmissions count again).
    assert d["bytes_from_subscriber"] >= received, (d, received)
    # The server's ACKs offer far more than the clamp: nearly all would have been lowered,
    # and the window mostly applied is the clamp itself (16384 is a multiple of any scale
    # unit up to 2^14, so no rounding).
    up = d["uplink"]
    assert up["acks"] > 100 and up["acks_rewritten"] > 0.9 * up["acks"], up
    assert up["window_median"] == CLAMP and up["advertised_median"] > CLAMP, up
    assert s["flows"]["clamped"] >= 1
    assert s["acks"]["clamped_share"] > 0.9
    assert "would have been clamped" in r.stdout


@pytest.mark.timeout(120)
def test_replay_observe_agrees_with_the_daemon(upload):
    r = run_replay(upload.pcap, upload.config, upload.workdir)  # the daemon's own policy
    assert r.rc == 0, r.stderr
    s = r.summary
    assert s["policies"] == {"uplink": "observe", "downlink": "off"}
    assert s["flows"]["clamped"] == 0 and s["acks"]["clamped_share"] is None
    # The daemon saw the same traffic through NFQUEUE (observe) as tcpdump behind it.
    created = upload.metrics.value("rsfcd_flows_created_total")
    assert s["engine"]["flows_created"] == created, (s["engine"], created)
    assert s["engine"]["flows_unregulated"] == \
        upload.metrics.value("rsfcd_flows_unregulated_total") == 0
    assert data_flow(r)["uplink"]["window_min"] > CLAMP


@pytest.mark.timeout(120)
def test_replay_rsfc_decisions_on_real_upload(upload):
    r = run_replay(upload.pcap, upload.config, upload.workdir, "--policy-uplink", "rsfc")
    assert r.rc == 0, r.stderr
    s = r.summary
    assert s["policies"]["uplink"] == "rsfc" and s["complete"]
    assert len(iperf_flows(r)) == 2 and s["flows"]["regulated"] >= 2
    d = data_flow(r)
    decisions = r.decisions()
    # Every decision line belongs to a flow of the capture and is well-formed.
    assert s["decision_records"] == len(decisions) == sum(f["decisions"] for f in r.flows())
    assert sum(s["decision_states"].values()) == len(decisions)
    for x in decisions:
        assert x["knob"] == "uplink" and x["subscriber"] == PHONE4 and x["state"], x
        assert 0 <= x["time_s"] <= s["duration_s"] + 1e-6, x
        assert x["target_bytes"] >= 2920, x  # never below min_window_bytes
        assert isinstance(x["window_bytes"], int) and x["window_bytes"] >= 0, x  # advertised
        assert x["timestamps"] is True, x  # the lab phone sends TCP timestamps
    mine = [x for x in decisions if x["subscriber_port"] == d["subscriber_port"]]
    assert len(mine) >= 10, f"{len(mine)} decisions for a 3 s bulk upload"
    assert all(x["rtt_min_ms"] is not None and x["rtt_min_ms"] > 0 for x in mine[-5:])
    assert any(x["t_buff_ms"] is not None for x in mine)
    assert s["median_t_buff_ms"] is not None and s["flows_with_t_buff"] >= 1
    assert d["t_buff_median_ms"] is not None
    # No shaping in this topology: the uplink has no standing queue to speak of (generous
    # bound for a loaded 2-core machine; a unit error would show up as seconds).
    assert d["t_buff_median_ms"] < 100, d
    assert "median t_buff over" in r.stdout


def cut_capture(src: Path, dst: Path, snaplen: int) -> int:
    """Writes `src` (classic pcap) as `tcpdump -s snaplen` would have kept it: each record's
    data cut to `snaplen` bytes, its original length kept. Returns the records cut."""
    import struct
    b = src.read_bytes()
    magic = b[:4]
    e = "<" if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    head = bytearray(b[:24])
    struct.pack_into(e + "I", head, 16, snaplen)
    out, at, cut = [bytes(head)], 24, 0
    while at + 16 <= len(b):
        sec, frac, caplen, length = struct.unpack_from(e + "IIII", b, at)
        data = b[at + 16:at + 16 + caplen]
        keep = data[:snaplen]
        cut += len(keep) < caplen
        out.append(struct.pack(e + "IIII", sec, frac, len(keep), length) + keep)
        at += 16 + caplen
    dst.write_bytes(b"".join(out))
    return cut


@pytest.mark.timeout(120)
def test_replay_of_a_header_only_capture_decides_as_the_whole_one(upload):
    """Operators keep `-s 96` captures: the same traffic cut to 96 bytes a packet replays with
    the same decisions, on both knobs, and the summary says what could not be checked."""
    cut96 = upload.workdir / "gw-srv0-s96.pcap"
    n_cut = cut_capture(upload.pcap, cut96, 96)
    assert n_cut > 1000  # the upload's data segments
    args = ("--policy-uplink", "rsfc", "--policy-downlink", "rsfc")
    whole = run_replay(upload.pcap, upload.config, upload.workdir, *args)
    cut = run_replay(cut96, upload.config, upload.workdir, *args)
    assert whole.rc == 0 and cut.rc == 0, (whole.stderr, cut.stderr)
    s = cut.summary
    # Every cut TCP segment replays from its headers; what is not parsed is not TCP (IPv6
    # neighbour discovery on srv0), as in the whole capture.
    assert s["truncated_records"] == n_cut, s
    assert s["header_only_records"] + s["headers_cut_records"] == n_cut, s
    assert s["headers_cut_records"] <= s["parse_errors"].get("not_tcp", 0), s
    assert s["parse_errors"].get("truncated_tcp", 0) == s["parse_errors"].get("truncated_ip", 0) == 0
    assert s["header_only_records"] > 1000
    assert s["policies"] == {"uplink": "rsfc", "downlink": "rsfc"}
    assert len(whole.decisions()) >= 10
    assert cut.decisions() == whole.decisions()
    assert "replayed from their headers" in cut.stdout
