"""The docker lab's files, checked without Docker (and without root): docker-compose.yml is
valid YAML with the four nodes, each built from docker/Dockerfile with NET_ADMIN; its
networks and addresses are lab/topo.py's; every script, path and config it refers to
exists and is valid; docker/node.py runs exactly the node scripts Topology.up() runs; the
Dockerfile installs exactly setup.sh's packages.

Run: /usr/bin/python3 -m pytest -q test/integration/test_docker_files.py
(the rsfcd --check-config test needs <RSFC_BUILD_DIR or repo/build>/rsfcd).
"""

from __future__ import annotations

import importlib.util
import ipaddress
import re
import shlex
import subprocess
import sys
from pathlib import Path, PurePosixPath

import pytest
import yaml

import topo

REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "docker"
COMPOSE = DOCKER / "docker-compose.yml"
DOCKERFILE = DOCKER / "Dockerfile"
IMAGE_REPO = PurePosixPath("/opt/rsfcd/src")  # where the Dockerfile puts the repository

SERVICE_ROLE = {"phone": "phone", "bs": "bs", "gw": "gw", "server": "srv"}
# Compose network -> the lab link it stands for (the two roles on it).
NETWORK_LINK = {"ran_access": ("phone", "bs"), "ran_core": ("bs", "gw"),
                "internet": ("gw", "srv")}
# (role, network) -> (IPv4, IPv6) from lab/topo.py.
ADDRESSES = {
    ("phone", "ran_access"): (topo.PHONE4, topo.PHONE6),
    ("bs", "ran_access"): (topo.BS_PHONE4, topo.BS_PHONE6),
    ("bs", "ran_core"): (topo.BS_CORE4, topo.BS_CORE6),
    ("gw", "ran_core"): (topo.GW_RAN4, topo.GW_RAN6),
    ("gw", "internet"): (topo.GW_SRV4, topo.GW_SRV6),
    ("srv", "internet"): (topo.SRV4, topo.SRV6),
}


def load_node_py():
    if "docker_node" not in sys.modules:
        spec = importlib.util.spec_from_file_location("docker_node", DOCKER / "node.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules["docker_node"] = mod  # dataclasses look their module up there
        spec.loader.exec_module(mod)
    return sys.modules["docker_node"]


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def host_path(container_path: str, compose_doc: dict) -> Path:
    """Maps a path inside a container to the work tree through the compose volumes (or the
    image's copy of the repository)."""
    p = PurePosixPath(container_path)
    vols = compose_doc["services"]["gw"]["volumes"]
    for v in vols:
        src, dst = v.split(":")[:2]
        if p == PurePosixPath(dst) or PurePosixPath(dst) in p.parents:
            return (COMPOSE.parent / src / p.relative_to(dst)).resolve()
    assert IMAGE_REPO in p.parents, f"{container_path} is neither mounted nor in the image"
    return REPO / p.relative_to(IMAGE_REPO)


def test_compose_services_build_the_image_with_net_admin(compose):
    assert set(compose["services"]) == set(SERVICE_ROLE)
    for name, svc in compose["services"].items():
        assert svc["image"] == "rsfcd-lab:latest", name
        build = svc["build"]
        ctx = (COMPOSE.parent / build["context"]).resolve()
        assert ctx == REPO, f"{name}: build context {ctx} is not the repository root"
        assert (ctx / build["dockerfile"]).resolve() == DOCKERFILE
        assert "NET_ADMIN" in svc["cap_add"], name
        assert "systempaths=unconfined" in svc["security_opt"], \
            f"{name}: the node scripts write net.* sysctls; /proc/sys must be writable"
        assert svc["init"] is True, name
        assert svc["command"] == [SERVICE_ROLE[name]], name
        for v in svc["volumes"]:
            src = (COMPOSE.parent / v.split(":")[0]).resolve()
            assert src.is_dir(), f"{name}: volume source {src} does not exist"


def lab_networks() -> dict[tuple[str, str], tuple]:
    """(role, IPv4 address) -> (IPv4 network, IPv6 network) as lab/node/link.sh gets them
    from docker/node.py (whose steps equal Topology.up()'s, see below)."""
    node = load_node_py()
    out = {}
    for role in topo.ROLES:
        for s in node.steps(role):
            if s.script == "link.sh":
                _, a4, a6 = s.args
                i4, i6 = ipaddress.ip_interface(a4), ipaddress.ip_interface(a6)
                out[(role, str(i4.ip))] = (i4.network, i6.network)
    return out


def test_compose_addresses_are_lab_topology_constants(compose):
    services, nets = compose["services"], compose["networks"]
    assert set(nets) == set(NETWORK_LINK)
    prefixes = lab_networks()
    for name, svc in services.items():
        role = SERVICE_ROLE[name]
        want = {net for (r, net) in ADDRESSES if r == role}
        assert set(svc["networks"]) == want, name
        for net, addrs in svc["networks"].items():
            a4, a6 = ADDRESSES[(role, net)]
            assert ipaddress.ip_address(addrs["ipv4_address"]) == ipaddress.ip_address(a4), name
            assert ipaddress.ip_address(addrs["ipv6_address"]) == ipaddress.ip_address(a6), name
    for net, (a, b) in NETWORK_LINK.items():
        cfg = nets[net]
        assert cfg["enable_ipv6"] is True, net
        assert cfg["driver_opts"]["com.docker.network.bridge.enable_ip_masquerade"] == "false"
        members = {SERVICE_ROLE[n] for n, svc in services.items() if net in svc["networks"]}
        assert members == {a, b}, net
        subnets = {ipaddress.ip_network(c["subnet"]): ipaddress.ip_address(c["gateway"])
                   for c in cfg["ipam"]["config"]}
        node_addrs = set()
        for role in (a, b):
            a4, a6 = ADDRESSES[(role, net)]
            node_addrs |= {ipaddress.ip_address(a4), ipaddress.ip_address(a6)}
            # Docker's subnet is the one link.sh puts the address in (same prefix length).
            assert set(subnets) == set(prefixes[(role, a4)]), (net, role)
        for subnet, gateway in subnets.items():
            assert gateway in subnet, net
            assert gateway not in node_addrs, f"{net}: the bridge would take a node's address"


def test_routers_forward_and_hosts_accept_crafted_addresses(compose):
    for name, svc in compose["services"].items():
        sc = {k: str(v) for k, v in svc["sysctls"].items()}
        assert sc.get("net.ipv4.conf.all.rp_filter") == "0", name
        forwarding = {k: sc.get(k) for k in ("net.ipv4.ip_forward", "net.ipv6.conf.all.forwarding")}
        want = "1" if SERVICE_ROLE[name] in ("bs", "gw") else None
        assert forwarding == {k: want for k in forwarding}, name


def test_node_py_runs_what_topology_up_runs(monkeypatch, tmp_path):
    """Records every lab/node script call of Topology.up() + nfqueue_rules([0]) (nothing is
    executed) and compares it, per role, with docker/node.py's steps."""
    calls: dict[str, list] = {r: [] for r in topo.ROLES}

    def record(self, role, script, *args, env=None):
        calls[role].append((script, tuple(args), dict(env or {})))

    monkeypatch.setattr(topo.Topology, "node_script", record)
    monkeypatch.setattr(topo, "_sh", lambda *a, **k: None)
    monkeypatch.setattr(topo, "require_root_and_tools", lambda *a, **k: None)
    monkeypatch.setattr(topo, "ensure_host_cc_allowed", lambda cc: None)
    t = topo.Topology(name="rpfiles", workdir=tmp_path)
    t.up()
    t.nfqueue_rules([0])
    t._up = False  # nothing to tear down
    node = load_node_py()
    for role in topo.ROLES:
        mine = [(s.script, tuple(s.args), dict(s.env)) for s in node.steps(role)]
        assert mine == calls[role], f"{role}: docker/node.py and lab/topo.py differ"
    # And with the other knobs topo.py has.
    calls = {r: [] for r in topo.ROLES}
    topo.Topology(name="rpfiles2", workdir=tmp_path, cc_phone="reno", cc_srv="bbr",
                  phone_timestamps=False).up()
    assert [(s.script, s.args, s.env) for s in node.steps("phone", cc_phone="reno",
                                                          phone_timestamps=False)] == \
        calls["phone"]
    assert [(s.script, s.args, s.env) for s in node.steps("srv", cc_srv="bbr")] == calls["srv"]


def test_every_script_and_path_exists(compose):
    node = load_node_py()
    node_dir = REPO / "lab" / "node"
    scripts = {s.script for role in topo.ROLES for s in node.steps(role)} | {"bs-bottleneck.sh"}
    for s in sorted(scripts):
        path = node_dir / s
        assert path.is_file(), f"{path} missing"
        r = subprocess.run(["sh", "-n", str(path)], capture_output=True, text=True)
        assert r.returncode == 0, f"{path}: {r.stderr}"
    # The entry point and the gw's config, as the containers see them.
    entry = re.search(r'^ENTRYPOINT\s+(\[.*\])', DOCKERFILE.read_text(), re.M)
    assert entry, "Dockerfile has no exec-form ENTRYPOINT"
    argv = yaml.safe_load(entry.group(1))
    assert argv[0] == "/usr/bin/python3"
    assert host_path(argv[1], compose) == DOCKER / "node.py"
    cfg = compose["services"]["gw"]["environment"]["RSFCD_CONFIG"]
    assert host_path(cfg, compose) == DOCKER / "rsfcd-lab.yaml"
    # gw runs topo.rsfcd_binary(): <repo>/build/rsfcd, where setup.sh builds it.
    assert re.search(r"^cmake -S \. -B build ", (REPO / "setup.sh").read_text(), re.M)


def test_gw_runs_the_binary_setup_sh_builds(monkeypatch):
    monkeypatch.delenv("RSFC_BUILD_DIR", raising=False)
    node = load_node_py()
    assert node.service("gw")[0] == str(topo.REPO / "build" / "rsfcd")
    assert node.service("srv") == ["iperf3", "-s"]


def setup_sh_packages() -> list[str]:
    m = re.search(r"^PACKAGES=\((.*?)\)", (REPO / "setup.sh").read_text(), re.M | re.S)
    assert m, "setup.sh has no PACKAGES=(...) array"
    return shlex.split(m.group(1), comments=True)


def dockerfile_packages() -> list[str]:
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    m = re.search(r"apt-get install\s+(.*?)(?:&&|$)", text, re.M)
    assert m, "Dockerfile has no apt-get install"
    return [w for w in shlex.split(m.group(1)) if not w.startswith("-")]


def test_dockerfile_installs_exactly_setup_sh_packages():
    want = setup_sh_packages()
    assert len(want) > 10, want
    got = dockerfile_packages()
    assert sorted(got) == sorted(want), (f"only in setup.sh: {sorted(set(want) - set(got))}; "
                                         f"only in Dockerfile: {sorted(set(got) - set(want))}")
    text = DOCKERFILE.read_text()
    assert re.search(r"^FROM debian:12(\s|$)", text, re.M), "not Debian 12 based"
    assert re.search(r"^RUN .*\./setup\.sh", text, re.M), "rsfcd is not built by setup.sh"


def test_gw_config_is_valid_and_uses_the_lab_subscribers():
    path = DOCKER / "rsfcd-lab.yaml"
    cfg = yaml.safe_load(path.read_text())
    assert cfg["subscriber_networks"] == topo.SUBSCRIBER_NETWORKS
    binary = topo.rsfcd_binary()
    if not binary.exists():
        pytest.fail(f"rsfcd not found at {binary} (needed to check the config; "
                    f"set RSFC_BUILD_DIR)", pytrace=False)
    r = subprocess.run([str(binary), "--check-config", str(path)], capture_output=True,
                       text=True, timeout=10)
    assert r.returncode == 0, r.stdout + r.stderr
