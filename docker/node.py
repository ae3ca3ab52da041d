#!/usr/bin/python3
"""Entry point of the docker lab's containers: makes THIS container one node of the
phone ── bs ── gw ── srv lab by running the same lab/node/*.sh scripts, with the same
arguments and environment, as lab/topo.py runs in network namespaces; then starts the
node's service.

    node.py ROLE [--setup-only]      ROLE: phone | bs | gw | srv

1. Docker has already attached the container to its networks with the lab's addresses
   (docker-compose.yml), under names of its own choosing (eth0, eth1, ...). Each interface
   is found by its IPv4 address and renamed to the lab's name (lab/topo.py IFACES).
2. The node scripts run in lab/topo.py's order: common.sh, link.sh per interface,
   router.sh (bs, gw), routes.sh, and on gw gateway.sh (NFQUEUE rules, fail open).
3. Service (replaces this process): gw runs rsfcd, srv runs `iperf3 -s`, phone and bs
   sleep. On bs, RSFC_UPLINK_BOTTLENECK / RSFC_DOWNLINK_BOTTLENECK = "RATE_BIT_S BUFFER_BYTES"
   apply lab/node/bs-bottleneck.sh to gw0 / phone0 first.

Every address and interface name comes from lab/topo.py itself (imported), so the two labs
cannot drift apart; test/integration/test_docker_files.py checks the step list against
what Topology.up() runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(os.environ.get("RSFC_REPO", Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(REPO / "lab"))
import topo  # noqa: E402

ROLES = topo.ROLES


@dataclass(frozen=True)
class Step:
    script: str
    args: tuple[str, ...] = ()
    env: dict = field(default_factory=dict, hash=False, compare=True)


def links(role: str) -> list[tuple[str, str, str]]:
    """(interface, IPv4 address, IPv6 address) of `role`, in lab/topo.py's order."""
    t = topo
    by_role = {
        "phone": [(t.IFACES["phone"]["bs"], t.PHONE4, t.PHONE6)],
        "bs": [(t.IFACES["bs"]["phone"], t.BS_PHONE4, t.BS_PHONE6),
               (t.IFACES["bs"]["gw"], t.BS_CORE4, t.BS_CORE6)],
        "gw": [(t.IFACES["gw"]["bs"], t.GW_RAN4, t.GW_RAN6),
               (t.IFACES["gw"]["srv"], t.GW_SRV4, t.GW_SRV6)],
        "srv": [(t.IFACES["srv"]["gw"], t.SRV4, t.SRV6)],
    }
    return by_role[role]


def steps(role: str, cc_phone: str = "cubic", cc_srv: str = "cubic",
          phone_timestamps: bool = True, queues: str = "0", proto: str = "tcp") -> list[Step]:
    """The lab/node scripts `role` runs, as Topology.up() (+ nfqueue_rules on gw) runs them."""
    t = topo
    common_env = {
        "phone": {"RSFC_CC": cc_phone or "", "RSFC_TIMESTAMPS": "1" if phone_timestamps else "0"},
        "srv": {"RSFC_CC": cc_srv or ""},
        "bs": {}, "gw": {},
    }[role]
    out = [Step("common.sh", (), common_env)]
    for dev, a4, a6 in links(role):
        out.append(Step("link.sh", (dev, f"{a4}/24", f"{a6}/64")))
    if role in ("bs", "gw"):
        out.append(Step("router.sh"))
    routes = {
        "phone": ("default", t.BS_PHONE4, "default", t.BS_PHONE6),
        "bs": ("default", t.GW_RAN4, "default", t.GW_RAN6),
        "gw": ("198.18.0.0/16", t.BS_CORE4, "2001:2:0:1::/64", t.BS_CORE6),
        "srv": ("default", t.GW_SRV4, "default", t.GW_SRV6),
    }[role]
    out.append(Step("routes.sh", routes))
    if role == "gw":
        out.append(Step("gateway.sh", (queues, proto), {"RSFC_FAMILIES": "4 6"}))
    return out


def _run(argv: list[str], env: dict | None = None) -> None:
    print("node.py:", " ".join(argv), flush=True)
    full = dict(os.environ)
    full.update(env or {})
    r = subprocess.run(argv, env=full)
    if r.returncode != 0:
        raise SystemExit(f"node.py: {' '.join(argv)} failed with status {r.returncode}")


def interfaces_by_ipv4() -> dict[str, str]:
    out = subprocess.run(["ip", "-j", "-4", "addr", "show"], capture_output=True, text=True,
                         check=True).stdout
    by_addr = {}
    for link in json.loads(out):
        for a in link.get("addr_info", []):
            by_addr[a["local"]] = link["ifname"]
    return by_addr


def rename_interfaces(role: str) -> None:
    """Gives each interface the lab's name, found by the IPv4 address Docker put on it.
    Two passes (through temporary names) so that e.g. eth0 <-> eth1 swaps work."""
    have = interfaces_by_ipv4()
    plan = []
    for dev, a4, _ in links(role):
        cur = have.get(a4)
        if cur is None:
            raise SystemExit(f"node.py: no interface has {a4}: is the {role} container attached "
                             f"to its network with ipv4_address {a4}? (have {have})")
        if cur != dev:
            plan.append((cur, dev))
    for i, (cur, _) in enumerate(plan):
        _run(["ip", "link", "set", "dev", cur, "down"])
        _run(["ip", "link", "set", "dev", cur, "name", f"rsfctmp{i}"])
    for i, (_, dev) in enumerate(plan):
        _run(["ip", "link", "set", "dev", f"rsfctmp{i}", "name", dev])
        # link.sh brings it up again and restores the IPv6 address lost while down.


def setup(role: str) -> None:
    rename_interfaces(role)
    cc = os.environ.get("RSFC_CC", "cubic")
    ts = os.environ.get("RSFC_TIMESTAMPS", "1") != "0"
    for s in steps(role, cc_phone=cc, cc_srv=cc, phone_timestamps=ts,
                   queues=os.environ.get("RSFC_QUEUES", "0")):
        _run(["sh", str(REPO / "lab" / "node" / s.script), *s.args], env=s.env)
    if role == "bs":
        for var, towards in (("RSFC_UPLINK_BOTTLENECK", "gw"), ("RSFC_DOWNLINK_BOTTLENECK", "phone")):
            spec = os.environ.get(var, "").split()
            if spec:
                if len(spec) != 2:
                    raise SystemExit(f"node.py: {var} must be 'RATE_BIT_S BUFFER_BYTES'")
                _run(["sh", str(REPO / "lab" / "node" / "bs-bottleneck.sh"),
                      topo.IFACES["bs"][towards], *spec])


def service(role: str) -> list[str]:
    if role == "gw":
        config = os.environ.get("RSFCD_CONFIG", str(REPO / "docker" / "rsfcd-lab.yaml"))
        return [str(topo.rsfcd_binary()), "--config", config]
    if role == "srv":
        return ["iperf3", "-s"]
    return ["sleep", "infinity"]


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ROLES or argv[1:] not in ([], ["--setup-only"]):
        print(__doc__, file=sys.stderr)
        return 2
    role = argv[0]
    setup(role)
    if argv[1:] == ["--setup-only"]:
        return 0
    cmd = service(role)
    print("node.py: exec", " ".join(cmd), flush=True)
    os.execvp(cmd[0], cmd)
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
