"""Experiment `fairness`: two competing uploads on the 3g link's uplink, (a) both from one
phone, (b) one from each of two phones behind the same bottleneck; Jain's index and the
efficiency against one unregulated upload.

    sudo /usr/bin/python3 lab/experiments.py fairness
    /usr/bin/python3 lab/experiments.py --show lab/out/fairness-....json --recompute
"""

from __future__ import annotations

import time
from pathlib import Path

from measure import flow_mbps, fmt, jain, rtt_stats
from shaping import LINKS

from .bench import Bench
from .common import fmt_ms, policies_for, score_cases, table


def run(a, log) -> dict:
    """Two competing uploads on the 3g link's uplink: (a) both from one phone, (b) one from
    each of two phones behind the same bottleneck; the second starts 3 s after the first."""
    D, W = a.duration or 40.0, a.warmup or 12.0
    link = LINKS["3g"]
    policies = policies_for(a.statics or [32768, 65536], a.extra_policies)
    wd = Path(a.workdir) / "fairness"
    out = {"scenario": "fairness", "duration_s": D, "warmup_s": W, "link": link.to_dict(),
           "link_name": "3g", "policies": policies,
           "rule": "best static = highest mean over (a) and (b) of Jain index x efficiency",
           "tests": {}, "summary": {}}
    t_start = time.monotonic()
    with Bench("fair-single", link, "off", workdir=wd, log=log) as b:
        b.begin(ping_s=D, linger_s=8)
        b.at(0, b.bulk, "ul1", "up", D)
        b.run_schedule()
        res = b.finish()
    single = flow_mbps(res["flows"]["ul1"], W, D)
    out["tests"]["single"] = res
    out["single_tcp_mbps"] = single
    log(f"  fairness single TCP upload (off): {fmt(single)} Mbit/s "
        f"({time.monotonic() - t_start:.0f} s)")
    for policy in policies:
        out["tests"][policy] = {}
        for case, phones in (("one-phone", 1), ("two-phones", 2)):
            t_start = time.monotonic()
            with Bench(f"fair-{case}", link, policy, phones=phones, workdir=wd, log=log) as b:
                b.begin(ping_s=D, linger_s=8)
                b.at(0, b.bulk, "ul1", "up", D, "phone")
                b.at(3, b.bulk, "ul2", "up", D - 3, "phone2" if phones == 2 else "phone")
                b.run_schedule()
                res = b.finish()
            out["tests"][policy][case] = res
            summarize(out)
            s = out["summary"][policy][case]
            log(f"  fairness {case:>10} {policy:>14}: {fmt(s['r1_mbps'])} + "
                f"{fmt(s['r2_mbps'])} Mbit/s, Jain {fmt(s['jain'], digits=3)}, efficiency "
                f"{fmt(s['efficiency'])}, RTT {fmt_ms(s['rtt_p50_ms'])}/"
                f"{fmt_ms(s['rtt_p95_ms'])} ms "
                f"({time.monotonic() - t_start:.0f} s)")
    return out


def summarize(out: dict) -> None:
    """out["summary"], out["scores"], out["best_static"] from out["tests"] (--recompute)."""
    W, D = out["warmup_s"], out["duration_s"]
    single = flow_mbps(out["tests"]["single"]["flows"]["ul1"], W, D)
    out["single_tcp_mbps"] = single
    out["summary"] = {}
    for policy, cases in out["tests"].items():
        if policy == "single":
            continue
        out["summary"][policy] = {}
        for case, res in cases.items():
            r1 = flow_mbps(res["flows"].get("ul1", {}), W, D)
            r2 = flow_mbps(res["flows"].get("ul2", {}), W, D)
            j = jain([r1, r2])
            eff = (r1 + r2) / single if r1 is not None and r2 is not None and single else None
            st = rtt_stats(res, W, D)
            out["summary"][policy][case] = {
                "r1_mbps": r1, "r2_mbps": r2, "jain": j, "efficiency": eff,
                "rtt_p50_ms": st["p50"], "rtt_p95_ms": st["p95"], "errors": res["errors"]}
    score_cases(out, lambda case, c: None if c["jain"] is None or c["efficiency"] is None
                 else c["jain"] * c["efficiency"])


def report(out: dict) -> str:
    S = out["summary"]
    pol = out["policies"]
    rows = []
    for case, label in (("one-phone", "(a) one phone"), ("two-phones", "(b) two phones")):
        rows.append((f"{label}: R1 + R2 [Mbit/s]",
                     [f"{fmt(S[p][case]['r1_mbps'])}+{fmt(S[p][case]['r2_mbps'])}" for p in pol]))
        rows.append(("  Jain index", [fmt(S[p][case]["jain"], digits=3) for p in pol]))
        rows.append(("  efficiency (R1+R2)/R_single", [fmt(S[p][case]["efficiency"]) for p in pol]))
        rows.append(("  phone RTT p50/p95 [ms]",
                     [f"{fmt_ms(S[p][case]['rtt_p50_ms'])}/{fmt_ms(S[p][case]['rtt_p95_ms'])}"
                      for p in pol]))
    return table(f"scenario fairness: two uploads (the second starts 3 s later), 3g uplink "
                 f"2 Mbit/s 1 MiB; window {out['warmup_s']:g}-{out['duration_s']:g} s; "
                 f"R_single = one unregulated upload = {fmt(out['single_tcp_mbps'])} Mbit/s; "
                 f"{out['rule']} (*)", pol, rows, out.get("best_static"))
