"""The numbers of a lab run, shared by lab/scenarios.py, lab/exps/ and lab/plots.py: percentiles,
goodput per byte of link capacity, a flow's goodput from its tcp_info samples, the phone's
RTT statistics, Jain's fairness index, and how a number is printed. Pure functions (no I/O,
no lab imports).

A flow (lab/exps/bench.py's Bench.finish()) carries `send_samples`, rows of
lab/traffic.py's tcp_sample(): [t, delivered x MSS, bytes_acked, bytes_retrans, ...]; a
test result carries `ping`: {"samples": [[t, rtt_ms], ...], "sent": n, "lost": n}.
"""

from __future__ import annotations

import bisect


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank: the smallest value with at least q of the samples at or below it."""
    if not values:
        return None
    v = sorted(values)
    k = max(0, min(len(v) - 1, int(-(-q * len(v) // 1)) - 1))
    return v[k]


def fmt(v, unit="", digits=2) -> str:
    """`v` with `digits` decimals ("-" for None, never "-0")."""
    if v is None:
        return "-"
    text = f"{v:.{digits}f}"
    if text.startswith("-") and float(text) == 0:  # no "-0"
        text = text[1:]
    return text + unit


def payload_fraction(timestamps: bool, engine: str) -> float:
    """Goodput per byte of link capacity for full-size packets: TBF counts 1514-byte frames,
    linkem (rate or trace) 1500-byte IP packets."""
    hdr = 52 if timestamps else 40
    return (1500 - hdr) / (1514 if engine == "tbf" else 1500)


def _interp(samples: list, t: float, col: int = 1) -> float | None:
    """Value of column `col` at time t (linear between samples; held after the last)."""
    if not samples:
        return None
    if t <= samples[0][0]:
        return float(samples[0][col]) if t >= samples[0][0] - 0.5 else 0.0
    if t >= samples[-1][0]:
        return float(samples[-1][col])
    i = bisect.bisect_left([s[0] for s in samples], t)
    (ta, va), (tb, vb) = (samples[i - 1][0], samples[i - 1][col]), (samples[i][0], samples[i][col])
    return va + (vb - va) * (t - ta) / (tb - ta) if tb > ta else float(vb)


def flow_mbps(flow: dict, a: float, b: float) -> float | None:
    """Goodput (delivered payload, sender's view) between a and b seconds, Mbit/s.

    tcp_info's `delivered` counts segments (column 1 is that times the MSS): right for
    full-sized segments, too high when a small receive window makes the sender cut shorter
    ones (four rsfc-regulated uploads of ~10 kB windows: 9 % above the link's capacity).
    Without a retransmission in [a, b] nothing waits behind a hole, so bytes_acked (column 2)
    is exact and is used; with one (drop-tail losses: `off`, large static windows) the
    segment count is, as it does not stall while the hole is repaired."""
    s = flow.get("send_samples") or []
    if not s or b <= a:
        return None
    ra, rb = _interp(s, a, 3), _interp(s, b, 3)
    col = 2 if ra is not None and rb is not None and rb - ra < 1 else 1
    va, vb = _interp(s, a, col), _interp(s, b, col)
    return (vb - va) * 8 / (b - a) / 1e6


def flow_series(flow: dict, step: float = 0.5) -> list[tuple[float, float]]:
    """[(mid-time, goodput in Mbit/s)] over consecutive windows of `step` seconds."""
    s = flow.get("send_samples") or []
    if len(s) < 2:
        return []
    out = []
    t = s[0][0]
    while t + step <= s[-1][0]:
        out.append((t + step / 2, flow_mbps(flow, t, t + step)))
        t += step
    return out


def rtt_stats(res: dict, a: float, b: float) -> dict:
    """Phone RTT percentiles over the pings sent between a and b (lost ones: whole test)."""
    ping = res.get("ping") or {}
    rtts = [r for t, r in ping.get("samples", []) if a <= t <= b]
    return {"p50": percentile(rtts, 0.5), "p95": percentile(rtts, 0.95),
            "min": min(rtts) if rtts else None, "max": max(rtts) if rtts else None,
            "n": len(rtts),
            "lost": ping.get("lost"), "sent": ping.get("sent")}


def jain(rates: list[float]) -> float | None:
    """Jain's fairness index of `rates` (None if any is missing or all are zero)."""
    if not rates or any(r is None for r in rates) or sum(r * r for r in rates) == 0:
        return None
    return sum(rates) ** 2 / (len(rates) * sum(r * r for r in rates))


def receiver_intervals(report: dict, upload: bool) -> list[tuple[float, float, float]]:
    """[(start_s, end_s, bits_per_second)] as the receiver saw them."""
    src = report
    if upload:
        src = report.get("server_output_json") or {}
    return [(i["sum"]["start"], i["sum"]["end"], i["sum"]["bits_per_second"])
            for i in src.get("intervals", [])]


def mean_rate(intervals, warmup: float) -> float | None:
    """Bytes the receiver got in order from `warmup` to the end of its stream, per second.
    To the end, not to the nominal duration: after a drop-tail loss the receiver sees a gap
    of a full buffer's time and then a burst, so a window cut at a fixed time would count
    the gap but not the burst. The tail (the buffer draining after the sender stopped) runs
    at the link rate."""
    sel = [(e - s, bps) for s, e, bps in intervals if s >= warmup - 1e-6]
    while sel and sel[-1][1] == 0:  # after the last byte (the server waits for TEST_END)
        sel.pop()
    total = sum(d for d, _ in sel)
    if total <= 0:
        return None
    return sum(d * bps for d, bps in sel) / total / 1e6
