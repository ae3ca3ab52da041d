"""Experiment `changes`: changing conditions on the 3g link under a download and an upload:
(1) the uplink rate steps 2 -> 0.5 -> 2 Mbit/s, (2) the base RTT 40 -> 240 -> 40 ms,
(3) rsfcd starts under a running upload and a new upload follows.

    sudo /usr/bin/python3 lab/experiments.py changes
"""

from __future__ import annotations

import time
from pathlib import Path

from measure import flow_mbps, fmt, payload_fraction, rtt_stats
from shaping import LINKS

from .bench import Bench
from .common import fmt_ms, fmt_pct, fmt_rtt, pick_best_static, policies_for, table


LOW_RATE_BPS = 500_000    # (1): the uplink rate in the middle third
EXTRA_DELAY_MS = 100.0    # (2): added each way in the middle third


def run(a, log) -> dict:
    """Changing conditions on the 3g link, download + upload: (1) uplink rate 2 -> 0.5 -> 2
    Mbit/s, (2) base RTT 40 -> 240 -> 40 ms, in thirds of the test; (3) an upload older than
    the daemon (rsfcd starts at a third of the test) and a new upload after it."""
    D, W = a.duration or 45.0, a.warmup or 8.0
    link = LINKS["3g"]
    policies = policies_for(a.statics or [32768, 65536], a.extra_policies)
    wd = Path(a.workdir) / "changes"
    t1, t2 = D / 3, 2 * D / 3
    out = {"scenario": "changes", "duration_s": D, "warmup_s": W, "link": link.to_dict(),
           "link_name": "3g", "policies": policies, "steps_s": [t1, t2],
           "rule": "best static = highest mean over the phases of (1) and (2) of "
                   "min(download/capacity, upload/capacity)",
           "tests": {}, "summary": {}}
    for policy in policies:
        out["tests"][policy], out["summary"][policy] = {}, {}
        for case in ("rate", "delay"):
            _step_test(out, policy, case, wd, log)
    scores = {}
    for p, cases in out["summary"].items():
        v = [min(ph["dl_fraction"], ph["ul_fraction"]) for c in cases.values()
             for ph in c["phases"].values()
             if ph["dl_fraction"] is not None and ph["ul_fraction"] is not None]
        scores[p] = sum(v) / len(v) if v else None
    out["scores"] = scores
    out["best_static"] = best = pick_best_static(scores)
    # (3) The daemon starts under a running upload: off, the best static, rsfc.
    for policy in ["off"] + ([best] if best else []) + ["rsfc"]:
        _late_test(out, policy, wd, log)
    return out


def _step_test(out: dict, policy: str, case: str, wd: Path, log) -> None:
    """(1) case "rate" or (2) "delay": the step at a third of the test, back at two thirds;
    per third the goodput against the link's capacity and the phone's RTT."""
    D, W = out["duration_s"], out["warmup_s"]
    t1, t2 = out["steps_s"]
    link = LINKS["3g"]
    eff = payload_fraction(True, "tbf")
    t_start = time.monotonic()
    with Bench(f"changes-{case}", link, policy, workdir=wd, log=log,
               extra_delay_ms=EXTRA_DELAY_MS if case == "delay" else 0) as b:
        b.begin(ping_s=D, linger_s=20)
        b.at(0, b.bulk, "dl", "down", D)
        b.at(0, b.bulk, "ul", "up", D)
        if case == "rate":
            b.at(t1, b.set_uplink_rate, LOW_RATE_BPS)
            b.at(t2, b.set_uplink_rate, link.up.rate_bps)
        else:
            b.at(t1, b.set_extra_delay, True)
            b.at(t2, b.set_extra_delay, False)
        b.run_schedule()
        res = b.finish()
    s = {"phases": {}, "errors": res["errors"]}
    for ph, lo, hi in (("p1", W, t1), ("p2", t1 + 2, t2), ("p3", t2 + 2, D)):
        up_rate = LOW_RATE_BPS if case == "rate" and ph == "p2" else link.up.rate_bps
        dl = flow_mbps(res["flows"].get("dl", {}), lo, hi)
        ul = flow_mbps(res["flows"].get("ul", {}), lo, hi)
        cap_ul, cap_dl = up_rate * eff / 1e6, link.down.rate_bps * eff / 1e6
        st = rtt_stats(res, lo, hi)
        s["phases"][ph] = {"window": [lo, hi], "dl_mbps": dl, "ul_mbps": ul,
                           "cap_dl_mbps": cap_dl, "cap_ul_mbps": cap_ul,
                           "dl_fraction": dl / cap_dl if dl is not None else None,
                           "ul_fraction": ul / cap_ul if ul is not None else None,
                           "rtt_p50_ms": st["p50"], "rtt_p95_ms": st["p95"]}
    out["tests"][policy][case] = res
    out["summary"][policy][case] = s
    log(f"  changes {case:>5} {policy:>14}: " + "; ".join(
        f"{ph} dl {fmt(v['dl_mbps'])} ul {fmt(v['ul_mbps'])} RTT "
        f"{fmt_ms(v['rtt_p50_ms'])}/{fmt_ms(v['rtt_p95_ms'])}"
        for ph, v in s["phases"].items())
        + f" ({time.monotonic() - t_start:.0f} s)")


def _late_test(out: dict, policy: str, wd: Path, log) -> None:
    """(3): an upload runs before rsfcd starts (at a third of the test); a new upload 5 s
    after it. Goodput of both, the phone's RTT before and after, what rsfcd made of each."""
    D, W = out["duration_s"], out["warmup_s"]
    t1 = out["steps_s"][0]
    t_start = time.monotonic()
    with Bench("changes-late", LINKS["3g"], policy, workdir=wd, log=log,
               daemon_at_start=False) as b:
        b.begin(ping_s=D, linger_s=8)
        b.at(0, b.bulk, "old", "up", D)
        b.at(t1, b.start_daemon)
        b.at(t1 + 5, b.bulk, "new", "up", D - t1 - 5)
        b.run_schedule()
        res = b.finish()
    old, new = res["flows"].get("old", {}), res["flows"].get("new", {})
    rew = [v for ls, v in res.get("daemon_metrics_labeled", {}).get(
        "rsfcd_windows_rewritten_total", []) if ls.get("direction") == "to_subscriber"]
    new_port = int(new["local"].rsplit(":", 1)[1]) if new.get("local") else None
    old_port = int(old["local"].rsplit(":", 1)[1]) if old.get("local") else None
    s = {"old_before_mbps": flow_mbps(old, W, t1),
         "old_after_mbps": flow_mbps(old, t1 + 1, t1 + 5),
         "old_with_new_mbps": flow_mbps(old, t1 + 10, D),
         "new_mbps": flow_mbps(new, t1 + 10, D),
         "rtt_before": rtt_stats(res, W, t1), "rtt_after": rtt_stats(res, t1 + 10, D),
         "unregulated_flows": res.get("daemon_metrics", {}).get(
             "rsfcd_flows_unregulated_total"),
         "windows_rewritten_to_phone": sum(rew) if rew else 0,
         "decisions_old": sum(1 for d in res["decisions"] if d[1] == old_port),
         "decisions_new": sum(1 for d in res["decisions"] if d[1] == new_port),
         "errors": res["errors"]}
    out["tests"].setdefault(policy, {})["late"] = res
    out["summary"].setdefault(policy, {})["late"] = s
    log(f"  changes  late {policy:>14}: old {fmt(s['old_before_mbps'])} -> "
        f"{fmt(s['old_after_mbps'])} -> {fmt(s['old_with_new_mbps'])}, new "
        f"{fmt(s['new_mbps'])} Mbit/s, unregulated {s['unregulated_flows']}, decisions "
        f"old/new {s['decisions_old']}/{s['decisions_new']} "
        f"({time.monotonic() - t_start:.0f} s)")


def report(out: dict) -> str:
    S = out["summary"]
    pol = out["policies"]
    t1, t2 = out["steps_s"]
    parts = [f"scenario changes: 3g link (up 2 Mbit/s 1 MiB, down 7.2 Mbit/s 256 KiB, 40 ms), "
             f"download + upload, steps at {t1:g} s and {t2:g} s; {out['rule']} (*)"]
    for case, title in (("rate", "(1) uplink rate 2 -> 0.5 -> 2 Mbit/s"),
                        ("delay", "(2) base RTT 40 -> 240 -> 40 ms")):
        rows = []
        for ph in ("p1", "p2", "p3"):
            any_ph = S[pol[0]][case]["phases"][ph]
            lo, hi = any_ph["window"]
            rows.append((f"{ph} [{lo:g}-{hi:g} s] download [Mbit/s]",
                         [f"{fmt(S[p][case]['phases'][ph]['dl_mbps'])} "
                          f"({fmt_pct(S[p][case]['phases'][ph]['dl_fraction'])})" for p in pol]))
            rows.append((f"  upload [Mbit/s] (cap {any_ph['cap_ul_mbps']:.2f})",
                         [f"{fmt(S[p][case]['phases'][ph]['ul_mbps'])} "
                          f"({fmt_pct(S[p][case]['phases'][ph]['ul_fraction'])})" for p in pol]))
            rows.append(("  phone RTT p50/p95 [ms]",
                         [f"{fmt_ms(S[p][case]['phases'][ph]['rtt_p50_ms'])}/"
                          f"{fmt_ms(S[p][case]['phases'][ph]['rtt_p95_ms'])}" for p in pol]))
        parts.append(table("\n" + title, pol, rows, out.get("best_static")))
    late = [p for p in pol if "late" in S.get(p, {})]
    if late:
        L = {p: S[p]["late"] for p in late}
        rows = [
            ("old upload before daemon [Mbit/s]", [fmt(L[p]["old_before_mbps"]) for p in late]),
            ("  right after it starts", [fmt(L[p]["old_after_mbps"]) for p in late]),
            ("  with the new upload", [fmt(L[p]["old_with_new_mbps"]) for p in late]),
            ("new upload [Mbit/s]", [fmt(L[p]["new_mbps"]) for p in late]),
            ("phone RTT p50/p95 before / after", [f"{fmt_rtt(L[p]['rtt_before'])} / "
                                                  f"{fmt_rtt(L[p]['rtt_after'])}" for p in late]),
            ("flows seen without handshake", [fmt(L[p]["unregulated_flows"], digits=0)
                                              for p in late]),
            ("decision records old / new", [f"{L[p]['decisions_old']}/{L[p]['decisions_new']}"
                                            for p in late]),
        ]
        parts.append(table(f"\n(3) rsfcd starts at {t1:g} s under a running upload; a new "
                           f"upload from {t1 + 5:g} s", late, rows, out.get("best_static")))
    return "\n".join(parts)
