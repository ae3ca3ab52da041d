"""The docker lab for real: `docker/run-lab.sh --short` (the 3G scenario in containers,
policies off and rsfc, download alone and download + upload, 20 s each) from whatever
state the machine is in: it installs what is missing, starts dockerd if none answers (and
stops it again), makes the base image with debootstrap if there is none, builds the image
and brings the four containers up per test.

Asserted: the run ends cleanly with its JSON line (the four numbers per policy); the
emulated link bloats (off: the download collapses under a concurrent upload, p95 RTT over
a second), rsfc restores the download and cuts the phone's p95 RTT under load against
off; rsfcd's /metrics was scraped from the Docker host at the gw container's address and
shows the test's flows and rsfc's windows; nothing is left behind (containers, networks,
and an engine it started).

Skipped, saying why, when no engine answers and none can be started (no dockerd
installed: ./setup.sh installs Debian's). Takes about 3 minutes with the images present,
about 10 from nothing (debootstrap and the image build).
Run as root: /usr/bin/python3 -m pytest -q test/integration/test_docker_lab.py
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

import topo

REPO = Path(__file__).resolve().parents[2]
RUN_LAB = REPO / "docker" / "run-lab.sh"
PROJECT = "rsfclab"


def engine_answers() -> bool:
    return shutil.which("docker") is not None and subprocess.run(
        ["docker", "info"], capture_output=True, timeout=60).returncode == 0


def why_no_engine() -> str | None:
    if os.geteuid() != 0:
        return "needs root (packages, dockerd, sysctls)"
    if engine_answers():
        return None
    if shutil.which("dockerd"):
        return None  # run-lab.sh starts it
    return ("no Docker engine answers and none can be started: dockerd is not installed "
            "(./setup.sh installs Debian's docker.io, docker-compose and debootstrap)")


@pytest.mark.timeout(2400)
def test_docker_lab_short_rsfc_restores_download_and_cuts_rtt(tmp_path):
    reason = why_no_engine()
    if reason:
        pytest.skip(reason)
    engine_before = engine_answers()
    full = tmp_path / "docker-3g.json"
    log = tmp_path / "run-lab.log"
    with open(log, "w") as err:
        p = subprocess.Popen([str(RUN_LAB), "--short", "--json", str(full)],
                             stdout=subprocess.PIPE, stderr=err, text=True)
        try:
            out, _ = p.communicate(timeout=2300)
        except BaseException:  # the test's time limit, Ctrl-C: let run-lab.sh tear down
            p.terminate()
            p.wait(timeout=120)
            raise
    print(out)
    tail = "\n".join(log.read_text().splitlines()[-40:])
    assert p.returncode == 0, f"run-lab.sh exited {p.returncode}:\n{out}\n{tail}"

    # The last line: one JSON object, the four numbers per policy.
    line = json.loads(out.strip().splitlines()[-1])
    assert set(line) == {"off", "rsfc"}, line
    for policy, v in line.items():
        assert set(v) == {"download_alone_mbps", "download_with_upload_mbps",
                          "upload_with_download_mbps", "rtt_under_load_p95_ms"}, v
        assert all(x is not None for x in v.values()), (policy, v)
    off, rsfc = line["off"], line["rsfc"]
    # The table was printed, as lab/scenarios.py prints it.
    assert "download w/ upload [Mbit/s]" in out and "RTT under load p50/p95 [ms]" in out

    # The link bloats like a 3G uplink: without regulation the download collapses and the
    # phone's RTT goes to seconds (otherwise the comparison proves nothing).
    assert off["download_alone_mbps"] >= 0.85 * 7.2 * 1448 / 1514
    assert off["rtt_under_load_p95_ms"] >= 1000, off
    assert off["download_with_upload_mbps"] <= 0.6 * off["download_alone_mbps"], off
    # rsfc restores the download and cuts the p95 RTT under load, against off.
    assert rsfc["download_with_upload_mbps"] >= 0.7 * rsfc["download_alone_mbps"], rsfc
    assert rsfc["download_with_upload_mbps"] >= 2 * off["download_with_upload_mbps"], line
    assert rsfc["rtt_under_load_p95_ms"] <= 0.3 * off["rtt_under_load_p95_ms"], line
    assert rsfc["upload_with_download_mbps"] >= 0.5 * off["upload_with_download_mbps"], line

    # rsfcd's /metrics, scraped from the host at the gw container's address after the test.
    saved = json.loads(full.read_text())
    assert saved["meta"]["lab"] == "docker"
    both = saved["tests"]["rsfc"]["both"]
    assert both["docker"]["metrics_scraped"] is True
    assert both["docker"]["metrics_url"] == f"http://{topo.GW_SRV4}:9477/metrics"
    m = both["daemon_metrics"]
    assert m["rsfcd_flows_created_total"] >= 2, m  # the download and the upload (+ control)
    assert m["rsfcd_rsfc_windows_applied_total"] > 0, m
    # The delay element ran in bs and carried both directions.
    up, down = both["linkem"]
    assert up["released"] > 1000 and down["released"] > 1000, both["linkem"]

    # Nothing left behind.
    if engine_before:
        ps = subprocess.run(["docker", "ps", "-aq", "--filter",
                             f"label=com.docker.compose.project={PROJECT}"],
                            capture_output=True, text=True).stdout.split()
        nets = subprocess.run(["docker", "network", "ls", "-q", "--filter",
                               f"label=com.docker.compose.project={PROJECT}"],
                              capture_output=True, text=True).stdout.split()
        assert not ps and not nets, (ps, nets)
    else:
        assert not engine_answers(), "run-lab.sh left the dockerd it started running"
