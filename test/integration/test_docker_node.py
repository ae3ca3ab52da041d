"""docker/node.py (the docker lab's entry point) run for real, without Docker: five network
namespaces stand in for the Docker host and the four containers. The "host" has one Linux
bridge per compose network with the bridge gateway address docker-compose.yml gives it;
each "container" gets veths named the Docker way (eth0, eth1, in an order that differs from
the lab's), the addresses and the default route Docker would give it. Then each node runs
`node.py ROLE` as its container would: the interfaces must come out renamed, the lab's
routes in place, rsfcd running on gw behind NFQUEUE, iperf3 serving on srv, and a CUBIC
upload over IPv4 and IPv6 from phone to server must go through rsfcd.

What this does not cover: Docker itself (image build, compose, its iptables rules, its
read-only /proc/sys) — test_docker_lab.py runs the docker lab for real.
Run as root: RSFC_BUILD_DIR=build /usr/bin/python3 -m pytest -q test/integration/test_docker_node.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

import topo

REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "docker" / "docker-compose.yml"
SERVICE_ROLE = {"phone": "phone", "bs": "bs", "gw": "gw", "server": "srv"}
# Docker's interface order for each container, deliberately not the lab's order.
DOCKER_ORDER = {"phone": ["ran_access"], "bs": ["ran_core", "ran_access"],
                "gw": ["internet", "ran_core"], "server": ["internet"]}


def sh(argv, check=True, timeout=30, **kw):
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kw)
    if check and r.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, argv))} failed ({r.returncode}):\n"
                             f"{r.stdout}\n{r.stderr}")
    return r


class FakeDocker:
    """Namespaces f"{prefix}-host" and f"{prefix}-{service}" wired like compose would."""

    def __init__(self, prefix: str, workdir: Path):
        self.prefix, self.workdir = prefix, workdir
        self.compose = yaml.safe_load(COMPOSE.read_text())
        self.procs: list[subprocess.Popen] = []
        self.names = [f"{prefix}-host"] + [f"{prefix}-{s}" for s in SERVICE_ROLE]

    def ns(self, service: str) -> str:
        return f"{self.prefix}-{service}"

    def exec(self, service: str, argv, **kw):
        return sh(["ip", "netns", "exec", self.ns(service), *map(str, argv)], **kw)

    def up(self):
        for n in self.names:
            if Path(f"/run/netns/{n}").exists():
                raise RuntimeError(f"namespace {n} exists (left over?)")
        for n in self.names:
            sh(["ip", "netns", "add", n])
        host = self.ns("host")
        for key in ("all", "default"):
            sh(["ip", "netns", "exec", host, "sysctl", "-qw", f"net.ipv6.conf.{key}.accept_dad=0"])
        for i, (net, cfg) in enumerate(self.compose["networks"].items()):
            br = f"br{i}"
            sh(["ip", "-n", host, "link", "add", br, "type", "bridge"])
            for c in cfg["ipam"]["config"]:
                plen = c["subnet"].split("/")[1]
                fam = "-6" if ":" in c["gateway"] else "-4"
                sh(["ip", "-n", host, fam, "addr", "add", f"{c['gateway']}/{plen}", "dev", br]
                   + (["nodad"] if fam == "-6" else []))
            sh(["ip", "-n", host, "link", "set", br, "up"])
        bridges = {net: f"br{i}" for i, net in enumerate(self.compose["networks"])}
        for service, nets in DOCKER_ORDER.items():
            ns = self.ns(service)
            for key in ("all", "default"):
                sh(["ip", "netns", "exec", ns, "sysctl", "-qw",
                    f"net.ipv6.conf.{key}.accept_dad=0"])
            for k, net in enumerate(nets):
                eth, peer = f"eth{k}", f"v{service[:4]}{k}"
                sh(["ip", "link", "add", eth, "netns", ns, "type", "veth", "peer", "name", peer,
                    "netns", host])
                sh(["ip", "-n", host, "link", "set", peer, "master", bridges[net], "up"])
                addrs = self.compose["services"][service]["networks"][net]
                subnets = {(":" in c["subnet"]): c for c in
                           self.compose["networks"][net]["ipam"]["config"]}
                for v6, key in ((False, "ipv4_address"), (True, "ipv6_address")):
                    plen = subnets[v6]["subnet"].split("/")[1]
                    sh(["ip", "-n", ns, "-6" if v6 else "-4", "addr", "add",
                        f"{addrs[key]}/{plen}", "dev", eth] + (["nodad"] if v6 else []))
                sh(["ip", "-n", ns, "link", "set", eth, "up"])
                if k == 0:  # Docker's default route: the first network's bridge gateway
                    for v6 in (False, True):
                        sh(["ip", "-n", ns, "-6" if v6 else "-4", "route", "add", "default",
                            "via", subnets[v6]["gateway"]])
            sh(["ip", "-n", ns, "link", "set", "lo", "up"])
        return self

    def node(self, service: str, setup_only: bool):
        """Runs docker/node.py as the container's entry point would (with its environment)."""
        svc = self.compose["services"][service]
        env = dict(os.environ)
        env.update({k: str(v) for k, v in (svc.get("environment") or {}).items()})
        env["RSFCD_CONFIG"] = str(REPO / "docker" / "rsfcd-lab.yaml")  # work-tree path
        env["RSFC_NODE_RUN_DIR"] = str(self.workdir / service)  # its ready file, not /run's
        (self.workdir / service).mkdir(exist_ok=True)
        argv = ["ip", "netns", "exec", self.ns(service), sys.executable,
                str(REPO / "docker" / "node.py"), *svc["command"]]
        if setup_only:
            return sh(argv + ["--setup-only"], env=env, timeout=60)
        log = open(self.workdir / f"{service}.log", "wb")
        p = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT,
                             start_new_session=True)
        log.close()
        self.procs.append(p)
        return p

    def down(self):
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, 9)
                except ProcessLookupError:
                    pass
                p.wait(timeout=5)
        for n in self.names:
            if not Path(f"/run/netns/{n}").exists():
                continue
            for pid in sh(["ip", "netns", "pids", n], check=False).stdout.split():
                try:
                    os.kill(int(pid), 9)
                except (ProcessLookupError, ValueError):
                    pass
            sh(["ip", "netns", "del", n], check=False)


def wait_for(what: str, fn, timeout: float = 10):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            v = fn()
            if v:
                return v
        except Exception as e:  # noqa: BLE001 - reported below
            last = e
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what} ({last})")


def iface_addrs(fd: FakeDocker, service: str) -> dict[str, set[str]]:
    out = json.loads(fd.exec(service, ["ip", "-j", "addr", "show"]).stdout)
    return {l["ifname"]: {a["local"] for a in l.get("addr_info", []) if a["scope"] == "global"}
            for l in out}


@pytest.fixture
def fake_docker(prerequisites, tmp_path):
    topo.ensure_host_cc_allowed("cubic")  # what common.sh cannot do from inside
    fd = FakeDocker(f"rpd{os.getpid() % 100000:x}", tmp_path)
    try:
        yield fd.up()
    finally:
        fd.down()


@pytest.mark.timeout(120)
def test_node_py_builds_the_lab_in_docker_like_namespaces(fake_docker):
    fd = fake_docker
    fd.node("phone", setup_only=True)
    fd.node("bs", setup_only=True)
    gw = fd.node("gw", setup_only=False)
    srv = fd.node("server", setup_only=False)

    def rsfcd_metrics():
        if gw.poll() is not None:
            raise AssertionError(f"gw's node.py/rsfcd exited {gw.returncode}: "
                                 f"{(fd.workdir / 'gw.log').read_text()}")
        return fd.exec("gw", ["curl", "-sf", "http://127.0.0.1:9477/metrics"],
                       check=False).stdout

    wait_for("rsfcd /metrics on gw", rsfcd_metrics)
    rules = fd.exec("gw", ["iptables-legacy", "-S", "RSFCD"]).stdout
    assert "--queue-num 0 --queue-bypass" in rules, rules
    wait_for("iperf3 -s on server", lambda: fd.exec(
        "server", ["ss", "-tlnH", "( sport = :5201 )"]).stdout.strip())
    # Both entry points are past their setup now (they exec'd their service).

    # Interfaces renamed to the lab's names, each with its lab addresses.
    for service in SERVICE_ROLE:
        role = SERVICE_ROLE[service]
        have = iface_addrs(fd, service)
        for towards, dev in topo.IFACES[role].items():
            assert dev in have, f"{service}: no {dev} (have {sorted(have)})"
        assert not [d for d in have if d.startswith(("rsfctmp", "eth1"))], have
    assert iface_addrs(fd, "gw")["ran0"] == {topo.GW_RAN4, topo.GW_RAN6}
    assert iface_addrs(fd, "gw")["srv0"] == {topo.GW_SRV4, topo.GW_SRV6}
    assert iface_addrs(fd, "bs")["phone0"] == {topo.BS_PHONE4, topo.BS_PHONE6}
    # The lab's default routes replaced Docker's.
    r = json.loads(fd.exec("phone", ["ip", "-j", "-4", "route", "show", "default"]).stdout)
    assert [x["gateway"] for x in r] == [topo.BS_PHONE4]

    for dst in (topo.SRV4, topo.SRV6):
        r = fd.exec("phone", ["iperf3", "-c", dst, "-t", "2", "-C", "cubic", "-J"], timeout=30)
        res = json.loads(r.stdout)
        assert res["end"]["sum_received"]["bytes"] > 1_000_000, dst
    m = topo.parse_prometheus(rsfcd_metrics())
    # Two iperf3 connections (control + data) per address family went through rsfcd.
    assert m.value("rsfcd_flows_created_total") >= 4, rsfcd_metrics()
    assert m.value("rsfcd_flows_unregulated_total") == 0
    assert srv.poll() is None and gw.poll() is None
    # Both entry points said they were ready (docker/lab.py waits for that).
    for service in ("gw", "server"):
        assert (fd.workdir / service / "rsfc-node.ready").exists(), service
