"""What the experiments of lab/exps/ share besides the bench: the policies a run compares,
the pick of the best static clamp, and the table they print."""

from __future__ import annotations

from measure import fmt


def policies_for(statics: list[int], extra: list[str] = ()) -> list[str]:
    """off, the static sizes, rsfc, then `extra` (--extra-policies, e.g. rsfc+drwa,
    rsfc[key=value;...])."""
    return ["off"] + [f"static:{s}" for s in statics] + ["rsfc"] + list(extra)


def pick_best_static(scores: dict[str, float | None], tiebreak: dict[str, float] | None = None
                     ) -> str | None:
    """The static policy with the highest score (ties within 1 %: the lower tiebreak)."""
    cands = [(p, s) for p, s in scores.items() if p.startswith("static:") and s is not None]
    if not cands:
        return None
    top = max(s for _, s in cands)
    near = [p for p, s in cands if s >= top - 0.01 * abs(top)]
    if tiebreak:
        near.sort(key=lambda p: tiebreak.get(p, float("inf")))
    else:
        near.sort(key=lambda p: -scores[p])
    return near[0]


def score_cases(out: dict, score) -> None:
    """out["scores"]: per policy the mean of score(case, summary) over its cases (None if
    any case has none); out["best_static"] by pick_best_static."""
    scores = {}
    for p, cases in out["summary"].items():
        v = [score(case, c) for case, c in cases.items()]
        scores[p] = sum(v) / len(v) if v and None not in v else None
    out["scores"] = scores
    out["best_static"] = pick_best_static(scores)


def table(title: str, columns: list[str], rows: list[tuple[str, list[str]]],
          best: str | None = None) -> str:
    """`title`, then one column per policy (the best static marked with *), one line per
    row (label, cells)."""
    heads = [c + ("*" if c == best else "") for c in columns]
    w0 = max(len(r[0]) for r in rows) + 2
    ws = [max(11, len(h) + 2, *(len(r[1][i]) + 2 for r in rows)) for i, h in enumerate(heads)]
    lines = [title, "".ljust(w0) + "".join(h.rjust(w) for h, w in zip(heads, ws))]
    for label, vals in rows:
        lines.append(label.ljust(w0) + "".join(v.rjust(w) for v, w in zip(vals, ws)))
    return "\n".join(lines)


def fmt_pct(v) -> str:
    """A fraction as a whole percentage ("-" for None)."""
    return "-" if v is None else f"{100 * v:.0f}%"


def fmt_ms(v) -> str:
    """Milliseconds, no decimals."""
    return fmt(v, digits=0)


def fmt_rtt(st: dict) -> str:
    """"p50/p95" of measure.rtt_stats()."""
    return f"{fmt_ms(st['p50'])}/{fmt_ms(st['p95'])}"
