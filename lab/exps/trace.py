"""Experiment `trace`: a download and a concurrent upload over each shipped cellular
capacity trace (lab/traces: the uplink trace on the uplink, the downlink trace on the
downlink, rsfc-linkem's engine), deep drop-tail buffers; goodput as a share of what the
trace offered in the measured window, and the phone's RTT.

    sudo /usr/bin/python3 lab/experiments.py trace [--traces A,B] [--trace-offset S]
"""

from __future__ import annotations

import time
from pathlib import Path

from measure import flow_mbps, fmt, payload_fraction, rtt_stats
from shaping import Direction, LinkSpec, TraceFile, trace_path

from .bench import Bench
from .common import fmt_ms, fmt_pct, fmt_rtt, pick_best_static, policies_for, table


TRACE_NAMES = ["Verizon-LTE-short", "TMobile-UMTS-driving", "Verizon-EVDO-driving"]


def representative_offset(up: TraceFile, down: TraceFile, duration_s: float,
                          warmup_s: float) -> int:
    """Where to start a pair of traces (recorded together) for a test of `duration_s`: the
    multiple of 10 s whose measured window [warmup, duration] offers, in both directions,
    the capacity closest to the whole trace's mean (sum of relative errors). A window at
    the start of a drive can be an outage (EV-DO's downlink is 0.05 Mbit/s for its first
    40 s), which would measure nothing."""
    best, best_err = 0, None
    span = min(up.period_ms, down.period_ms) - duration_s * 1000
    for x in range(0, max(1, int(span)), 10_000):
        a, b = x + warmup_s * 1000, x + duration_s * 1000
        err = abs(up.mbps(a, b) / up.mean_mbps() - 1) + abs(down.mbps(a, b) / down.mean_mbps() - 1)
        if best_err is None or err < best_err - 1e-9:
            best, best_err = x, err
    return best


def run(a, log) -> dict:
    """Download + concurrent upload over each shipped trace (uplink trace on the uplink,
    downlink trace on the downlink, rsfc-linkem engine), deep drop-tail buffers."""
    D, W = a.duration or 35.0, a.warmup or 10.0
    policies = policies_for(a.statics or [32768, 131072], a.extra_policies)
    up_buf, down_buf, rtt = 1_000_000, 512_000, 50.0
    wd = Path(a.workdir) / "trace"
    wd.mkdir(parents=True, exist_ok=True)
    out = {"scenario": "trace", "duration_s": D, "warmup_s": W, "policies": policies,
           "buffers": {"up": up_buf, "down": down_buf}, "base_rtt_ms": rtt,
           "rule": "best static = highest min(download/capacity, upload/capacity) "
                   "(the direction it serves worse); ties within 1 %: lower RTT p95",
           "traces": {}}
    names = a.traces.split(",") if a.traces else TRACE_NAMES
    for name in names:
        up, down = TraceFile.load(trace_path(name, "up")), TraceFile.load(trace_path(name, "down"))
        off_ms = (int(a.trace_offset * 1000) if a.trace_offset is not None
                  else representative_offset(up, down, D, W))
        up_r, down_r = up.rotated(off_ms), down.rotated(off_ms)
        up_file = up_r.write(wd / f"{name}.up")
        down_file = down_r.write(wd / f"{name}.down")
        link = LinkSpec(up=Direction(buffer_bytes=up_buf, delay_ms=rtt / 2, trace=str(up_file)),
                        down=Direction(buffer_bytes=down_buf, delay_ms=rtt / 2,
                                       trace=str(down_file)))
        entry = {"offset_s": off_ms / 1000, "tests": {}, "summary": {},
                 "mean_up_mbps": up.mean_mbps(), "mean_down_mbps": down.mean_mbps()}
        log(f"trace {name} from {off_ms / 1000:g} s (mean up {up.mean_mbps():.2f} / down "
            f"{down.mean_mbps():.2f} Mbit/s)")
        for policy in policies:
            t_start = time.monotonic()
            with Bench(f"trace-{name}", link, policy, engine="linkem", workdir=wd, log=log) as b:
                b.begin(ping_s=D, linger_s=15)
                b.at(0, b.bulk, "dl", "down", D)
                b.at(0, b.bulk, "ul", "up", D)
                b.run_schedule()
                res = b.finish()
            # Capacity of the measured window, in the link's own time (trace time zero =
            # linkem's start; a delivery at the sender's ACK is one base RTT after it left
            # the bottleneck: the shift is small next to the window).
            z = (sum(res["linkem_start_monotonic"]) / 2 - res["t0_monotonic"])
            lo, hi = (W - z) * 1000 - rtt, (D - z) * 1000 - rtt
            eff = payload_fraction(True, "linkem")
            cap_up = up_r.mbps(lo, hi) * eff
            cap_down = down_r.mbps(lo, hi) * eff
            dl = flow_mbps(res["flows"].get("dl", {}), W, D)
            ul = flow_mbps(res["flows"].get("ul", {}), W, D)
            st = rtt_stats(res, W, D)
            s = {"dl_mbps": dl, "ul_mbps": ul, "cap_down_mbps": cap_down, "cap_up_mbps": cap_up,
                 "dl_fraction": dl / cap_down if dl is not None and cap_down else None,
                 "ul_fraction": ul / cap_up if ul is not None and cap_up else None,
                 "rtt_p50_ms": st["p50"], "rtt_p95_ms": st["p95"], "ping_lost": st["lost"],
                 "errors": res["errors"]}
            s["score"] = (min(s["dl_fraction"], s["ul_fraction"])
                          if s["dl_fraction"] is not None and s["ul_fraction"] is not None
                          else None)
            entry["tests"][policy] = res
            entry["summary"][policy] = s
            log(f"  {name} {policy:>14}: dl {fmt(dl)} ({fmt_pct(s['dl_fraction'])}) ul {fmt(ul)} "
                f"({fmt_pct(s['ul_fraction'])}) Mbit/s, RTT {fmt_rtt(st)} ms "
                f"({time.monotonic() - t_start:.0f} s)")
        entry["best_static"] = pick_best_static(
            {p: v["score"] for p, v in entry["summary"].items()},
            {p: v["rtt_p95_ms"] or 1e9 for p, v in entry["summary"].items()})
        out["traces"][name] = entry
    return out


def report(out: dict) -> str:
    parts = [f"scenario trace: download + upload over capacity traces, buffers up "
             f"{out['buffers']['up'] // 1000} KB / down {out['buffers']['down'] // 1000} KB, base "
             f"RTT {out['base_rtt_ms']:g} ms, {out['duration_s']:g} s per test, first "
             f"{out['warmup_s']:g} s skipped; {out['rule']} (*)"]
    for name, e in out["traces"].items():
        pol = list(e["summary"])
        S = e["summary"]
        any_s = S[pol[0]]
        rows = [
            ("download [Mbit/s]", [fmt(S[p]["dl_mbps"]) for p in pol]),
            ("  % of trace capacity", [fmt_pct(S[p]["dl_fraction"]) for p in pol]),
            ("upload [Mbit/s]", [fmt(S[p]["ul_mbps"]) for p in pol]),
            ("  % of trace capacity", [fmt_pct(S[p]["ul_fraction"]) for p in pol]),
            ("phone RTT p50/p95 [ms]", [f"{fmt_ms(S[p]['rtt_p50_ms'])}/{fmt_ms(S[p]['rtt_p95_ms'])}"
                                        for p in pol]),
        ]
        parts.append(table(f"\n{name} (from {e['offset_s']:g} s into the trace; capacity of "
                           f"the window, payload: down {any_s['cap_down_mbps']:.2f} / up "
                           f"{any_s['cap_up_mbps']:.2f} Mbit/s)", pol, rows, e["best_static"]))
    return "\n".join(parts)
