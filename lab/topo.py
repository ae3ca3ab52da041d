#!/usr/bin/python3
"""Four-namespace lab for rsfcd: phone ── bs ── gw ── srv.

    phone  eth0 ──── phone0  bs  gw0 ──── ran0  gw  srv0 ──── eth0  srv
        198.18.0.2/24      .1   198.18.255.1/24 .2  198.19.0.1/24      198.19.0.2/24
        2001:2:0:1::2/64  ::1   2001:2:0:ff::1/64 ::2 2001:2:0:2::1/64 2001:2:0:2::2/64

- phone: the subscriber (subscriber_networks for tests: 198.18.0.0/16, 2001:2:0:1::/64).
- bs:    "base station"; forwards by default (shaping/delay are added on phone0/gw0 later).
- gw:    gateway; rsfcd runs here behind iptables-legacy NFQUEUE in FORWARD.
- srv:   the Internet server.

Every per-node step is a namespace-agnostic shell script under lab/node/ (run here with
`ip netns exec`, and inside containers by the docker lab).

Module use (Debian /usr/bin/python3, stdlib only):

    with Topology(name="it1234") as t:
        t.nfqueue_rules([0])
        with Daemon(t, {"uplink": {"policy": "static", "static_window_bytes": 16384}}) as d:
            t.run("phone", ["ping", "-c1", SRV4])
            print(d.metrics().value("rsfcd_flows_created_total"))

CLI:
    /usr/bin/python3 lab/topo.py up --name X [--cc-phone cubic] [--cc-srv cubic]
                                          [--phone-timestamps 0|1] [--nfqueue 0|0:1]
    /usr/bin/python3 lab/topo.py down --name X
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import re
import select
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
NODE_DIR = REPO / "lab" / "node"

ROLES = ("phone", "bs", "gw", "srv")

# Addresses (benchmarking ranges only: 198.18.0.0/15, 2001:2::/48).
PHONE4, PHONE6 = "198.18.0.2", "2001:2:0:1::2"
BS_PHONE4, BS_PHONE6 = "198.18.0.1", "2001:2:0:1::1"
BS_CORE4, BS_CORE6 = "198.18.255.1", "2001:2:0:ff::1"
GW_RAN4, GW_RAN6 = "198.18.255.2", "2001:2:0:ff::2"
GW_SRV4, GW_SRV6 = "198.19.0.1", "2001:2:0:2::1"
SRV4, SRV6 = "198.19.0.2", "2001:2:0:2::2"
SUBSCRIBER_NETWORKS = ["198.18.0.0/16", "2001:2:0:1::/64"]

# Interface names inside each namespace.
IFACES = {
    "phone": {"bs": "eth0"},
    "bs": {"phone": "phone0", "gw": "gw0"},
    "gw": {"bs": "ran0", "srv": "srv0"},
    "srv": {"gw": "eth0"},
}

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


class InNetns:
    """Context manager: the CALLING THREAD runs in network namespace `ns` until exit.

    Sockets created inside stay bound to that namespace after exit, so e.g. an AF_PACKET
    socket can be opened in a namespace and then used from anywhere.
    """

    def __init__(self, ns: str):
        self.ns = ns
        self._old = -1

    def __enter__(self):
        self._old = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        fd = os.open(f"/run/netns/{self.ns}", os.O_RDONLY)
        try:
            _setns(fd)
        except BaseException:
            os.close(self._old)
            raise
        finally:
            os.close(fd)
        return self

    def __exit__(self, *exc):
        try:
            _setns(self._old)
        finally:
            os.close(self._old)
        return False


def _sh(cmd, check=True, timeout=30, capture=True, env=None, input=None):
    if isinstance(cmd, str):
        cmd = ["sh", "-c", cmd]
    r = subprocess.run(cmd, capture_output=capture, text=True, timeout=timeout, env=env,
                       input=input)
    if check and r.returncode != 0:
        raise RuntimeError(f"command failed ({r.returncode}): {shlex.join(cmd)}\n"
                           f"stdout: {(r.stdout or '').strip()}\nstderr: {(r.stderr or '').strip()}")
    return r


def ensure_host_cc_allowed(cc: str) -> None:
    """Adds `cc` to the host's net.ipv4.tcp_allowed_congestion_control (global setting)."""
    path = Path("/proc/sys/net/ipv4/tcp_allowed_congestion_control")
    allowed = path.read_text().split()
    if cc not in allowed:
        avail = Path("/proc/sys/net/ipv4/tcp_available_congestion_control").read_text().split()
        if cc not in avail:
            subprocess.run(["modprobe", f"tcp_{cc}"], capture_output=True)
        path.write_text(" ".join(allowed + [cc]) + "\n")


def require_root_and_tools(tools=("ip", "iptables-legacy", "ip6tables-legacy", "sysctl")):
    """Raises RuntimeError with a clear message if not root or a binary is missing."""
    if os.geteuid() != 0:
        raise RuntimeError("the rsfcd lab needs root (network namespaces, iptables)")
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        raise RuntimeError(f"missing binaries for the rsfcd lab: {', '.join(missing)}")


def rsfcd_binary() -> Path:
    build = os.environ.get("RSFC_BUILD_DIR")
    return (Path(build) if build else REPO / "build") / "rsfcd"


class Topology:
    """phone ── bs ── gw ── srv in four network namespaces named f"{name}-{role}".

    Always cleans up on exit (context manager), including every process started in its
    namespaces. Logs and configs go to `self.workdir` (kept; the caller may delete it).
    """

    def __init__(self, name: str, cc_phone: str = "cubic", cc_srv: str = "cubic",
                 phone_timestamps: bool = True, workdir: str | Path | None = None,
                 offloads: bool = True):
        if not re.fullmatch(r"[A-Za-z0-9_.-]{1,40}", name):
            raise ValueError(f"bad topology name {name!r}")
        self.name = name
        self.cc_phone = cc_phone
        self.cc_srv = cc_srv
        self.phone_timestamps = phone_timestamps
        self.offloads = offloads
        self.workdir = Path(workdir) if workdir else Path(tempfile.gettempdir()) / "rsfc-lab" / name
        self._procs: list[subprocess.Popen] = []
        self._daemons: list["Daemon"] = []
        self._up = False
        self._macs: dict[tuple[str, str], str] = {}

    # ---- names -------------------------------------------------------------------
    def ns(self, role: str) -> str:
        if role not in ROLES:
            raise KeyError(f"unknown role {role!r} (one of {ROLES})")
        return f"{self.name}-{role}"

    def iface(self, role: str, towards: str) -> str:
        return IFACES[role][towards]

    def mac(self, role: str, dev: str) -> str:
        key = (role, dev)
        if key not in self._macs:
            out = _sh(["ip", "-n", self.ns(role), "-j", "link", "show", "dev", dev]).stdout
            self._macs[key] = json.loads(out)[0]["address"]
        return self._macs[key]

    # ---- lifecycle ---------------------------------------------------------------
    def __enter__(self):
        try:
            self.up()
        except BaseException:
            self.down()
            raise
        return self

    def __exit__(self, *exc):
        self.down()
        return False

    def up(self) -> "Topology":
        require_root_and_tools()
        self.workdir.mkdir(parents=True, exist_ok=True)
        for cc in {self.cc_phone, self.cc_srv} - {None, ""}:
            ensure_host_cc_allowed(cc)
        for role in ROLES:
            if Path(f"/run/netns/{self.ns(role)}").exists():
                raise RuntimeError(f"namespace {self.ns(role)} already exists "
                                   f"(`lab/topo.py down --name {self.name}` removes it)")
        self._up = True
        for role in ROLES:
            self.add_netns(role)
        env_for = {
            "phone": {"RSFC_CC": self.cc_phone or "",
                      "RSFC_TIMESTAMPS": "1" if self.phone_timestamps else "0"},
            "srv": {"RSFC_CC": self.cc_srv or ""},
            "bs": {}, "gw": {},
        }
        for role in ROLES:
            self.node_script(role, "common.sh", env=env_for[role])
        # veth pairs created directly inside their namespaces.
        for a, b in (("phone", "bs"), ("bs", "gw"), ("gw", "srv")):
            self.add_veth(a, self.iface(a, b), b, self.iface(b, a))
        self.node_script("phone", "link.sh", "eth0", f"{PHONE4}/24", f"{PHONE6}/64")
        self.node_script("bs", "link.sh", "phone0", f"{BS_PHONE4}/24", f"{BS_PHONE6}/64")
        self.node_script("bs", "link.sh", "gw0", f"{BS_CORE4}/24", f"{BS_CORE6}/64")
        self.node_script("gw", "link.sh", "ran0", f"{GW_RAN4}/24", f"{GW_RAN6}/64")
        self.node_script("gw", "link.sh", "srv0", f"{GW_SRV4}/24", f"{GW_SRV6}/64")
        self.node_script("srv", "link.sh", "eth0", f"{SRV4}/24", f"{SRV6}/64")
        self.node_script("bs", "router.sh")
        self.node_script("gw", "router.sh")
        self.node_script("phone", "routes.sh", "default", BS_PHONE4, "default", BS_PHONE6)
        self.node_script("bs", "routes.sh", "default", GW_RAN4, "default", GW_RAN6)
        self.node_script("gw", "routes.sh", "198.18.0.0/16", BS_CORE4,
                         "2001:2:0:1::/64", BS_CORE6)
        self.node_script("srv", "routes.sh", "default", GW_SRV4, "default", GW_SRV6)
        if not self.offloads:
            for role in ROLES:
                for dev in IFACES[role].values():
                    self.run(role, ["ethtool", "-K", dev, "gro", "off", "gso", "off",
                                    "tso", "off"], check=False)
        return self

    def down(self) -> None:
        for d in list(self._daemons):
            try:
                d.stop(timeout=3)
            except Exception:
                pass
        for p in self._procs:
            _kill_group(p)
        self._procs.clear()
        if self._up or any(Path(f"/run/netns/{self.ns(r)}").exists() for r in ROLES):
            teardown(self.name)
        self._up = False

    @property
    def is_up(self) -> bool:
        """True between up() (or attach()) and down()."""
        return self._up

    def attach(self) -> "Topology":
        """Uses the namespaces an earlier `lab/topo.py up --name X` left running, without
        calling up(); the caller does not own them (down() would delete them)."""
        self._up = True
        return self

    # ---- building blocks (also for topologies with more nodes) ----------------------
    def add_netns(self, role: str) -> None:
        """Creates the network namespace of `role` (self.ns(role))."""
        _sh(["ip", "netns", "add", self.ns(role)])

    def add_veth(self, a: str, a_dev: str, b: str, b_dev: str) -> None:
        """A veth pair created directly inside its two namespaces: `a_dev` in role a's,
        `b_dev` in role b's."""
        _sh(["ip", "link", "add", a_dev, "netns", self.ns(a), "type", "veth",
             "peer", "name", b_dev, "netns", self.ns(b)])

    # ---- running things ----------------------------------------------------------
    def node_script(self, role: str, script: str, *args: str, env: dict | None = None):
        full_env = dict(os.environ)
        full_env.update(env or {})
        return _sh(["ip", "netns", "exec", self.ns(role), "sh", str(NODE_DIR / script), *args],
                   env=full_env)

    def _argv(self, role: str, cmd) -> list[str]:
        if isinstance(cmd, str):
            cmd = ["sh", "-c", cmd]
        return ["ip", "netns", "exec", self.ns(role), *[str(c) for c in cmd]]

    def run(self, role: str, cmd, check: bool = True, timeout: float = 30, input=None):
        return _sh(self._argv(role, cmd), check=check, timeout=timeout, input=input)

    def popen(self, role: str, cmd, **kw) -> subprocess.Popen:
        """Starts `cmd` in the role's namespace, in its own process group; killed on down()."""
        kw.setdefault("start_new_session", True)
        p = subprocess.Popen(self._argv(role, cmd), **kw)
        self._procs.append(p)
        return p

    def netns(self, role: str) -> InNetns:
        """`with t.netns("phone"): sock = socket.socket(...)` opens sockets in a namespace."""
        return InNetns(self.ns(role))

    # ---- gateway -----------------------------------------------------------------
    def nfqueue_rules(self, queue_nums=(0,), v6: bool = True, proto: str = "tcp",
                      balance: str = "kernel", conntrack: bool = True,
                      knobs: str = "all") -> None:
        """conf/rsfcd-iptables.sh's rules for the packets crossing ran0: NFQUEUE --queue-num N
        or, for a range, --queue-balance A:B (balance="kernel") or one queue per subscriber
        address (balance="subscriber"); --queue-bypass. conntrack=False leaves out the rule
        that turns connection tracking on (flow adoption; the kernel then also reassembles
        fragments before FORWARD). knobs: rsfcd-iptables.sh -k (all: every TCP packet)."""
        q = sorted(queue_nums)
        if len(q) == 1:
            spec = str(q[0])
        else:
            if q != list(range(q[0], q[-1] + 1)):
                raise ValueError("a queue range must be contiguous")
            spec = f"{q[0]}:{q[-1]}"
        args = (spec, proto) if balance == "kernel" else (spec, proto, balance)
        env = {"RSFC_FAMILIES": "4 6" if v6 else "4", "RSFC_CONNTRACK": "yes" if conntrack else "no"}
        if knobs != "all":
            env["RSFC_KNOBS"] = knobs
        self.node_script("gw", "gateway.sh", *args, env=env)

    def flush_nfqueue_rules(self) -> None:
        self.node_script("gw", "gateway.sh", "--flush")

    def static_neighbour(self, role: str, dev: str, addr: str, mac: str) -> None:
        """Permanent neighbour entry: crafted packets to an address nobody owns get sent."""
        _sh(["ip", "-n", self.ns(role), "neigh", "replace", addr, "lladdr", mac, "dev", dev,
             "nud", "permanent"])

    def phantom(self, side: str, addr: str, mac: str = "02:00:00:00:00:77") -> None:
        """Makes `addr` (owned by nobody) deliverable on the phone or the server side: the
        last router gets a static neighbour entry with a MAC nobody has, so the end host's
        kernel ignores the frames (no RST) while a sniffer on its interface sees them."""
        if side == "phone":
            self.static_neighbour("bs", "phone0", addr, mac)
        elif side == "srv":
            self.static_neighbour("gw", "srv0", addr, mac)
        else:
            raise ValueError("side must be 'phone' or 'srv'")


def _kill_group(p: subprocess.Popen, sig=signal.SIGKILL) -> None:
    if p.poll() is None:
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            pass
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


def delete_netns(ns: str) -> None:
    """Removes network namespace `ns` (if it exists), killing every process still inside."""
    if not Path(f"/run/netns/{ns}").exists():
        return
    for _ in range(3):
        pids = _sh(["ip", "netns", "pids", ns], check=False).stdout.split()
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
        time.sleep(0.05)
    _sh(["ip", "netns", "del", ns], check=False)


def teardown(name: str) -> None:
    """Removes the namespaces of topology `name`, killing every process still inside them."""
    for role in ROLES:
        delete_netns(f"{name}-{role}")


# ---- YAML (stdlib-only emitter: block maps, flow lists, JSON-quoted strings) ----------
def to_yaml(obj, indent: int = 0) -> str:
    pad = "  " * indent
    if isinstance(obj, dict):
        out = []
        for k, v in obj.items():
            if isinstance(v, dict) and v:
                out.append(f"{pad}{k}:\n{to_yaml(v, indent + 1)}")
            else:
                out.append(f"{pad}{k}: {_yaml_scalar(v)}\n")
        return "".join(out)
    return pad + _yaml_scalar(obj) + "\n"


def _yaml_scalar(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return "null"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_yaml_scalar(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {_yaml_scalar(x)}" for k, x in v.items()) + "}"
    return json.dumps(str(v))


def deep_merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = v
    return out


# ---- packet capture -------------------------------------------------------------------
class Capture:
    """tcpdump on one interface of a role's namespace into a pcap file, for rsfc-replay or
    a test: `snaplen` bytes of each packet (128 keeps every TCP header with its options; 0 =
    whole), the first `count` packets (None = until stop()), `args` before the filter
    `expr` (e.g. ["tcp"]). start() returns once tcpdump listens (raises if it exited);
    stop() sends SIGINT, which flushes and closes the file, waits `stop_timeout` s and says
    whether it stopped (else it is killed)."""

    def __init__(self, topo: "Topology", role: str, dev: str, path: Path, snaplen: int = 128,
                 count: int | None = None, args: tuple[str, ...] = (),
                 expr: tuple[str, ...] = (), stop_timeout: float = 10):
        self.topo, self.role, self.dev, self.path = topo, role, dev, Path(path)
        self.stop_timeout = stop_timeout
        self.cmd = ["tcpdump", "-i", dev, "-s", str(snaplen), "-U", "-w", str(self.path),
                    *(["-c", str(count)] if count is not None else []), *args, *expr]
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 10) -> "Capture":
        self.proc = self.topo.popen(self.role, self.cmd, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
        err = b""
        deadline = time.monotonic() + timeout
        while b"listening on" not in err:  # tcpdump says so once its socket is open
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError(f"tcpdump on {self.dev} not listening after {timeout:g} s")
            ready, _, _ = select.select([self.proc.stderr], [], [], left)
            chunk = os.read(self.proc.stderr.fileno(), 4096) if ready else b""
            if ready and not chunk:
                self.proc.wait()
                raise RuntimeError(f"tcpdump on {self.dev} did not start: "
                                   f"{err.decode(errors='replace').strip()}")
            err += chunk
        return self

    def stop(self) -> bool:
        p, self.proc = self.proc, None
        if p is None or p.poll() is not None:
            return True
        p.send_signal(signal.SIGINT)
        try:
            p.wait(timeout=self.stop_timeout)
            return True
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            return False

    def __enter__(self) -> "Capture":
        return self.start()

    def __exit__(self, *exc) -> bool:
        self.stop()
        return False


# ---- Prometheus text parsing ----------------------------------------------------------
_SAMPLE = re.compile(r'^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\d+)?$')
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


class Metrics(dict):
    """name -> {frozenset(label items) -> float}."""

    def value(self, name: str, **labels) -> float:
        """Sum of the series of `name` whose labels include `labels` (0 if none)."""
        want = {(k, str(v)) for k, v in labels.items()}
        return sum(v for ls, v in self.get(name, {}).items() if want <= ls)

    def series(self, name: str) -> list[tuple[dict, float]]:
        return [(dict(ls), v) for ls, v in self.get(name, {}).items()]


def parse_prometheus(text: str) -> Metrics:
    m = Metrics()
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        mo = _SAMPLE.match(line)
        if not mo:
            raise ValueError(f"unparsable metrics line: {line!r}")
        name, labels, val = mo.groups()
        ls = frozenset(_LABEL.findall(labels or ""))
        m.setdefault(name, {})[ls] = float(val)
    return m


# ---- the daemon ----------------------------------------------------------------------
DEFAULT_CONFIG = {
    "queues": [0],
    "subscriber_networks": list(SUBSCRIBER_NETWORKS),
    "uplink": {"policy": "off", "static_window_bytes": 65535},
    "downlink": {"policy": "off", "static_window_bytes": 65535},
    "min_window_bytes": 2920,
    "flows": {"max": 100000, "idle_timeout_s": 300},
    "metrics": {"listen": "127.0.0.1:9477"},
    "log": {"level": "info"},
}


class Daemon:
    """build/rsfcd in the gw namespace with a config written from a dict (merged over
    DEFAULT_CONFIG). stdout+stderr go to `log_path`."""

    _seq = 0

    def __init__(self, topo: Topology, config: dict | None = None, binary: Path | None = None,
                 role: str = "gw", start: bool = True, ready_timeout: float = 10):
        Daemon._seq += 1
        self.topo = topo
        self.role = role
        self.binary = Path(binary) if binary else rsfcd_binary()
        self.config = deep_merge(DEFAULT_CONFIG, config or {})
        tag = f"rsfcd-{os.getpid()}-{Daemon._seq}"
        self.config_path = topo.workdir / f"{tag}.yaml"
        self.log_path = topo.workdir / f"{tag}.log"
        self.proc: subprocess.Popen | None = None
        self.ready_timeout = ready_timeout
        if start:
            self.start()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    @property
    def metrics_addr(self) -> str:
        return self.config.get("metrics", {}).get("listen", "127.0.0.1:9477")

    def write_config(self, config: dict | None = None, raw: str | None = None) -> None:
        if config is not None:
            self.config = deep_merge(DEFAULT_CONFIG, config)
        self.config_path.write_text(raw if raw is not None else to_yaml(self.config))

    def start(self) -> "Daemon":
        if not self.binary.exists():
            raise RuntimeError(f"rsfcd binary not found at {self.binary} "
                               f"(build target rsfcd; set RSFC_BUILD_DIR)")
        self.topo.workdir.mkdir(parents=True, exist_ok=True)
        self.write_config()
        log = open(self.log_path, "ab")
        try:
            self.proc = self.topo.popen(self.role, [str(self.binary), "--config",
                                                    str(self.config_path)],
                                        stdout=log, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL)
        finally:
            log.close()
        self.topo._daemons.append(self)
        self.wait_ready(self.ready_timeout)
        return self

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"rsfcd exited with {self.proc.returncode} during start-up; "
                                   f"log {self.log_path}:\n{self.log_tail()}")
            try:
                self.metrics_text(timeout=1)
                return
            except OSError as e:
                last = e
            time.sleep(0.05)
        raise RuntimeError(f"rsfcd /metrics did not answer within {timeout}s ({last}); "
                           f"log {self.log_path}:\n{self.log_tail()}")

    def metrics_text(self, timeout: float = 3) -> str:
        # The thread enters the gw namespace only while the socket is created and used.
        with self.topo.netns(self.role):
            with urllib.request.urlopen(f"http://{self.metrics_addr}/metrics",
                                        timeout=timeout) as r:
                return r.read().decode()

    def metrics(self) -> Metrics:
        return parse_prometheus(self.metrics_text())

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self, sig=signal.SIGKILL) -> None:
        # `ip netns exec` execs the command, so proc.pid is rsfcd itself.
        if self.alive():
            os.kill(self.proc.pid, sig)

    def reload(self, config: dict | None = None, raw: str | None = None) -> None:
        """Rewrites the config file and sends SIGHUP."""
        self.write_config(config, raw)
        self.kill(signal.SIGHUP)

    def stop(self, timeout: float = 5) -> int | None:
        """SIGTERM, then SIGKILL after `timeout`. Returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=5)
        if self in self.topo._daemons:
            self.topo._daemons.remove(self)
        return self.proc.returncode

    def log_tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "<no log>"


# ---- CLI -----------------------------------------------------------------------------
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="build the four namespaces and leave them running")
    up.add_argument("--name", required=True)
    up.add_argument("--cc-phone", default="cubic")
    up.add_argument("--cc-srv", default="cubic")
    up.add_argument("--phone-timestamps", type=int, choices=(0, 1), default=1)
    up.add_argument("--no-offloads", action="store_true",
                    help="disable GRO/GSO/TSO on every veth (default: kernel defaults)")
    up.add_argument("--nfqueue", help="install NFQUEUE rules in gw: '0' or '0:1' (balance)")
    down = sub.add_parser("down", help="remove the namespaces (and their processes)")
    down.add_argument("--name", required=True)
    a = ap.parse_args(argv)
    if a.cmd == "down":
        teardown(a.name)
        return 0
    t = Topology(a.name, cc_phone=a.cc_phone, cc_srv=a.cc_srv,
                 phone_timestamps=bool(a.phone_timestamps), offloads=not a.no_offloads)
    try:
        t.up()
        if a.nfqueue:
            lo, _, hi = a.nfqueue.partition(":")
            t.nfqueue_rules(list(range(int(lo), int(hi or lo) + 1)))
    except BaseException:
        t.down()
        raise
    for role in ROLES:
        print(f"{role}: ip netns exec {t.ns(role)} ...")
    return 0


if __name__ == "__main__":
    sys.exit(main())
