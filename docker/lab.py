#!/usr/bin/python3
"""The docker lab's driver: lab/scenarios.py's bloated-cellular-link scenario (3G by
default) run in the four containers of docker/docker-compose.yml instead of network
namespaces, with the same tests, the same measurements and the same table.

    docker/lab.py [--short] [--scenario 3g] [--policies off,rsfc,shipped] ...

Usually started by docker/run-lab.sh, which first makes sure an engine answers and the
image rsfcd-lab:latest exists. Per policy and test (dl: download alone, ul: upload alone,
both: download + concurrent upload; ping from the phone throughout), on FRESH containers
and networks (compose down + up: no queue, TCP metric cache or daemon state leaks from one
test into the next, as in the namespace lab):

  bs      the bottlenecks (TBF: lab/node/bs-bottleneck.sh) and the delay element
          (rsfc-linkem + lab/node/bs-delay.sh) of the scenario's link, set up by
          docker/node.py from the environment this driver gives the container;
  gw      rsfcd with the policy's configuration (none: no rsfcd and no NFQUEUE rules);
  phone   iperf3 clients (CUBIC) and lab/pinger.py, run with `docker exec`;
  server  `iperf3 -s -1` per test, as lab/scenarios.py starts them.

Throughput is the receiver's (iperf3 JSON intervals after the warm-up), RTT percentiles of
the pings over the same window, the uplink's busy share from the TBF byte counters: the
numbers and the table come from lab/scenarios.py's own functions. rsfcd's /metrics is
scraped from the Docker host at the gw container's address after every test.

Policies: as lab/scenarios.py (off, observe, static:BYTES, rsfc, ...), plus `shipped`: the
uplink and downlink of conf/rsfcd.yaml (shown under the lab's name for it when it has one,
e.g. static:65535).

Output: progress on stderr; the table, the path of the full JSON, then ONE JSON line (per
policy: download_alone_mbps, download_with_upload_mbps, upload_with_download_mbps,
rtt_under_load_p95_ms) on stdout, or into --json-line-file.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "lab"))
import scenarios  # noqa: E402
import topo  # noqa: E402
from measure import fmt  # noqa: E402

COMPOSE_FILE = REPO / "docker" / "docker-compose.yml"
SHIPPED_CONFIG = REPO / "conf" / "rsfcd.yaml"
SERVICES = ("phone", "bs", "gw", "server")
ROLE = {"phone": "phone", "bs": "bs", "gw": "gw", "server": "srv"}
METRICS_PORT = 9477
DL_PORT, UL_PORT = 5201, 5202
SHORT = {"policies": "off,rsfc", "kinds": "dl,both", "duration": 20.0, "warmup": 8.0}
FULL = {"policies": "off,rsfc,shipped", "kinds": "dl,ul,both", "duration": 40.0,
        "warmup": 10.0}
SETUP_S = 12.0  # first guess of a test's overhead (compose down + up, readiness, linger)




def log(msg: str) -> None:
    print(f"[docker lab] {msg}", file=sys.stderr, flush=True)


def sh(argv, check=True, timeout=120, **kw) -> subprocess.CompletedProcess:
    r = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=timeout,
                       **kw)
    if check and r.returncode != 0:
        raise RuntimeError(f"{shlex.join(map(str, argv))} failed ({r.returncode}): "
                           f"{(r.stderr or r.stdout).strip()[-800:]}")
    return r


# ---- compose: Debian 12's docker-compose 1.29 or Compose v2 ----------------------------
def detect_compose() -> list[str]:
    """`docker compose` (v2 plugin) if it answers, else `docker-compose` (1.29 or v2)."""
    env = os.environ.get("RSFC_COMPOSE")
    if env:
        return shlex.split(env)
    for cmd in (["docker", "compose"], ["docker-compose"]):
        if shutil.which(cmd[0]) is None:
            continue
        r = subprocess.run(cmd + ["version"], capture_output=True, text=True)
        if r.returncode == 0:
            return cmd
    raise RuntimeError("neither `docker compose` nor `docker-compose` works "
                       "(apt-get install docker-compose; docker/run-lab.sh does)")


class Lab:
    """One compose project of the four containers. Every test: down, then up with an
    override file (the test's environment) on top of docker-compose.yml."""

    def __init__(self, compose: list[str], project: str, workdir: Path, rt: dict):
        self.compose, self.project, self.workdir, self.rt = compose, project, workdir, rt
        self.ids: dict[str, str] = {}
        self.override = workdir / "override.json"

    def _compose(self, *args, check=True, timeout=180):
        return sh([*self.compose, "-p", self.project, "-f", COMPOSE_FILE, "-f", self.override,
                   *args], check=check, timeout=timeout)

    def up(self, env: dict[str, dict[str, str]], sysctls: dict[str, dict[str, str]]) -> None:
        services = {}
        for s in SERVICES:
            # "$$": compose would interpolate a "$" in a value.
            svc: dict = {"environment": {k: v.replace("$", "$$")
                                         for k, v in env.get(s, {}).items()}}
            if sysctls.get(s):
                svc["sysctls"] = sysctls[s]
            services[s] = svc
        services["bs"].update(self.rt)
        self.override.write_text(json.dumps({"services": services}, indent=1))
        self.down()
        self._compose("up", "-d", "--no-build", "--force-recreate")
        self.ids = {}
        for s in SERVICES:
            cid = self._compose("ps", "-q", s).stdout.strip()
            if not cid:
                raise RuntimeError(f"compose started no {s} container")
            self.ids[s] = cid

    def down(self) -> None:
        if self.override.exists():
            self._compose("down", "-t", "3", "--remove-orphans", check=False)
        self.ids = {}

    def exec(self, service: str, argv, check=True, timeout=30, detach=False):
        return sh(["docker", "exec", *(["-d"] if detach else []), self.ids[service], *argv],
                  check=check, timeout=timeout)

    def popen(self, service: str, argv) -> subprocess.Popen:
        return subprocess.Popen(["docker", "exec", self.ids[service], *map(str, argv)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def running(self, service: str) -> bool:
        r = sh(["docker", "inspect", "-f", "{{.State.Running}}", self.ids[service]], check=False)
        return r.stdout.strip() == "true"

    def logs(self, service: str, n: int = 20) -> str:
        r = sh(["docker", "logs", "--tail", str(n), self.ids[service]], check=False)
        return (r.stdout + r.stderr).strip()

    def wait_ready(self, timeout: float = 30) -> None:
        """Every container past its setup (node.py's ready file; on bs the delay element
        bound to its queues)."""
        deadline = time.monotonic() + timeout
        pending = list(SERVICES)
        while pending:
            s = pending[0]
            if not self.running(s):
                raise RuntimeError(f"container {s} exited during setup:\n{self.logs(s)}")
            if self.exec(s, ["test", "-e", "/run/rsfc-node.ready"], check=False).returncode == 0:
                pending.pop(0)
                continue
            if time.monotonic() > deadline:
                raise RuntimeError(f"container {s} not ready after {timeout:g}s:\n{self.logs(s)}")
            time.sleep(0.2)


# ---- what runs where --------------------------------------------------------------
def shipped_policy() -> tuple[str, dict]:
    """(label, rsfcd config) of conf/rsfcd.yaml's uplink and downlink (with the sections of
    the policies they name, and pacing when it is on). The label is the lab's policy string
    for it when it has one."""
    import yaml  # python3-yaml (docker/run-lab.sh installs it)
    conf = yaml.safe_load(SHIPPED_CONFIG.read_text())
    up, down = dict(conf.get("uplink") or {}), dict(conf.get("downlink") or {})
    up_p, down_p = str(up.get("policy", "off")), str(down.get("policy", "off"))
    up_p = "off" if up_p == "False" else up_p  # PyYAML reads a bare off as false
    down_p = "off" if down_p == "False" else down_p
    up["policy"], down["policy"] = up_p, down_p
    cfg = {"uplink": up, "downlink": down}
    for section in ("rsfc", "drwa"):
        if section in (up_p, down_p) and conf.get(section):
            cfg[section] = conf[section]
    paced = down_p == "rsfc" and (conf.get("pacing") or {}).get("enabled") is True
    if paced:  # downlink pacing (docs/DESIGN.md §4b) runs with the downlink knob's rsfc
        cfg["pacing"] = conf["pacing"]
    label = "shipped"
    if paced:
        pass  # no lab name: shown as "shipped"
    elif down_p == "off" and up_p == "static":
        label = f"static:{up.get('static_window_bytes', 65535)}"
    elif down_p == "off" and up_p in ("off", "observe", "rsfc"):
        label = up_p
    elif (up_p, down_p) == ("rsfc", "drwa"):
        label = "rsfc+drwa"
    elif (up_p, down_p) == ("rsfc", "rsfc"):
        label = "rsfc+rsfc"
    return label, cfg


def resolve_policies(text: str) -> tuple[list[tuple[str, dict | None]], str | None]:
    """[(label, rsfcd config or None for no daemon)] and a note on the shipped one."""
    names = [p.strip() for p in text.split(",") if p.strip()]
    out: list[tuple[str, dict | None]] = []
    note = None
    for p in names:
        if p != "shipped":
            out.append((p, scenarios.policy_config(p)))
            continue
        label, cfg = shipped_policy()
        desc = "; ".join(f"{k}: {json.dumps(v)}" for k, v in cfg.items())
        note = f"{label} = the shipped conf/rsfcd.yaml ({desc})"
        if label == "shipped" or label not in names:  # else it runs once, under its lab name
            out.append((label, cfg))
    # A policy listed again (side-by-side repeats) gets its own column, as in
    # lab/scenarios.py: "rsfc #2".
    seen: dict[str, int] = {}
    for i, (label, cfg) in enumerate(out):
        seen[label] = seen.get(label, 0) + 1
        if seen[label] > 1:
            out[i] = (f"{label} #{seen[label]}", cfg)
    return out, note


def rsfcd_config(cfg: dict) -> str:
    full = topo.deep_merge(topo.DEFAULT_CONFIG, cfg)
    full["metrics"] = {"listen": f"0.0.0.0:{METRICS_PORT}"}  # scraped from the host
    return topo.to_yaml(full)


def test_environment(scenario, cfg: dict | None) -> tuple[dict, dict]:
    link = scenario.link
    bs = {"RSFC_UPLINK_DELAY_MS": f"{link.up.delay_ms:g}",
          "RSFC_DOWNLINK_DELAY_MS": f"{link.down.delay_ms:g}"}
    # As Shaping.start() with the TBF engine: a TBF per direction with a rate.
    for var, d in (("RSFC_UPLINK_BOTTLENECK", link.up), ("RSFC_DOWNLINK_BOTTLENECK", link.down)):
        bs[var] = f"{d.rate_bps} {d.buffer_bytes or 100_000_000}" if d.rate_bps else ""
    ts = "1" if scenario.phone_timestamps else "0"
    env = {"phone": {"RSFC_TIMESTAMPS": ts}, "bs": bs, "server": {"RSFC_IPERF_PORT": ""},
           "gw": {"RSFC_GATEWAY": "0"} if cfg is None else
           {"RSFC_GATEWAY": "1", "RSFCD_CONFIG_TEXT": rsfcd_config(cfg)}}
    sysctls = {"phone": {"net.ipv4.tcp_timestamps": ts}}
    return env, sysctls


def realtime_settings(image: str) -> tuple[dict, str]:
    """The bs container's settings for rsfc-linkem's SCHED_FIFO (as in the namespace lab),
    found by trying: a real-time budget (cgroup v1 with RT group scheduling needs one, and
    the engine's own cgroup must have it: dockerd --cpu-rt-runtime), else CAP_SYS_NICE
    alone, else none (the delay element then runs at normal priority)."""
    tries = [({"cap_add": ["SYS_NICE"], "cpu_rt_runtime": 300000},
              ["--cap-add", "SYS_NICE", "--cpu-rt-runtime", "300000"]),
             ({"cap_add": ["SYS_NICE"]}, ["--cap-add", "SYS_NICE"])]
    for settings, flags in tries:
        r = sh(["docker", "run", "--rm", "--network", "none", *flags, "--entrypoint", "chrt",
                image, "-f", "10", "true"], check=False, timeout=60)
        if r.returncode == 0:
            return settings, "rsfc-linkem SCHED_FIFO: yes (" + " ".join(flags) + ")"
    return {}, ("rsfc-linkem SCHED_FIFO: NO (the engine gives containers no real-time "
                "budget; dockerd --cpu-rt-runtime=400000 would): the delay element runs at "
                "normal priority")


# ---- one test ------------------------------------------------------------------------
class Progress:
    """Where the run is, on stderr: each test as it starts, then a line every `every`
    seconds of traffic with the seconds left in the test and (estimated) in the run."""

    def __init__(self, total_tests: int, guess_s: float, every: float = 10):
        self.total, self.guess, self.every = total_tests, guess_s, every
        self.done = 0
        self.spent: list[float] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t_test = self._t_traffic = 0.0
        self.what = ""

    def _left_after_current(self) -> float:
        avg = sum(self.spent) / len(self.spent) if self.spent else self.guess
        return avg * (self.total - self.done - 1)

    def begin(self, what: str) -> None:
        self.what, self._t_test = what, time.monotonic()
        log(f"test {self.done + 1}/{self.total}: {what}: fresh containers "
            f"(about {_mmss(self.guess + self._left_after_current())} left in all)")

    def traffic(self, seconds: float) -> None:
        self._t_traffic = time.monotonic()
        self._stop.clear()
        log(f"test {self.done + 1}/{self.total}: {self.what}: {seconds:g} s of traffic")

        def tick():
            while not self._stop.wait(self.every):
                left = max(0.0, seconds - (time.monotonic() - self._t_traffic))
                log(f"  test {self.done + 1}/{self.total} {self.what}: {left:.0f} s left, "
                    f"about {_mmss(left + 8 + self._left_after_current())} left in all")
        self._thread = threading.Thread(target=tick, daemon=True)
        self._thread.start()

    def end(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join()
            self._thread = None
        self.spent.append(time.monotonic() - self._t_test)
        self.done += 1


def _mmss(s: float) -> str:
    s = max(0, int(round(s)))
    return f"{s // 60}:{s % 60:02d}"


class BusyMeter:
    """Bytes each TBF bottleneck in bs sent, read at given seconds after start (as the
    namespace lab's meter): the uplink's and downlink's busy share in between."""

    def __init__(self, lab: Lab, link):
        self.lab, self.link = lab, link
        self.t0 = time.monotonic()
        self.reads: list[tuple[float, int, int]] = []
        self.timers: list[threading.Timer] = []

    def at(self, t: float) -> None:
        tm = threading.Timer(max(0.0, t - (time.monotonic() - self.t0)), self._read)
        tm.daemon = True
        tm.start()
        self.timers.append(tm)

    def _read(self) -> None:
        before = time.monotonic()
        stats = tc_stats(self.lab)
        when = (before + time.monotonic()) / 2

        def sent(name):
            for q in stats.get(name, []):
                if q.get("kind") == "tbf" and q.get("root"):
                    return int(q.get("bytes", 0))
            return None
        up, down = sent("up"), sent("down")
        if up is not None and down is not None:
            self.reads.append((when, up, down))

    def cancel(self) -> None:
        for tm in self.timers:
            tm.cancel()

    def fractions(self):
        if len(self.reads) < 2:
            return None, None
        (a, u0, d0), (b, u1, d1) = self.reads[0], self.reads[-1]
        dt = b - a
        if dt <= 0:
            return None, None
        return ((u1 - u0) * 8 / (self.link.up.rate_bps * dt) if self.link.up.rate_bps else None,
                (d1 - d0) * 8 / (self.link.down.rate_bps * dt) if self.link.down.rate_bps else None)


def tc_stats(lab: Lab) -> dict:
    out = {}
    for name, towards in (("up", "gw"), ("down", "phone")):
        r = lab.exec("bs", ["tc", "-s", "-j", "qdisc", "show", "dev",
                            topo.IFACES["bs"][towards]], check=False)
        try:
            out[name] = json.loads(r.stdout)
        except json.JSONDecodeError:
            out[name] = []
    return out


def linkem_stats(lab: Lab) -> list[dict]:
    """rsfc-linkem's counters now ([uplink, downlink]): SIGUSR1, then its two new lines."""
    def lines():
        r = lab.exec("bs", ["cat", "/run/rsfc-linkem.jsonl"], check=False)
        return [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]
    n = len(lines())
    lab.exec("bs", ["sh", "-c", "kill -USR1 $(cat /run/rsfc-linkem.pid)"], check=False)
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        got = lines()
        if len(got) >= n + 2:
            return got[n:n + 2]
        time.sleep(0.1)
    return []


def scrape_metrics(lab: Lab) -> tuple[str, str]:
    """rsfcd's /metrics from the Docker host, at the gw container's address on the
    internet network (the host has the bridge's .254)."""
    url = f"http://{topo.GW_SRV4}:{METRICS_PORT}/metrics"
    with urllib.request.urlopen(url, timeout=3) as r:
        return url, r.read().decode()


def wait_metrics(lab: Lab, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            scrape_metrics(lab)
            return
        except OSError as e:
            last = e
        if not lab.running("gw"):
            break
        time.sleep(0.2)
    raise RuntimeError(f"rsfcd's /metrics did not answer from the host ({last}); gw log:\n"
                       f"{lab.logs('gw')}")


def wait_listening(lab: Lab, port: int, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = lab.exec("server", ["ss", "-Hltn", f"sport = :{port}"], check=False)
        if r.stdout.strip():
            return
        time.sleep(0.1)
    raise RuntimeError(f"nothing listens on server:{port} after {timeout}s")


def run_test(lab: Lab, scenario, label: str, cfg: dict | None, kind: str, duration: float,
             warmup: float, progress: Progress, ping_interval: float = 0.1):
    """One test on fresh containers: scenarios.run_test's steps, with docker exec."""
    res = scenarios.TestResult(policy=label, kind=kind)
    extra = {"metrics_url": None, "metrics_scraped": False}
    progress.begin(f"{label} {kind}")
    try:
        env, sysctls = test_environment(scenario, cfg)
        lab.up(env, sysctls)
        lab.wait_ready()
        if cfg is not None:
            wait_metrics(lab)
        procs = {}
        cc = ["-C", "cubic"]
        for k, port in (("dl", DL_PORT), ("ul", UL_PORT)):
            if kind in (k, "both"):
                lab.exec("server", ["iperf3", "-s", "-1", "-J", "-p", port], detach=True)
                wait_listening(lab, port)
        progress.traffic(duration)
        procs["ping"] = lab.popen("phone", ["/usr/bin/python3", "/opt/rsfcd/src/lab/pinger.py",
                                            topo.SRV4, "--interval", ping_interval,
                                            "--duration", duration, "--linger", "6"])
        secs = str(int(round(duration)))
        if kind in ("dl", "both"):
            procs["dl"] = lab.popen("phone", ["iperf3", "-c", topo.SRV4, "-p", DL_PORT, "-R", *cc,
                                              "-t", secs, "-i", "1", "-J"])
        if kind in ("ul", "both"):
            procs["ul"] = lab.popen("phone", ["iperf3", "-c", topo.SRV4, "-p", UL_PORT, *cc,
                                              "-t", secs, "-i", "1", "-J",
                                              "--get-server-output"])
        busy = BusyMeter(lab, scenario.link)
        busy.at(warmup)
        busy.at(duration - 0.5)
        outs = scenarios.wait_clients(procs, res, duration + 90)
        busy.cancel()
        res.up_busy, res.down_busy = busy.fractions()
        collect(lab, res, extra, cfg is not None)
    finally:
        progress.end()
    scenarios.parse_outputs(res, outs, duration, warmup)
    for e in res.errors:
        log(f"  ! {label} {kind}: {e}")
    return res, extra


def collect(lab: Lab, res, extra: dict, daemon: bool) -> None:
    """After the traffic: the link's counters, rsfcd's metrics (scraped from the host) and
    whether the delay element and rsfcd are still alive."""
    res.linkem = linkem_stats(lab)
    res.tc = tc_stats(lab)
    if daemon:
        if lab.exec("gw", ["pidof", "rsfcd"], check=False).returncode != 0:
            res.errors.append(f"rsfcd died: {lab.logs('gw', 5)}")
        else:
            try:
                url, text = scrape_metrics(lab)
                m = topo.parse_prometheus(text)
                res.daemon_metrics = {k: sum(v.values()) for k, v in m.items()}
                extra.update(metrics_url=url, metrics_scraped=True)
            except Exception as e:  # noqa: BLE001 (diagnostics only)
                res.errors.append(f"metrics: {e}")
    if lab.exec("bs", ["sh", "-c", "kill -0 $(cat /run/rsfc-linkem.pid)"],
                check=False).returncode != 0:
        res.errors.append("rsfc-linkem died")


# ---- main ----------------------------------------------------------------------------
def json_line(summary: dict) -> str:
    keys = {"download_alone_mbps": "dl_alone_mbps", "download_with_upload_mbps": "dl_with_ul_mbps",
            "upload_with_download_mbps": "ul_with_dl_mbps",
            "rtt_under_load_p95_ms": "rtt_load_p95_ms"}
    return json.dumps({p: {k: (round(s[v], 3) if s.get(v) is not None else None)
                           for k, v in keys.items()} for p, s in summary.items()})


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--short", action="store_true",
                    help=f"the CI version: {SHORT['policies']}, tests {SHORT['kinds']}, "
                         f"{SHORT['duration']:g} s each ({SHORT['warmup']:g} s warm-up)")
    ap.add_argument("--scenario", default="3g", choices=sorted(scenarios.SCENARIOS))
    ap.add_argument("--policies", help=f"comma-separated (default {FULL['policies']})")
    ap.add_argument("--kinds", help=f"tests per policy (default {FULL['kinds']})")
    ap.add_argument("--duration", type=float, help="seconds per test (default 40)")
    ap.add_argument("--warmup", type=float, help="seconds skipped per test (default 10)")
    ap.add_argument("--image", default="rsfcd-lab:latest")
    ap.add_argument("--project", default="rsfclab", help="compose project name")
    ap.add_argument("--json", help="full results (default lab/out/docker-<scenario>-<time>.json)")
    ap.add_argument("--json-line-file", help="write the final JSON line here, not to stdout")
    a = ap.parse_args(argv)
    base = SHORT if a.short else FULL
    policies = a.policies or base["policies"]
    kinds = tuple(k.strip() for k in (a.kinds or base["kinds"]).split(",") if k.strip())
    duration = a.duration or base["duration"]
    warmup = a.warmup if a.warmup is not None else base["warmup"]
    if warmup >= duration:
        ap.error("--warmup must be shorter than --duration")
    scenario = scenarios.SCENARIOS[a.scenario]
    resolved, note = resolve_policies(policies)
    compose = detect_compose()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out_path = (Path(a.json) if a.json
                else scenarios.OUT_DIR / f"docker-{scenario.name}-{stamp}.json")
    out_path.parent.mkdir(parents=True, exist_ok=True)
    topo.ensure_host_cc_allowed("cubic")  # iperf3 -C cubic (a host-wide setting)
    rt, rt_note = realtime_settings(a.image)
    log(f"compose: {' '.join(compose)}; {rt_note}")
    workdir = Path(tempfile.mkdtemp(prefix="rsfc-docker-lab-"))
    lab = Lab(compose, a.project, workdir, rt)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    total = len(resolved) * len(kinds)
    progress = Progress(total, duration + SETUP_S)
    results: dict[str, dict] = {}
    extras: dict[str, dict] = {}
    try:
        for label, cfg in resolved:
            results[label], extras[label] = {}, {}
            for kind in kinds:
                t0 = time.monotonic()
                r, extra = run_test(lab, scenario, label, cfg, kind, duration, warmup, progress)
                results[label][kind], extras[label][kind] = r, extra
                log(f"  {scenario.name} {label:>14} {kind:>4}: dl {fmt(r.dl_mbps)} ul "
                    f"{fmt(r.ul_mbps)} Mbit/s, RTT p50/p95 {fmt(r.rtt_p50_ms, digits=0)}/"
                    f"{fmt(r.rtt_p95_ms, digits=0)} ms ({time.monotonic() - t0:.0f} s)")
    finally:
        lab.down()
        shutil.rmtree(workdir, ignore_errors=True)
    summary = scenarios.summarize(scenario, results)
    meta = {"scenario": scenario.name, "description": scenario.description,
            "link": scenario.link.to_dict(), "phone_timestamps": scenario.phone_timestamps,
            "duration_s": duration, "warmup_s": warmup, "engine": "tbf", "lab": "docker",
            "compose": " ".join(compose), "realtime": rt_note, "shipped": note,
            "docker": docker_versions(), "kernel": os.uname().release, "time": stamp}
    out_path.write_text(json.dumps({
        "meta": meta, "summary": summary,
        "tests": {p: {k: dict(vars(r), docker=extras[p][k]) for k, r in t.items()}
                  for p, t in results.items()},
    }, indent=1))
    print(f"docker lab (containers: phone, bs, gw, server; {' '.join(compose)})")
    print(scenarios.format_table(scenario, summary, duration, warmup))
    if note:
        print(note)
    print(f"(JSON: {out_path})", flush=True)
    line = json_line(summary)
    if a.json_line_file:
        Path(a.json_line_file).write_text(line + "\n")
    else:
        print(line, flush=True)
    return 1 if any(s["errors"] for s in summary.values()) else 0


def docker_versions() -> dict:
    r = sh(["docker", "version", "--format", "{{json .}}"], check=False)
    try:
        v = json.loads(r.stdout)
        return {"client": v["Client"]["Version"], "server": v["Server"]["Version"]}
    except (json.JSONDecodeError, KeyError, TypeError):
        return {}


if __name__ == "__main__":
    sys.exit(main())
