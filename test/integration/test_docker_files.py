"""The docker lab's files, checked without Docker (and without root): docker-compose.yml is
valid YAML with the four nodes, each built from docker/Dockerfile with NET_ADMIN, and
nothing Debian 12's docker-compose 1.29 refuses; its networks and addresses are
lab/topo.py's; it presets every sysctl the node scripts want (a container's /proc/sys is
read-only); every script, path and config it refers to exists and is valid; docker/node.py
runs exactly the node scripts Topology.up() runs, and starts the delay element as
lab/shaping.py does; the Dockerfile installs exactly setup.sh's packages and configures
cmake as setup.sh does; docker/lab.py finds the lab functions it uses and the shipped
configuration's policies. The real thing (Docker) is test_docker_lab.py.

Run: /usr/bin/python3 -m pytest -q test/integration/test_docker_files.py
(the rsfcd --check-config test needs <RSFC_BUILD_DIR or repo/build>/rsfcd).
"""

from __future__ import annotations

import importlib.util
import ipaddress
import json
import os
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
    assert "name" not in compose, "docker-compose 1.29 refuses a top-level name: (use -p)"
    assert "version" not in compose
    assert set(compose["services"]) == set(SERVICE_ROLE)
    for name, svc in compose["services"].items():
        assert svc["image"] == "rsfcd-lab:latest", name
        build = svc["build"]
        ctx = (COMPOSE.parent / build["context"]).resolve()
        assert ctx == REPO, f"{name}: build context {ctx} is not the repository root"
        assert (ctx / build["dockerfile"]).resolve() == DOCKERFILE
        assert "NET_ADMIN" in svc["cap_add"], name
        # Engine 20.10 refuses "systempaths=unconfined" from docker-compose 1.29 (only the
        # docker CLI and Compose v2 translate it); the sysctls are preset instead.
        assert "security_opt" not in svc, name
        assert "privileged" not in svc, name
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


def script_sysctls(role: str, env: dict) -> dict[str, str]:
    """KEY -> VALUE of every `sysctl_set KEY VALUE` the node scripts of `role` run (common.sh,
    link.sh per interface, router.sh on routers), with Docker's interface names (eth0, eth1:
    the compose file sets the keys before node.py renames the interfaces)."""
    node = load_node_py()
    n_ifaces = len(topo.IFACES[role])
    want = {}
    for step in node.steps(role):
        if step.script not in ("common.sh", "link.sh", "router.sh"):
            continue
        text = (REPO / "lab" / "node" / step.script).read_text()
        for key, value in re.findall(r'^\s*sysctl_set "?([^\s"]+)"? "?([^\s"]+)"?\s*$', text, re.M):
            if value.startswith("$"):
                var = re.fullmatch(r'\$\{?(\w+)(?::-)?\}?', value).group(1)
                if not env.get(var):
                    continue  # the script skips the key when the variable is empty
                value = str(env[var])
            if "$dev" in key:
                for i in range(n_ifaces):
                    want[key.replace("$dev", f"eth{i}")] = value
            else:
                want[key] = value
    return want


def test_compose_presets_every_sysctl_the_node_scripts_want(compose):
    """/proc/sys is read-only in a container: lab/node/sysctl.sh writes only what differs,
    so every key the scripts want must already have its value from the compose file."""
    for name, svc in compose["services"].items():
        role = SERVICE_ROLE[name]
        have = {k: str(v) for k, v in svc["sysctls"].items()}
        env = {k: str(v) for k, v in (svc.get("environment") or {}).items()}
        want = script_sysctls(role, env)
        assert len(want) >= 8, (name, want)
        wrong = {k: (v, have.get(k)) for k, v in want.items() if have.get(k) != v}
        assert not wrong, f"{name}: key: (the scripts want, the compose file gives) {wrong}"
        # And nothing for an interface the container does not have (runc would fail).
        for k in have:
            m = re.search(r"\.eth(\d+)\.", k)
            assert not m or int(m.group(1)) < len(topo.IFACES[role]), (name, k)


def test_node_scripts_write_only_what_differs():
    for script in ("common.sh", "link.sh", "router.sh"):
        text = (REPO / "lab" / "node" / script).read_text()
        assert not re.search(r"^\s*sysctl -q?w", text, re.M), f"{script} writes sysctls directly"
        assert 'sysctl.sh"' in text, script


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
    scripts = ({s.script for role in topo.ROLES for s in node.steps(role)}
               | {"bs-bottleneck.sh", "bs-delay.sh", "sysctl.sh"})
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
    # gw runs topo.rsfcd_binary() and bs shaping.linkem_binary(): $RSFC_BUILD_DIR/...,
    # where the Dockerfile builds them.
    text = DOCKERFILE.read_text()
    build_dir = re.search(r"^ENV RSFC_BUILD_DIR=(\S+)", text, re.M).group(1)
    assert re.search(rf"cmake -S \. -B {build_dir} ", text)
    assert re.search(rf"cmake --build {build_dir} .*--target .*rsfcd", text)


def test_gw_runs_the_binary_of_the_build_dir(monkeypatch):
    monkeypatch.setenv("RSFC_BUILD_DIR", "/opt/rsfcd/build")
    node = load_node_py()
    assert node.service("gw")[0] == "/opt/rsfcd/build/rsfcd"
    monkeypatch.delenv("RSFC_BUILD_DIR")
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


def test_dockerfile_configures_cmake_as_setup_sh_and_builds_the_lab_binaries():
    configure = r"cmake -S \. -B (\S+) (-G Ninja -DCMAKE_BUILD_TYPE=\S+)"
    ours = re.search(configure, (REPO / "setup.sh").read_text())
    theirs = re.search(configure, DOCKERFILE.read_text())
    assert ours and theirs and ours.group(2) == theirs.group(2)
    # Outside the copied work tree: a build/ in the context (Engine 20.10's legacy builder
    # ignores Dockerfile.dockerignore) can neither break the build nor replace a binary.
    assert not theirs.group(1).startswith(("build", "./build", "/opt/rsfcd/src"))
    targets = re.search(r"cmake --build \S+ .*--target ([\w -]+)", DOCKERFILE.read_text())
    assert targets and {"rsfcd", "rsfc-linkem"} <= set(targets.group(1).split())


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


def test_node_py_starts_the_delay_element_as_shaping_does(monkeypatch):
    """bs's rsfc-linkem: the queues, delays and flags lab/shaping.py's Shaping.start() gives
    it with the TBF engine (delay only; the TBFs are bs-bottleneck.sh)."""
    import shaping
    node = load_node_py()
    link = scenarios_module().SCENARIOS["3g"].link
    argv = node.linkem_argv(link.up.delay_ms, link.down.delay_ms)
    assert argv == [str(shaping.linkem_binary()),
                    "--link", link.up.linkem_arg(shaping.UPLINK_QUEUE, False),
                    "--link", link.down.linkem_arg(shaping.DOWNLINK_QUEUE, False), "--realtime"]
    monkeypatch.setenv("RSFC_UPLINK_DELAY_MS", "20")
    monkeypatch.setenv("RSFC_DOWNLINK_DELAY_MS", "")
    assert node.delays_ms() == (20.0, 0.0)


def scenarios_module():
    import scenarios
    return scenarios


def load_lab_py():
    if "docker_lab" not in sys.modules:
        spec = importlib.util.spec_from_file_location("docker_lab", DOCKER / "lab.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules["docker_lab"] = mod
        spec.loader.exec_module(mod)
    return sys.modules["docker_lab"]


def test_lab_py_gives_bs_the_scenario_link_and_gw_the_policy():
    lab = load_lab_py()  # also: every lab/ function it uses is found
    sc = scenarios_module().SCENARIOS["3g"]
    env, sysctls = lab.test_environment(sc, {"uplink": {"policy": "rsfc"}})
    bs = env["bs"]
    assert bs["RSFC_UPLINK_BOTTLENECK"] == f"{sc.link.up.rate_bps} {sc.link.up.buffer_bytes}"
    assert bs["RSFC_DOWNLINK_BOTTLENECK"] == \
        f"{sc.link.down.rate_bps} {sc.link.down.buffer_bytes}"
    assert float(bs["RSFC_UPLINK_DELAY_MS"]) + float(bs["RSFC_DOWNLINK_DELAY_MS"]) == \
        sc.link.base_rtt_ms
    cfg = yaml.safe_load(env["gw"]["RSFCD_CONFIG_TEXT"])
    assert cfg["uplink"]["policy"] == "rsfc"
    assert cfg["subscriber_networks"] == topo.SUBSCRIBER_NETWORKS
    assert cfg["metrics"]["listen"].startswith("0.0.0.0:")  # scraped from the host
    assert sysctls["phone"]["net.ipv4.tcp_timestamps"] == "1"
    env, _ = lab.test_environment(sc, None)  # policy none: no rsfcd, no NFQUEUE rules
    assert env["gw"] == {"RSFC_GATEWAY": "0"}


def test_lab_py_runs_the_shipped_configuration_policies():
    lab = load_lab_py()
    shipped = yaml.safe_load((REPO / "conf" / "rsfcd.yaml").read_text())
    label, cfg = lab.shipped_policy()
    assert cfg["uplink"] == shipped["uplink"]
    assert {**cfg["downlink"], "policy": str(cfg["downlink"]["policy"])}["policy"] in \
        ("off", str(shipped["downlink"]["policy"]).replace("False", "off"))
    if (shipped.get("pacing") or {}).get("enabled") is True:  # the pacer runs as shipped
        assert cfg["pacing"] == shipped["pacing"] and label == "shipped"
    assert cfg.get("rsfc", shipped.get("rsfc")) == shipped.get("rsfc")
    resolved, note = lab.resolve_policies("off,rsfc,shipped")
    labels = [p for p, _ in resolved]
    assert labels[:2] == ["off", "rsfc"] and label in labels and note.startswith(label)
    binary = topo.rsfcd_binary()
    if binary.exists():  # every configuration is one rsfcd accepts
        for p, c in resolved:
            path = Path(f"/tmp/rsfc-docker-files-{os.getpid()}.yaml")
            path.write_text(lab.rsfcd_config(c))
            r = subprocess.run([str(binary), "--check-config", str(path)], capture_output=True,
                               text=True, timeout=10)
            path.unlink()
            assert r.returncode == 0, (p, r.stdout + r.stderr)


def test_lab_py_json_line_has_the_four_numbers_per_policy():
    lab = load_lab_py()
    summary = {"off": {"dl_alone_mbps": 6.9, "dl_with_ul_mbps": 1.0, "ul_with_dl_mbps": 1.8,
                       "rtt_load_p95_ms": 4200.0}}
    assert json.loads(lab.json_line(summary)) == {"off": {
        "download_alone_mbps": 6.9, "download_with_upload_mbps": 1.0,
        "upload_with_download_mbps": 1.8, "rtt_under_load_p95_ms": 4200.0}}
