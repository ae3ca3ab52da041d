"""Fixtures for the rsfcd integration tests: every test gets its own four namespaces
(phone ── bs ── gw ── srv, lab/topo.py), the real rsfcd behind iptables-legacy NFQUEUE on
gw, a per-test timeout, and on failure the paths of its pcap / daemon log / samples.

Run as root:  /usr/bin/python3 -m pytest -q test/integration
The daemon is <RSFC_BUILD_DIR or repo/build>/rsfcd.
"""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "lab"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import topo as topo_mod  # noqa: E402
import wire as wire_mod  # noqa: E402

DEFAULT_TIMEOUT_S = 60
TOOLS = ("ip", "iptables-legacy", "ip6tables-legacy", "sysctl", "ss", "iperf3", "tcpdump")
_counter = itertools.count()
_lab_root = Path(os.environ.get("RSFC_IT_WORKDIR", "/tmp/rsfc-it"))


def pytest_configure(config):
    config.addinivalue_line("markers", "timeout(seconds): per-test time limit (SIGALRM)")


@pytest.fixture(scope="session")
def prerequisites():
    """Root, tools and the daemon binary: a missing one FAILS every test (never a skip)."""
    problems = []
    if os.geteuid() != 0:
        problems.append("must run as root (network namespaces, iptables, NFQUEUE)")
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        problems.append(f"missing binaries: {', '.join(missing)}")
    binary = topo_mod.rsfcd_binary()
    if not binary.exists():
        problems.append(f"rsfcd binary not found at {binary} (build target rsfcd; "
                        f"set RSFC_BUILD_DIR to the build directory)")
    if problems:
        pytest.fail("integration prerequisites: " + "; ".join(problems), pytrace=False)
    return binary


@pytest.fixture(autouse=True)
def _timeout(request):
    m = request.node.get_closest_marker("timeout")
    limit = int(m.args[0]) if m else DEFAULT_TIMEOUT_S

    def on_alarm(signum, frame):
        pytest.fail(f"test timed out after {limit}s", pytrace=True)

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(limit)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


class Artifacts:
    """Files worth looking at when a test fails; writers run before the report."""

    def __init__(self):
        self.items: list[tuple[str, Path]] = []
        self.writers = []
        self.daemons = []

    def add(self, label: str, path: Path, writer=None):
        self.items.append((label, Path(path)))
        if writer:
            self.writers.append(writer)

    def render(self) -> str:
        for w in self.writers:
            try:
                w()
            except Exception as e:  # pragma: no cover
                self.items.append((f"writer failed: {e}", Path("-")))
        lines = [f"{label}: {path}" for label, path in self.items]
        for d in self.daemons:
            lines.append(f"--- rsfcd log tail ({d.log_path}) ---")
            lines.append(d.log_tail(25))
        return "\n".join(lines)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.failed:
        item.rsfc_failed = True
        art = getattr(item, "rsfc_artifacts", None)
        if art is not None:
            rep.sections.append(("rsfc lab artifacts", art.render()))


@pytest.fixture
def artifacts(request):
    a = Artifacts()
    request.node.rsfc_artifacts = a
    return a


@pytest.fixture
def lab(request, prerequisites, artifacts):
    """A fresh phone ── bs ── gw ── srv topology with phantom ends for crafted packets."""
    name = f"it{os.getpid() % 100000:x}-{next(_counter)}"
    workdir = _lab_root / name
    shutil.rmtree(workdir, ignore_errors=True)
    params = getattr(request, "param", {}) or {}
    t = topo_mod.Topology(name=name, workdir=workdir, **params)
    artifacts.add("workdir", workdir)
    with t:
        wire_mod.setup_phantoms(t)
        yield t
    if not getattr(request.node, "rsfc_failed", False):
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture
def wire(lab, artifacts):
    w = wire_mod.Wire(lab)
    artifacts.add("crafted packets pcap", w.pcap_path, w.write_pcap)
    yield w
    w.close()


@pytest.fixture
def rsfcd(lab, artifacts, prerequisites):
    """Factory: rsfcd(config_overrides, queues=[0], proto="tcp", balance="kernel",
    conntrack=True) installs the NFQUEUE rules (conf/rsfcd-iptables.sh; conntrack=False without
    its connection tracking rule) and starts the daemon in gw; returns a topo.Daemon (stopped
    at teardown)."""
    started = []

    def start(config: dict | None = None, queues=(0,), proto: str = "tcp", rules: bool = True,
              balance: str = "kernel", conntrack: bool = True):
        cfg = dict(config or {})
        cfg.setdefault("queues", list(queues))
        if rules:
            lab.nfqueue_rules(list(queues), proto=proto, balance=balance, conntrack=conntrack)
        d = topo_mod.Daemon(lab, cfg, binary=prerequisites, start=False)
        artifacts.daemons.append(d)
        artifacts.add("rsfcd config", d.config_path)
        artifacts.add("rsfcd log", d.log_path)
        d.start()
        started.append(d)
        return d

    yield start
    for d in started:
        d.stop()

