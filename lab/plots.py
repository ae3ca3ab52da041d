#!/usr/bin/python3
"""Plots of lab/experiments.py runs (matplotlib, Agg backend, PNG into lab/out/plots/).

Per scenario:
  - time series, one column per policy (off, the best static, rsfc): throughput of every
    flow, the phone's RTT, the window the phone's TCP accepted (snd_wnd from tcp_info) with
    the window rsfcd advertised at each control step (decision log), rsfcd's t_buff and the
    controller state per flow;
  - a summary bar chart across policies.

    /usr/bin/python3 lab/plots.py lab/out/trace-....json [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure import flow_series  # noqa: E402

OUT = Path(__file__).resolve().parent / "out" / "plots"
DPI = 72
STATES = ["startup", "slow", "fast", "monitor"]
COLORS = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown"]
POLICY_COLORS = {"off": "tab:gray", "rsfc": "tab:green", "off+drwa": "tab:red",
                 "rsfc+rsfc": "tab:purple", "shipped": "tab:blue"}

plt.rcParams.update({"font.size": 8, "axes.titlesize": 9, "legend.fontsize": 7,
                     "axes.grid": True, "grid.alpha": 0.3})


def _flow_port(flow: dict) -> tuple[str, int] | None:
    loc = flow.get("local")
    if not loc:
        return None
    addr, _, port = loc.rpartition(":")
    return addr, int(port)


def _events(ax, res: dict) -> None:
    for e in res.get("events", []):
        t = e.get("t")
        w = e["what"]
        if t is None or "starts" in w or "stopped" in w:
            continue
        ax.axvline(t, color="k", lw=0.6, ls=":")


def _common_log_ylim(axs) -> None:
    """Same y range on every axis with data (log scale), plain tick labels."""
    lo, hi = None, None
    for ax in axs:
        for ln in ax.lines:
            if ln.get_gid() != "data":
                continue
            ys = [y for y in ln.get_ydata() if y == y and y > 0]
            if ys:
                lo = min(ys) if lo is None else min(lo, min(ys))
                hi = max(ys) if hi is None else max(hi, max(ys))
    if lo is None:
        return
    for ax in axs:
        ax.set_ylim(lo / 1.5, hi * 1.5)
        ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())


def timeseries(columns: list[tuple[str, dict]], title: str, path: Path, step: float = 0.5) -> Path:
    """columns: [(column title, test result of lab/exps/bench.py's Bench.finish())]."""
    ncol = len(columns)
    fig, axes = plt.subplots(5, ncol, figsize=(4.2 * ncol, 10.5), sharex="col",
                             gridspec_kw={"height_ratios": [3, 2.4, 2.4, 2, 1.3]}, squeeze=False)
    fig.suptitle(title, fontsize=10)
    ymax_tp = 0.0
    web_axes = []
    for c, (ctitle, res) in enumerate(columns):
        ax_tp, ax_rtt, ax_w, ax_tb, ax_st = axes[:, c]
        ax_tp.set_title(ctitle)
        flows = res.get("flows", {})
        ports = {}
        for i, (tag, f) in enumerate(flows.items()):
            col = COLORS[i % len(COLORS)]
            ser = flow_series(f, step)
            if ser:
                ax_tp.plot([t for t, _ in ser], [v for _, v in ser], color=col, lw=1,
                           label=f"{tag} ({f.get('dir')}{', ' + f['phone'] if f.get('phone') not in (None, 'phone') else ''})")
                ymax_tp = max(ymax_tp, max(v for _, v in ser))
            if f.get("dir") == "up":
                s = f.get("send_samples") or []
                ax_w.plot([x[0] for x in s], [x[6] / 1024 for x in s], color=col, lw=0.8,
                          label=f"{tag} snd_wnd", gid="data")
            fp = _flow_port(f)
            if fp:
                ports[fp] = (tag, col)
        web = res.get("web")
        if web:
            loads = web.get("loads", [])
            ax_web = ax_tp.twinx()
            web_axes.append(ax_web)
            for kind, marker in (("single", "o"), ("multi", "s")):
                sel = [x for x in loads if x["page"] == kind]
                ax_web.scatter([x["t"] + x["seconds"] for x in sel], [x["seconds"] for x in sel],
                               marker=marker, s=14, color="k", facecolors="none" if kind == "multi"
                               else "k", label=f"page load ({kind}) [s]")
            ax_web.set_yscale("log")
            ax_web.set_ylabel("page load [s]")
            ax_web.legend(loc="upper right")
        ax_tp.set_ylabel("goodput [Mbit/s]")
        ax_tp.legend(loc="upper left")
        _events(ax_tp, res)
        ping = (res.get("ping") or {}).get("samples", [])
        if ping:
            ax_rtt.plot([t for t, _ in ping], [r for _, r in ping], ".", ms=2, color="tab:purple",
                        gid="data")
        ax_rtt.set_yscale("log")
        ax_rtt.set_ylabel("phone RTT [ms]")
        _events(ax_rtt, res)
        dec = res.get("decisions", [])
        by_flow: dict = {}
        for d in dec:
            by_flow.setdefault((d[8], d[1]), []).append(d)
        # Bulk flows in their colours; short flows (page loads) in grey, one legend entry.
        other_labelled = False
        for key in sorted(by_flow, key=lambda k: k not in ports):
            rows = by_flow[key]
            known = key in ports
            tag, col = ports.get(key, ("other flows", "0.6"))
            label = tag if known or not other_labelled else None
            other_labelled = other_labelled or not known
            ax_w.plot([d[0] for d in rows], [d[4] / 1024 if d[4] else float("nan") for d in rows],
                      ".", ms=1.5, color=col, gid="data",
                      label=f"{label} rsfc window" if label else None)
            ax_tb.plot([d[0] for d in rows], [d[3] if d[3] is not None else float("nan")
                                              for d in rows], lw=0.8, color=col, label=label)
            ys = []
            for d in rows:
                if d[2] not in STATES:
                    STATES.append(d[2])
                ys.append(STATES.index(d[2]))
            ax_st.plot([d[0] for d in rows], ys, drawstyle="steps-post", lw=1, color=col,
                       label=label)
        ax_w.set_ylabel("window [KiB]")
        ax_w.set_yscale("log")
        if ax_w.get_legend_handles_labels()[0]:
            ax_w.legend(loc="upper left", markerscale=4)
        ax_tb.set_ylabel("rsfc t_buff [ms]")
        ax_st.set_yticks(range(len(STATES)))
        ax_st.set_yticklabels(STATES)
        ax_st.set_ylim(-0.5, len(STATES) - 0.5)
        ax_st.set_xlabel("time [s]")
        if not dec:
            for ax in (ax_tb, ax_st):
                ax.text(0.5, 0.5, f"no decision log ({res.get('policy')})", ha="center",
                        va="center", transform=ax.transAxes, color="gray")
        else:
            ax_tb.set_yscale("symlog", linthresh=10)
    for c in range(ncol):
        axes[0, c].set_ylim(0, ymax_tp * 1.1 + 0.1)
    if web_axes:
        ys = [y for ax in web_axes for coll in ax.collections for _, y in coll.get_offsets()]
        for ax in web_axes:
            ax.set_ylim(min(ys) / 1.5, max(ys) * 1.5)
            ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
            ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    _common_log_ylim(axes[1, :])
    _common_log_ylim(axes[2, :])
    tb_max = max((ax.get_ylim()[1] for ax in axes[3, :] if ax.lines), default=None)
    for ax in axes[3, :]:
        if ax.lines:
            ax.set_ylim(0, tb_max)
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    return _save(fig, path)


def _save(fig, path: Path) -> Path:
    """Writes the figure as PNG and frees it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def bars(groups: list[str], series: dict[str, list[float | None]], ylabel: str, ax,
         title: str = "", fmt: str = "{:.2f}", log: bool = False) -> None:
    """Grouped bars: one group per entry of `groups`, one bar per key of `series`."""
    n = len(series)
    width = 0.8 / max(1, n)
    for i, (name, vals) in enumerate(series.items()):
        xs = [g + (i - (n - 1) / 2) * width for g in range(len(groups))]
        color = POLICY_COLORS.get(name.split(" ")[0], COLORS[(i + 1) % len(COLORS)])
        if "static" in name:
            color = "tab:orange"
        elif name.startswith("no upload"):
            color = "tab:blue"
        hs = [v if v is not None else 0 for v in vals]
        rects = ax.bar(xs, hs, width * 0.95, label=name, color=color)
        for r, v in zip(rects, vals):
            ax.annotate("-" if v is None else fmt.format(v), (r.get_x() + r.get_width() / 2,
                                                               r.get_height()),
                        ha="center", va="bottom", fontsize=6, rotation=90 if n > 3 else 0)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups)
    ax.set_ylabel(ylabel)
    if log:
        ax.set_yscale("log")
        pos = [v for vals in series.values() for v in vals if v]
        if pos:
            ax.set_ylim(min(pos) / 2, max(pos) * 2)
        ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    if title:
        ax.set_title(title)


def _fig_legend(fig, ax, title: str | None = None) -> None:
    """Legend (and title) above the panels, so that it never hides a bar."""
    handles, labels = ax.get_legend_handles_labels()
    if ax.get_legend():
        ax.get_legend().remove()
    if title:
        fig.suptitle(title, y=0.99)
    fig.legend(handles, labels, loc="upper center", ncol=len(labels),
               bbox_to_anchor=(0.5, 0.93 if title else 0.99))
    fig.tight_layout(rect=(0, 0, 1, 0.86 if title else 0.92))


def _trio(policies: list[str], best: str | None) -> list[str]:
    return ["off"] + ([best] if best else []) + ["rsfc"]


def _label(p: str, best: str | None) -> str:
    return f"{p} (best static)" if p == best else p


# ---- per scenario ------------------------------------------------------------------------
def plot_trace(out: dict, d: Path) -> list[Path]:
    paths = []
    names = list(out["traces"])
    for name in names:
        e = out["traces"][name]
        cols = [(_label(p, e["best_static"]), e["tests"][p]) for p in
                _trio(out["policies"], e["best_static"]) if p in e["tests"]]
        paths.append(timeseries(cols, f"trace {name} (from {e['offset_s']:g} s): download + "
                                f"upload", d / f"trace-{name}-timeseries.png"))
    fig, axs = plt.subplots(1, 3, figsize=(13, 4))
    short = [n.split("-")[1] for n in names]
    pols = {}
    for n in names:
        e = out["traces"][n]
        for p in _trio(out["policies"], e["best_static"]):
            key = "best static" if p.startswith("static") else p
            pols.setdefault(key, {})[n] = (p, e["summary"].get(p, {}))
    def col(key, field, scale=1.0):
        return [None if pols[key].get(n, (0, {}))[1].get(field) is None
                else pols[key][n][1][field] * scale for n in names]
    for ax, field, ylabel, scale, fmt, log in (
            (axs[0], "dl_fraction", "download, % of trace capacity", 100, "{:.0f}", False),
            (axs[1], "ul_fraction", "upload, % of trace capacity", 100, "{:.0f}", False),
            (axs[2], "rtt_p95_ms", "phone RTT p95 [ms]", 1, "{:.0f}", True)):
        bars(short, {k: col(k, field, scale) for k in pols}, ylabel, ax, fmt=fmt, log=log)
    _fig_legend(fig, axs[0], "trace: download + upload over the shipped cellular traces "
                "(best static per trace: " + ", ".join(
                    f"{s} {out['traces'][n]['best_static']}" for s, n in zip(short, names)) + ")")
    return paths + [_save(fig, d / "trace-summary.png")]


def plot_web(out: dict, d: Path) -> list[Path]:
    best = out.get("best_static")
    trio = _trio(out["policies"], best)
    cols = [(_label(p, best), out["tests"][p]) for p in trio]
    paths = [timeseries(cols, "web: page loads (markers: completion time) while the phone "
                        "uploads, 3g link", d / "web-timeseries.png")]
    fig, axs = plt.subplots(1, 3, figsize=(13, 3.6))
    S = out["summary"]
    pols = ["alone"] + trio
    names = ["no upload" if p == "alone" else _label(p, best) for p in pols]
    for ax, page, title in ((axs[0], "single", "one 320 KB object"),
                            (axs[1], "multi", "30 objects over 6 connections")):
        bars(["p50", "p90"], {n: [S[p][page]["p50"], S[p][page]["p90"]]
                              for n, p in zip(names, pols)},
             "page load time [s]", ax, title=title, fmt="{:.1f}", log=True)
    bars(["upload [Mbit/s]"], {n: [S[p]["ul_mbps"]] for n, p in zip(names, pols)}, "Mbit/s",
         axs[2], title="upload goodput during the loads")
    _fig_legend(fig, axs[0])
    return paths + [_save(fig, d / "web-summary.png")]


def plot_fairness(out: dict, d: Path) -> list[Path]:
    best = out.get("best_static")
    trio = _trio(out["policies"], best)
    paths = []
    for case in ("one-phone", "two-phones"):
        cols = [(_label(p, best), out["tests"][p][case]) for p in trio]
        paths.append(timeseries(cols, f"fairness: two uploads, {case.replace('-', ' ')}, "
                                f"3g uplink", d / f"fairness-{case}-timeseries.png"))
    return paths + [_jain_summary(out, trio, ["one-phone", "two-phones"],
                                  ("efficiency", "efficiency (R1+R2)/R_single"),
                                  d / "fairness-summary.png")]


def _jain_summary(out: dict, trio: list, cases: list, middle: tuple, path: Path) -> Path:
    """Three bar panels per case: Jain index, `middle` (field, label), phone RTT p95."""
    best = out.get("best_static")
    fig, axs = plt.subplots(1, 3, figsize=(13, 3.6))
    S = out["summary"]
    for ax, field, ylabel in ((axs[0], "jain", "Jain index"), (axs[1], *middle),
                              (axs[2], "rtt_p95_ms", "phone RTT p95 [ms]")):
        bars(cases, {_label(p, best): [S[p][c][field] for c in cases] for p in trio}, ylabel, ax,
             fmt="{:.2f}" if field != "rtt_p95_ms" else "{:.0f}", log=field == "rtt_p95_ms")
    axs[0].set_ylim(0, 1.15)
    _fig_legend(fig, axs[0])
    return _save(fig, path)


def plot_changes(out: dict, d: Path) -> list[Path]:
    best = out.get("best_static")
    trio = _trio(out["policies"], best)
    paths = []
    for case, title in (("rate", "uplink rate 2 -> 0.5 -> 2 Mbit/s"),
                        ("delay", "base RTT 40 -> 240 -> 40 ms"),
                        ("late", "rsfcd starts under a running upload, new upload 5 s later")):
        cols = [(_label(p, best), out["tests"][p][case]) for p in trio
                if case in out["tests"].get(p, {})]
        paths.append(timeseries(cols, f"changes: {title} (3g link)",
                                d / f"changes-{case}-timeseries.png"))
    fig, axs = plt.subplots(2, 3, figsize=(13, 6.3))
    S = out["summary"]
    names = {"rate": ["2 Mbit/s", "0.5 Mbit/s", "2 Mbit/s again"],
             "delay": ["40 ms", "240 ms", "40 ms again"]}
    for r, case in enumerate(("rate", "delay")):
        phases = ["p1", "p2", "p3"]
        for ax, field, ylabel, scale in ((axs[r, 0], "dl_fraction", "download, % of capacity", 100),
                                         (axs[r, 1], "ul_fraction", "upload, % of capacity", 100),
                                         (axs[r, 2], "rtt_p95_ms", "phone RTT p95 [ms]", 1)):
            bars(names[case], {_label(p, best): [
                None if S[p][case]["phases"][ph][field] is None
                else S[p][case]["phases"][ph][field] * scale for ph in phases] for p in trio},
                ylabel, ax, title="uplink rate step" if case == "rate" else "base RTT step",
                fmt="{:.0f}", log=field == "rtt_p95_ms")
    handles, labels = axs[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=len(labels))
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    return paths + [_save(fig, d / "changes-summary.png")]


def plot_stacks(out: dict, d: Path) -> list[Path]:
    paths = []
    variants = list(out["summary"])
    for v in variants:
        best = out["best_static"].get(v)
        cols = [(_label(p, best), out["tests"][v][p]) for p in _trio(out["policies"], best)]
        paths.append(timeseries(cols, f"stacks: phone {v}, download + upload, 3g link",
                                d / f"stacks-{v}-timeseries.png"))
    fig, axs = plt.subplots(1, 3, figsize=(13, 4))
    S = out["summary"]
    keys = ["off", "best static", "rsfc"]

    def val(v, key, field, scale):
        p = out["best_static"].get(v) if key == "best static" else key
        x = S[v].get(p, {}).get(field) if p else None
        return None if x is None else x * scale

    for ax, field, ylabel, scale, log in ((axs[0], "dl_fraction", "download, % of capacity", 100, False),
                                          (axs[1], "ul_fraction", "upload, % of capacity", 100, False),
                                          (axs[2], "rtt_p95_ms", "phone RTT p95 [ms]", 1, True)):
        bars(variants, {k: [val(v, k, field, scale) for v in variants] for k in keys}, ylabel, ax,
             fmt="{:.0f}", log=log)
    _fig_legend(fig, axs[0], "stacks: download + upload, 3g link (best static per stack: " +
                ", ".join(f"{v} {out['best_static'].get(v)}" for v in variants) + ")")
    return paths + [_save(fig, d / "stacks-summary.png")]


def plot_uploads(out: dict, d: Path) -> list[Path]:
    best = out.get("best_static")
    trio = _trio(out["policies"], best)
    paths = []
    for case in ("alone", "download"):
        cols = [(_label(p, best), out["tests"][p][case]) for p in trio]
        paths.append(timeseries(cols, f"uploads: {out['uploads']} uploads from one phone, "
                                f"{'with a download' if case == 'download' else 'alone'}, 3g",
                                d / f"uploads-{case}-timeseries.png"))
    return paths + [_jain_summary(out, trio, ["alone", "download"],
                                  ("upload_total_mbps", "uploads together [Mbit/s]"),
                                  d / "uploads-summary.png")]


def _p95_size(p95_ms: float | None) -> float:
    """Marker area for a p95: 10 at 10 ms (and below), +100 per decade."""
    return 10 + 100 * max(0.0, math.log10(max(p95_ms or 10.0, 10.0) / 10))


def plot_suite(out: dict, d: Path) -> list[Path]:
    """One figure: per cell a panel of download % against upload % (medians, % of the
    unregulated rates alone), one marker per policy, its area the phone's p95 under load;
    the targets' throughput corner shaded (90/90, 2g 80/80, traces 85/80)."""
    S, pols = out["summary"], out["policies"]
    cells = list(S)
    lab = out.get("labels") or {p: p for p in pols}  # the suite table's column heads
    ncol = min(5, max(1, len(cells)))
    nrow = -(-len(cells) // ncol)
    fig, axs = plt.subplots(nrow, ncol, figsize=(max(9.0, 3.2 * ncol), 3.0 * nrow + 1.2),
                            squeeze=False)
    # A merged suite's policy (lab/merge_suites.py) is POLICY@COMMIT: the policy's colour.
    colors = {p: POLICY_COLORS.get(p.split("@")[0], COLORS[i % len(COLORS)])
              for i, p in enumerate(pols)}
    statics = [p for p in pols if p.startswith("static")]
    for i, p in enumerate(statics):  # the clamps: one hue, darker for larger windows
        colors[p] = plt.cm.Oranges(0.35 + 0.6 * i / max(1, len(statics) - 1))
    top = 5 + max([100 * (S[c][p][f] or {}).get("median", 0) for c in cells for p in pols
                   for f in ("dl_pct", "ul_pct") if S[c][p][f]] + [100])
    for ax, cell in zip(axs.flat, cells):
        kind = out["cells"][cell]["kind"]
        lo_dl, lo_ul = {"2g": (80, 80), "trace": (85, 80)}.get(kind, (90, 90))
        ax.axvspan(lo_dl, top, ymin=lo_ul / top, color="tab:green", alpha=0.08, lw=0)
        for p in pols:
            s = S[cell][p]
            if s["dl_pct"] is None or s["ul_pct"] is None:
                continue
            ax.scatter(100 * s["dl_pct"]["median"], 100 * s["ul_pct"]["median"],
                       s=_p95_size((s["load_p95"] or {}).get("median")), color=colors[p],
                       edgecolor="k", lw=0.4, alpha=0.85, label=lab[p], zorder=3)
        ax.set_xlim(0, top)
        ax.set_ylim(0, top)
        ax.set_title(cell)
        ax.set_xlabel("download w/ upload [% alone]")
        ax.set_ylabel("upload w/ download [% alone]")
    for ax in list(axs.flat)[len(cells):]:
        ax.axis("off")
    handles = [plt.scatter([], [], s=60, color=colors[p], edgecolor="k", lw=0.4, label=lab[p])
               for p in pols]
    handles += [plt.scatter([], [], s=_p95_size(v), color="w", edgecolor="k", lw=0.6,
                            label=f"p95 {v / 1000:g} s") for v in (100, 1000, 10000)]
    h = fig.get_figheight()
    fig.suptitle(f"suite: download against upload, % of the unregulated rates alone (medians "
                 f"of {out['runs']} run(s))\nmarker area = the phone's RTT p95 under load; "
                 f"shaded = the targets' throughput corner", y=1 - 0.05 / h, va="top")
    fig.legend(handles=handles, loc="upper center", ncol=min(len(handles), 11),
               bbox_to_anchor=(0.5, 1 - 0.45 / h), frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.7 / h))
    return [_save(fig, d / "suite-summary.png")]


PLOTTERS = {"trace": plot_trace, "web": plot_web, "fairness": plot_fairness,
            "changes": plot_changes, "stacks": plot_stacks, "uploads": plot_uploads,
            "suite": plot_suite}


def plot_run(json_path: Path, out_dir: Path = OUT) -> list[Path]:
    out = json.loads(Path(json_path).read_text())
    return PLOTTERS[out["scenario"]](out, out_dir)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("json", nargs="+")
    ap.add_argument("--out", default=str(OUT))
    a = ap.parse_args(argv)
    for j in a.json:
        for p in plot_run(Path(j), Path(a.out)):
            print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
