"""Experiment `web`: repeated page loads (one 320 KB object, or a 30 KB page with 29 x
10 KB objects over 6 connections) while the phone uploads, on the 3g link; load times
against the same loads without the upload.

    sudo /usr/bin/python3 lab/experiments.py web
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from measure import flow_mbps, fmt, percentile, rtt_stats
from shaping import LINKS

from .bench import Bench
from .common import fmt_rtt, pick_best_static, policies_for, table


def _loads_stats(loads: list, page: str | None, timeout: float) -> dict:
    sel = [x for x in loads if page is None or x["page"] == page]
    secs = [x["seconds"] if x["complete"] else max(x["seconds"], timeout) for x in sel]
    return {"n": len(sel), "incomplete": sum(1 for x in sel if not x["complete"]),
            "p50": percentile(secs, 0.5), "p90": percentile(secs, 0.9),
            "max": max(secs) if secs else None}


def run(a, log) -> dict:
    """Repeated page loads (alternately one 320 KB object, and a 30 KB page + 29 x 10 KB
    objects over 6 connections) while the phone uploads, on the 3g link."""
    D, W = a.duration or 75.0, a.warmup or 6.0
    timeout = 45.0
    link = LINKS["3g"]
    policies = policies_for(a.statics or [32768, 65536], a.extra_policies)
    wd = Path(a.workdir) / "web"
    out = {"scenario": "web", "duration_s": D, "warmup_s": W, "timeout_s": timeout,
           "link": link.to_dict(), "link_name": "3g", "policies": policies,
           "rule": "best static = lowest p90 page load time (both page kinds); ties within "
                   "1 %: higher upload goodput",
           "tests": {}, "summary": {}}

    def one(label, policy, upload):
        t_start = time.monotonic()
        with Bench(label, link, policy, workdir=wd, log=log) as b:
            b.begin(ping_s=D + 10, linger_s=8)
            if upload:
                b.at(0, b.bulk, "ul", "up", D + 2 * timeout)
            b.at(0, b.web, "web", W, D, timeout)
            b.run_schedule()
            # The upload runs until the last page load is done.
            web_p, _ = b.clients["web"]
            try:
                web_p.wait(timeout=D + 2 * timeout)
            except subprocess.TimeoutExpired:
                pass
            t_web_end = b.now()
            if upload:
                b.stop_flow("ul")
            res = b.finish()
        loads = (res.get("web") or {}).get("loads", [])
        s = {"all": _loads_stats(loads, None, timeout),
             "single": _loads_stats(loads, "single", timeout),
             "multi": _loads_stats(loads, "multi", timeout),
             "ul_mbps": flow_mbps(res["flows"]["ul"], W, t_web_end) if upload else None,
             "rtt": rtt_stats(res, W, t_web_end), "errors": res["errors"]}
        log(f"  web {policy:>14}{'' if upload else ' (no upload)'}: single p50/p90 "
            f"{fmt(s['single']['p50'])}/{fmt(s['single']['p90'])} s, multi "
            f"{fmt(s['multi']['p50'])}/{fmt(s['multi']['p90'])} s (n={s['all']['n']}), "
            f"upload {fmt(s['ul_mbps'])} Mbit/s, RTT {fmt_rtt(s['rtt'])} ms "
            f"({time.monotonic() - t_start:.0f} s)")
        return res, s

    res, s = one("web-alone", "off", upload=False)
    out["tests"]["alone"], out["summary"]["alone"] = res, s
    for policy in policies:
        res, s = one("web", policy, upload=True)
        out["tests"][policy], out["summary"][policy] = res, s
    out["best_static"] = pick_best_static(
        {p: -v["all"]["p90"] if v["all"]["p90"] is not None else None
         for p, v in out["summary"].items() if p != "alone"},
        {p: -(v["ul_mbps"] or 0) for p, v in out["summary"].items() if p != "alone"})
    return out


def report(out: dict) -> str:
    S = out["summary"]
    pol = ["alone"] + out["policies"]
    head = [("no upload" if p == "alone" else p) for p in pol]

    def cell(p, page, k):
        st = S[p][page]
        v = fmt(st[k])
        return v if not st["incomplete"] or k == "p50" and st["p50"] < out["timeout_s"] else (
            ">" + v if st[k] is not None and st[k] >= out["timeout_s"] else v)

    rows = []
    for page, label in (("single", "1 x 320 KB"), ("multi", "30 objects, 6 conns")):
        rows.append((f"{label}: loads (incomplete)",
                     [f"{S[p][page]['n']} ({S[p][page]['incomplete']})" for p in pol]))
        rows.append(("  load time p50/p90 [s]",
                     [f"{cell(p, page, 'p50')}/{cell(p, page, 'p90')}" for p in pol]))
    rows.append(("upload [Mbit/s]", [fmt(S[p]["ul_mbps"]) for p in pol]))
    rows.append(("phone RTT p50/p95 [ms]", [fmt_rtt(S[p]["rtt"]) for p in pol]))
    best = out.get("best_static")
    return table(f"scenario web: page loads while the phone uploads, 3g link (up 2 Mbit/s 1 MiB, "
                 f"down 7.2 Mbit/s 256 KiB, 40 ms); loads from {out['warmup_s']:g} s to "
                 f"{out['duration_s']:g} s, {out['timeout_s']:g} s timeout; {out['rule']} (*)",
                 head, rows, best)
