"""Experiment `stacks`: a download (the server's CUBIC) and an upload on the 3g link from
phones with different stacks: CUBIC or BBR, TCP timestamps on or off.

    sudo /usr/bin/python3 lab/experiments.py stacks
"""

from __future__ import annotations

import time
from pathlib import Path

from measure import flow_mbps, fmt, payload_fraction, rtt_stats
from shaping import LINKS

from .bench import Bench
from .common import fmt_ms, fmt_pct, fmt_rtt, pick_best_static, policies_for, table


STACKS = [("cubic", True), ("cubic", False), ("bbr", True), ("bbr", False)]


def run(a, log) -> dict:
    """Download + upload on the 3g link from phones with different stacks: CUBIC or BBR
    uploads, TCP timestamps on or off (the download is always the server's CUBIC)."""
    D, W = a.duration or 28.0, a.warmup or 10.0
    link = LINKS["3g"]
    policies = policies_for(a.statics or [32768, 65536], a.extra_policies)
    wd = Path(a.workdir) / "stacks"
    out = {"scenario": "stacks", "duration_s": D, "warmup_s": W, "link": link.to_dict(),
           "link_name": "3g", "policies": policies,
           "rule": "best static per stack = highest min(download/capacity, upload/capacity); "
                   "ties within 1 %: lower RTT p95",
           "tests": {}, "summary": {}, "best_static": {}}
    for cc, ts in STACKS:
        variant = f"{cc}-{'ts' if ts else 'nots'}"
        eff = payload_fraction(ts, "tbf")
        cap_dl, cap_ul = link.down.rate_bps * eff / 1e6, link.up.rate_bps * eff / 1e6
        out["tests"][variant], out["summary"][variant] = {}, {}
        for policy in policies:
            t_start = time.monotonic()
            with Bench(f"stacks-{variant}", link, policy, cc_phone=cc, phone_timestamps=ts,
                       workdir=wd, log=log) as b:
                b.begin(ping_s=D, linger_s=8)
                b.at(0, b.bulk, "dl", "down", D)
                b.at(0, b.bulk, "ul", "up", D)
                b.run_schedule()
                res = b.finish()
            dl = flow_mbps(res["flows"].get("dl", {}), W, D)
            ul = flow_mbps(res["flows"].get("ul", {}), W, D)
            st = rtt_stats(res, W, D)
            s = {"dl_mbps": dl, "ul_mbps": ul, "cap_dl_mbps": cap_dl, "cap_ul_mbps": cap_ul,
                 "dl_fraction": dl / cap_dl if dl is not None else None,
                 "ul_fraction": ul / cap_ul if ul is not None else None,
                 "rtt_p50_ms": st["p50"], "rtt_p95_ms": st["p95"], "errors": res["errors"]}
            s["score"] = (min(s["dl_fraction"], s["ul_fraction"])
                          if dl is not None and ul is not None else None)
            out["tests"][variant][policy] = res
            out["summary"][variant][policy] = s
            log(f"  stacks {variant:>10} {policy:>14}: dl {fmt(dl)} ul {fmt(ul)} Mbit/s, RTT "
                f"{fmt_rtt(st)} ms ({time.monotonic() - t_start:.0f} s)")
        out["best_static"][variant] = pick_best_static(
            {p: v["score"] for p, v in out["summary"][variant].items()},
            {p: v["rtt_p95_ms"] or 1e9 for p, v in out["summary"][variant].items()})
    return out


def report(out: dict) -> str:
    parts = [f"scenario stacks: download (server CUBIC) + upload (phone's stack), 3g link; "
             f"{out['duration_s']:g} s per test, first {out['warmup_s']:g} s skipped; "
             f"{out['rule']} (*)"]
    for variant, S in out["summary"].items():
        pol = list(S)
        rows = [
            ("download [Mbit/s]", [f"{fmt(S[p]['dl_mbps'])} ({fmt_pct(S[p]['dl_fraction'])})"
                                   for p in pol]),
            ("upload [Mbit/s]", [f"{fmt(S[p]['ul_mbps'])} ({fmt_pct(S[p]['ul_fraction'])})"
                                 for p in pol]),
            ("phone RTT p50/p95 [ms]", [f"{fmt_ms(S[p]['rtt_p50_ms'])}/{fmt_ms(S[p]['rtt_p95_ms'])}"
                                        for p in pol]),
        ]
        parts.append(table(f"\nphone {variant}", pol, rows, out["best_static"].get(variant)))
    return "\n".join(parts)
