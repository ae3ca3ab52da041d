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
   /proc/sys is read-only in a container: the compose file presets every sysctl the
   scripts want, and the scripts write only what differs (lab/node/sysctl.sh).
3. Service: gw runs rsfcd, srv runs `iperf3 -s`, phone sleeps. bs applies
   RSFC_UPLINK_BOTTLENECK / RSFC_DOWNLINK_BOTTLENECK = "RATE_BIT_S BUFFER_BYTES"
   (lab/node/bs-bottleneck.sh on gw0 / phone0) and, when RSFC_UPLINK_DELAY_MS or
   RSFC_DOWNLINK_DELAY_MS is set, runs the delay element (rsfc-linkem + bs-delay.sh, as
   lab/shaping.py does in the bs namespace); otherwise it sleeps.
4. When the node is set up (and its delay element is ready) node.py writes READY_FILE
   (/run/rsfc-node.ready; RSFC_NODE_RUN_DIR moves it).

Environment (besides the bottleneck/delay ones above):
  RSFC_CC, RSFC_TIMESTAMPS   as lab/node/common.sh (phone, srv)
  RSFCD_CONFIG               gw: rsfcd's config file (default docker/rsfcd-lab.yaml)
  RSFCD_CONFIG_TEXT          gw: the config itself (written to /tmp/rsfcd.yaml, wins)
  RSFC_GATEWAY=0             gw: no NFQUEUE rules and no rsfcd (the lab's policy "none")
  RSFC_QUEUES                gw: NFQUEUE numbers for gateway.sh (default 0)
  RSFC_IPERF_PORT            srv: port of `iperf3 -s` (default 5201; empty: none)

Every address and interface name comes from lab/topo.py itself (imported), so the two labs
cannot drift apart; test/integration/test_docker_files.py checks the step list against
what Topology.up() runs.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(os.environ.get("RSFC_REPO", Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(REPO / "lab"))
import shaping  # noqa: E402
import topo  # noqa: E402

ROLES = topo.ROLES
# Files the docker lab's driver (docker/lab.py) reads with `docker exec`.
RUN_DIR = Path(os.environ.get("RSFC_NODE_RUN_DIR", "/run"))
READY_FILE = RUN_DIR / "rsfc-node.ready"
LINKEM_PID_FILE = RUN_DIR / "rsfc-linkem.pid"
LINKEM_STATS_FILE = RUN_DIR / "rsfc-linkem.jsonl"  # rsfc-linkem's stdout (JSON counters)


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
          phone_timestamps: bool = True, queues: str = "0", proto: str = "tcp",
          gateway: bool = True) -> list[Step]:
    """The lab/node scripts `role` runs, as Topology.up() (+ nfqueue_rules on gw) runs them.
    gateway=False: gw without NFQUEUE rules (the lab's policy "none")."""
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
    if role == "gw" and gateway:
        out.append(Step("gateway.sh", (queues, proto), {"RSFC_FAMILIES": "4 6", "RSFC_CONNTRACK": "yes"}))
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
                   queues=os.environ.get("RSFC_QUEUES", "0"), gateway=gateway_enabled()):
        _run(["sh", str(REPO / "lab" / "node" / s.script), *s.args], env=s.env)
    if role == "bs":
        for var, towards in (("RSFC_UPLINK_BOTTLENECK", "gw"), ("RSFC_DOWNLINK_BOTTLENECK", "phone")):
            spec = os.environ.get(var, "").split()
            if spec:
                if len(spec) != 2:
                    raise SystemExit(f"node.py: {var} must be 'RATE_BIT_S BUFFER_BYTES'")
                _run(["sh", str(REPO / "lab" / "node" / "bs-bottleneck.sh"),
                      topo.IFACES["bs"][towards], *spec])


def gateway_enabled() -> bool:
    return os.environ.get("RSFC_GATEWAY", "1") != "0"


def delays_ms() -> tuple[float, float] | None:
    """(uplink, downlink) one-way delay of the delay element, or None: no delay element."""
    up = os.environ.get("RSFC_UPLINK_DELAY_MS", "")
    down = os.environ.get("RSFC_DOWNLINK_DELAY_MS", "")
    if not up and not down:
        return None
    return float(up or 0), float(down or 0)


def linkem_argv(up_ms: float, down_ms: float) -> list[str]:
    """rsfc-linkem as lab/shaping.py starts it with the TBF engine: delay only, the queue
    numbers of the bs node, SCHED_FIFO when the container may (it goes on without)."""
    up = shaping.Direction(delay_ms=up_ms)
    down = shaping.Direction(delay_ms=down_ms)
    return [str(shaping.linkem_binary()),
            "--link", up.linkem_arg(shaping.UPLINK_QUEUE, with_bottleneck=False),
            "--link", down.linkem_arg(shaping.DOWNLINK_QUEUE, with_bottleneck=False),
            "--realtime"]


def run_delay_element(up_ms: float, down_ms: float) -> int:
    """bs's service with a delay element: rsfc-linkem, then bs-delay.sh sends the forwarded
    packets to it (as Shaping.start()). Its stdout (JSON counters on SIGUSR1 and at exit)
    is copied to LINKEM_STATS_FILE and to the container log. SIGTERM stops it and removes
    the rules."""
    argv = linkem_argv(up_ms, down_ms)
    print("node.py: start", " ".join(argv), flush=True)
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                            bufsize=1)
    LINKEM_PID_FILE.write_text(f"{proc.pid}\n")

    def stop(signum, frame):
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    ready, _, _ = select.select([proc.stdout], [], [], 10)
    line = proc.stdout.readline().strip() if ready else None
    if line != "ready":
        stop(None, None)
        raise SystemExit(f"node.py: rsfc-linkem did not start ({line!r})")
    node_dir = REPO / "lab" / "node"
    _run(["sh", str(node_dir / "bs-delay.sh"), str(shaping.UPLINK_QUEUE),
          str(shaping.DOWNLINK_QUEUE), topo.IFACES["bs"]["phone"], topo.IFACES["bs"]["gw"]])
    mark_ready()
    with open(LINKEM_STATS_FILE, "a") as stats:
        for line in proc.stdout:
            stats.write(line)
            stats.flush()
            print("rsfc-linkem:", line.strip(), flush=True)
    rc = proc.wait()
    subprocess.run(["sh", str(node_dir / "bs-delay.sh"), "--flush"])
    print(f"node.py: rsfc-linkem exited {rc}", flush=True)
    return 0 if rc in (0, -signal.SIGTERM) else 1


def mark_ready() -> None:
    READY_FILE.write_text("ready\n")


def gw_config() -> str:
    text = os.environ.get("RSFCD_CONFIG_TEXT", "")
    if text:
        path = Path("/tmp/rsfcd.yaml")
        path.write_text(text)
        return str(path)
    return os.environ.get("RSFCD_CONFIG", str(REPO / "docker" / "rsfcd-lab.yaml"))


def service(role: str) -> list[str]:
    if role == "gw" and gateway_enabled():
        return [str(topo.rsfcd_binary()), "--config", gw_config()]
    if role == "srv" and os.environ.get("RSFC_IPERF_PORT", "5201"):
        port = os.environ.get("RSFC_IPERF_PORT", "5201")
        return ["iperf3", "-s"] + (["-p", port] if port != "5201" else [])
    return ["sleep", "infinity"]


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ROLES or argv[1:] not in ([], ["--setup-only"]):
        print(__doc__, file=sys.stderr)
        return 2
    role = argv[0]
    READY_FILE.unlink(missing_ok=True)
    setup(role)
    if argv[1:] == ["--setup-only"]:
        return 0
    if role == "bs" and delays_ms() is not None:
        return run_delay_element(*delays_ms())
    cmd = service(role)
    mark_ready()
    print("node.py: exec", " ".join(cmd), flush=True)
    os.execvp(cmd[0], cmd)
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
