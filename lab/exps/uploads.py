"""Experiment `uploads`: several uploads from one phone (a photo backup's parallel
connections) into the same uplink buffer, (a) alone, (b) with a download; what
rsfc.per_subscriber is for.

    sudo /usr/bin/python3 lab/experiments.py uploads
    /usr/bin/python3 lab/experiments.py --show lab/out/uploads-....json --recompute
"""

from __future__ import annotations

import time
from pathlib import Path

from measure import flow_mbps, fmt, jain, rtt_stats
from shaping import LINKS

from .bench import Bench
from .common import fmt_ms, policies_for, score_cases, table


N_UPLOADS = 4


def run(a, log) -> dict:
    """Several uploads from one phone (a photo backup's parallel connections), started 0.5 s
    apart into the same uplink buffer: (a) alone, (b) with a download. Per-subscriber state
    (rsfc.per_subscriber) is what this measures."""
    D, W = a.duration or 40.0, a.warmup or 10.0
    link = LINKS["3g"]
    policies = policies_for(a.statics or [32768, 65536], a.extra_policies)
    wd = Path(a.workdir) / "uploads"
    out = {"scenario": "uploads", "duration_s": D, "warmup_s": W, "link": link.to_dict(),
           "link_name": "3g", "policies": policies, "uploads": N_UPLOADS,
           "rule": "best static = highest mean over (a) and (b) of Jain index x "
                   "min(uploads/R_single, download/D_alone (b only))",
           "tests": {}, "summary": {}}
    base = {}
    for tag, direction in (("ul", "up"), ("dl", "down")):
        t_start = time.monotonic()
        with Bench(f"uploads-single-{tag}", link, "off", workdir=wd, log=log) as b:
            b.begin(ping_s=D, linger_s=8)
            b.at(0, b.bulk, tag, direction, D)
            b.run_schedule()
            res = b.finish()
        base[tag] = flow_mbps(res["flows"][tag], W, D)
        out["tests"][f"single-{tag}"] = res
        log(f"  uploads single {direction}load (off): {fmt(base[tag])} Mbit/s "
            f"({time.monotonic() - t_start:.0f} s)")
    for policy in policies:
        out["tests"][policy] = {}
        for case in ("alone", "download"):
            t_start = time.monotonic()
            with Bench(f"uploads-{case}", link, policy, workdir=wd, log=log) as b:
                b.begin(ping_s=D, linger_s=8)
                if case == "download":
                    b.at(0, b.bulk, "dl", "down", D)
                for i in range(N_UPLOADS):
                    b.at(0.5 * i, b.bulk, f"ul{i + 1}", "up", D - 0.5 * i)
                b.run_schedule()
                res = b.finish()
            out["tests"][policy][case] = res
            summarize(out)
            s = out["summary"][policy][case]
            log(f"  uploads {case:>8} {policy:>14}: uploads {fmt(s['upload_total_mbps'])} "
                f"Mbit/s, Jain {fmt(s['jain'], digits=3)}, download {fmt(s['download_mbps'])}, "
                f"RTT {fmt_ms(s['rtt_p50_ms'])}/{fmt_ms(s['rtt_p95_ms'])} ms "
                f"({time.monotonic() - t_start:.0f} s)")
    return out


def summarize(out: dict) -> None:
    """out["summary"], out["scores"], out["best_static"] from out["tests"] (--recompute)."""
    W, D, n = out["warmup_s"], out["duration_s"], out["uploads"]
    base = {tag: flow_mbps(out["tests"][f"single-{tag}"]["flows"][tag], W, D)
            for tag in ("ul", "dl")}
    out["single_upload_mbps"], out["download_alone_mbps"] = base["ul"], base["dl"]
    out["summary"] = {}
    for policy, cases in out["tests"].items():
        if policy.startswith("single-"):
            continue
        out["summary"][policy] = {}
        for case, res in cases.items():
            rates = [flow_mbps(res["flows"].get(f"ul{i + 1}", {}), W, D) for i in range(n)]
            total = sum(rates) if all(r is not None for r in rates) else None
            dl = flow_mbps(res["flows"].get("dl", {}), W, D) if case == "download" else None
            st = rtt_stats(res, W, D)
            out["summary"][policy][case] = {
                "upload_mbps": rates, "upload_total_mbps": total, "jain": jain(rates),
                "download_mbps": dl, "rtt_p50_ms": st["p50"], "rtt_p95_ms": st["p95"],
                "errors": res["errors"]}

    def score(case: str, c: dict) -> float | None:
        if c["jain"] is None or c["upload_total_mbps"] is None or not base["ul"]:
            return None
        share = c["upload_total_mbps"] / base["ul"]
        if case == "download":
            if c["download_mbps"] is None or not base["dl"]:
                return None
            share = min(share, c["download_mbps"] / base["dl"])
        return c["jain"] * share

    score_cases(out, score)


def report(out: dict) -> str:
    S = out["summary"]
    pol = out["policies"]
    rows = []
    for case, label in (("alone", "(a) uploads alone"), ("download", "(b) with a download")):
        rows.append((f"{label}: sum [Mbit/s]",
                     [fmt(S[p][case]["upload_total_mbps"]) for p in pol]))
        rows.append(("  each [Mbit/s]", ["/".join(fmt(r) for r in S[p][case]["upload_mbps"])
                                         for p in pol]))
        rows.append(("  Jain index", [fmt(S[p][case]["jain"], digits=3) for p in pol]))
        if case == "download":
            rows.append(("  download [Mbit/s]", [fmt(S[p][case]["download_mbps"]) for p in pol]))
        rows.append(("  phone RTT p50/p95 [ms]",
                     [f"{fmt_ms(S[p][case]['rtt_p50_ms'])}/{fmt_ms(S[p][case]['rtt_p95_ms'])}"
                      for p in pol]))
    return table(f"scenario uploads: {out['uploads']} uploads from one phone, 0.5 s apart, "
                 f"3g link; window {out['warmup_s']:g}-{out['duration_s']:g} s; one upload "
                 f"alone {fmt(out['single_upload_mbps'])} Mbit/s, download alone "
                 f"{fmt(out['download_alone_mbps'])} Mbit/s; {out['rule']} (*)", pol, rows,
                 out.get("best_static"))
