"""Experiment `suite`: issue 16's suite and its score. Cells: the constant links 3g, lte,
3g-nots (3g, a phone without TCP timestamps) and 2g (lab/shaping.py's LINKS, engine tbf),
and the three capacity traces of lab/traces at three start offsets each (engine linkem).
Per cell and run: the unregulated baselines (`off`: the download alone, the upload alone),
then per policy the download alone and the download with a concurrent upload. The same
measurement window [warmup, duration] for every test; N runs per cell, median and spread.

    sudo /usr/bin/python3 lab/experiments.py suite                  # hours: see the estimate
    sudo /usr/bin/python3 lab/experiments.py suite --cells 3g,2g --policies off,static2:65536 \\
        --runs 1 --duration 30
    sudo /usr/bin/python3 lab/experiments.py suite --resume         # skip the tests done
    /usr/bin/python3 lab/experiments.py --show lab/out/suite-....json
    /usr/bin/python3 lab/experiments.py --show /tmp/rsfc-lab4/suite/results.jsonl  # so far

Every test appends one line to WORKDIR/suite/results.jsonl (its numbers, the policy's
rsfcd configuration, the commit); --resume skips the tests with a line of the same cell,
run, policy, test, window and configuration (without errors), so an interrupted suite goes
on where it stopped. The raw result of each test (every sample) is kept gzipped in its
Bench directory. Scores (summarize): the issue's targets per cell on the medians, the
suite's worst cell by min(download %, upload %) per policy, and per cell the phone's p95
under load against the best static clamp there.
"""

from __future__ import annotations

import gzip
import json
import math
import statistics
import time
from dataclasses import dataclass, replace
from pathlib import Path

from measure import flow_mbps, fmt, rtt_stats
from policies import policy_config
from shaping import LINKS, Direction, LinkSpec, TraceFile, trace_path

from .bench import Bench
from .common import fmt_ms, fmt_pct, table
from .trace import representative_offset

STATICS = [32768, 65536, 131072, 262144, 393216]  # both knobs, one value each
CONSTANT_CELLS = {"3g": ("3g", True), "lte": ("lte", True), "3g-nots": ("3g", False),
                  "2g": ("2g", True)}  # cell -> (link of shaping.LINKS, phone timestamps)
TRACES = {"lte-short": "Verizon-LTE-short", "umts": "TMobile-UMTS-driving",
          "evdo": "Verizon-EVDO-driving"}  # cell prefix -> lab/traces name
TRACE_UP_BUF, TRACE_DOWN_BUF, TRACE_RTT_MS = 1_000_000, 512_000, 50.0  # as exps/trace.py
OFFSET_STEP_MS = 10_000
OFFSET_RULE = ("trace offsets on a 10 s grid: the window whose capacity (both ways) is closest "
               "to the trace's mean (exps/trace.py's representative_offset), then the lower "
               "and the upper quartile of the windows ranked by min(up, down capacity / its "
               "mean) ('poor', 'rich'; the nearest rank whose measured window does not "
               "overlap those picked before)")
BEST_STATIC_RULE = ("best static per cell = the static clamp with the highest min(download %, "
                    "upload %) (medians); within 1 point of it, the lowest p95 under load")
KINDS = ("dl", "ul", "both")  # download alone, upload alone (baseline: off only), both
DEFAULT_DURATION_S, DEFAULT_WARMUP_S = 40.0, 10.0
SETUP_S = 8.0  # per test besides the duration: lab up/down, daemon, server (estimate)


def default_policies(statics: list[int] | None = None, extra: list[str] = ()) -> list[str]:
    """off, the static clamps on both knobs, DRWA on the downlink knob, the shipped
    configuration, then `extra`."""
    return (["off"] + [f"static2:{s}" for s in statics or STATICS] + ["off+drwa", "shipped"]
            + list(extra))


def kinds_for(policy: str) -> tuple[str, ...]:
    """The tests of a policy: the upload alone only for off (the unregulated baseline)."""
    return KINDS if policy == "off" else ("dl", "both")


# ---- cells ---------------------------------------------------------------------------
@dataclass
class Cell:
    """One link of the suite: a named constant link or a trace from an offset."""
    name: str
    kind: str                       # "constant" | "2g" | "trace"
    link_name: str | None = None    # shaping.LINKS key (constant, 2g)
    timestamps: bool = True
    trace: str | None = None        # lab/traces name (trace)
    offset_ms: int = 0
    window: str = ""                # trace: "mean", "poor" or "rich"
    own: LinkSpec | None = None     # a constant link of one's own (link_cell)
    swing: Swing | None = None      # a link whose downlink swings (swing_cell; kind "trace")

    @property
    def engine(self) -> str:
        return "linkem" if self.kind == "trace" else "tbf"

    def spec(self, up: str | None = None, down: str | None = None) -> LinkSpec:
        """The link; a trace cell's with the rotated trace files `up` and `down`."""
        if self.own is not None:
            return self.own
        if self.swing is not None:
            return self.swing.spec(down)
        if self.kind != "trace":
            return LINKS[self.link_name]
        return LinkSpec(up=Direction(buffer_bytes=TRACE_UP_BUF, delay_ms=TRACE_RTT_MS / 2,
                                     trace=up),
                        down=Direction(buffer_bytes=TRACE_DOWN_BUF, delay_ms=TRACE_RTT_MS / 2,
                                       trace=down))

    def link(self, tracedir: Path) -> LinkSpec:
        """The link to run; a trace cell writes its rotated traces into `tracedir`."""
        if self.kind != "trace":
            return self.spec()
        tracedir.mkdir(parents=True, exist_ok=True)
        if self.swing is not None:
            return self.spec(down=str(self.swing.down_trace().write(
                tracedir / f"{self.swing.file_name()}.down")))
        files = [TraceFile.load(trace_path(self.trace, d)).rotated(self.offset_ms).write(
            tracedir / f"{self.trace}@{self.offset_ms}.{d}") for d in ("up", "down")]
        return self.spec(str(files[0]), str(files[1]))

    def mean_rates_bps(self) -> tuple[float, float]:
        """(up, down): the link's rates, a trace's means."""
        if self.kind != "trace":
            link = self.spec()
            return link.up.rate_bps, link.down.rate_bps
        if self.swing is not None:
            return self.swing.up_bps, self.swing.down_trace().mean_mbps() * 1e6
        return tuple(TraceFile.load(trace_path(self.trace, d)).mean_mbps() * 1e6
                     for d in ("up", "down"))

    def linger_s(self) -> float:
        """How long the pinger waits for late replies: the base RTT and both buffers full
        (at the mean rates), plus 1 s; 5 .. 25 s."""
        link, (up, down) = self.spec(), self.mean_rates_bps()
        worst = link.base_rtt_ms / 1000 + link.up.buffer_s(up) + link.down.buffer_s(down) + 1
        return round(min(25.0, max(5.0, worst)), 1)

    def describe(self) -> dict:
        link = self.spec()
        d = {"kind": self.kind, "engine": self.engine, "timestamps": self.timestamps,
             "base_rtt_ms": link.base_rtt_ms, "link": link.to_dict(), "linger_s": self.linger_s()}
        if self.swing is not None:
            d |= {"swing": {"down_bps": self.swing.down_bps, "factor": self.swing.factor,
                            "period_ms": self.swing.period_ms}}
        elif self.kind == "trace":
            d |= {"trace": self.trace, "offset_s": self.offset_ms / 1000, "window": self.window}
        else:
            d["link_name"] = self.link_name or self.name
        return d


def trace_offsets(up: TraceFile, down: TraceFile, duration_s: float, warmup_s: float
                  ) -> list[tuple[str, int]]:
    """[(window, offset_ms)] by OFFSET_RULE: "mean", "poor", "rich"."""
    span = min(up.period_ms, down.period_ms) - duration_s * 1000
    cands = list(range(0, max(1, int(span)), OFFSET_STEP_MS))

    def poorer(x):
        a, b = x + warmup_s * 1000, x + duration_s * 1000
        return min(up.mbps(a, b) / up.mean_mbps(), down.mbps(a, b) / down.mean_mbps())
    ranked = sorted(cands, key=lambda x: (poorer(x), x))
    picked = [("mean", representative_offset(up, down, duration_s, warmup_s))]
    gap = (duration_s - warmup_s) * 1000
    for window, q in (("poor", 0.25), ("rich", 0.75)):
        at = round(q * (len(ranked) - 1))
        order = sorted(range(len(ranked)), key=lambda i: (abs(i - at), i))
        free = [ranked[i] for i in order if all(abs(ranked[i] - x) >= gap for _, x in picked)]
        spare = [ranked[i] for i in order if all(ranked[i] != x for _, x in picked)]
        if free or spare:
            picked.append((window, (free or spare)[0]))
    return picked


def all_cells(duration_s: float, warmup_s: float) -> list[Cell]:
    cells = [Cell(name, "2g" if name == "2g" else "constant", link, ts)
             for name, (link, ts) in CONSTANT_CELLS.items()]
    for short, name in TRACES.items():
        up, down = TraceFile.load(trace_path(name, "up")), TraceFile.load(trace_path(name, "down"))
        for window, off in trace_offsets(up, down, duration_s, warmup_s):
            cells.append(Cell(f"{short}@{off // 1000}s", "trace", trace=name, offset_ms=off,
                              window=window))
    return cells


LINK_CELL = "link:UP_KBPS:DOWN_KBPS:RTT_MS[:UP_KB:DOWN_KB]"


def _link_fields(item: str, counts: tuple[int, int]) -> tuple[list[float], int, int] | None:
    """The numbers of a `link:` or `swing:` item (rates in kbit/s first, the two buffers in KB
    last when given): (fields, up_buffer, down_buffer), each buffer given or by default 4 s of
    its direction's rate and at least 125 KB (deep, as a cellular link's); None unless there
    are counts[0] or counts[1] (with the buffers) fields, all positive and finite."""
    try:
        v = [float(x) for x in item.split(":")[1:]]
    except ValueError:
        return None
    if len(v) not in counts or not all(math.isfinite(x) and x > 0 for x in v):
        return None

    def buffer(given: int, kbps: float) -> int:
        bps = round(kbps * 1000)
        return round(v[given] * 1000) if len(v) == counts[1] else max(125_000, bps // 8 * 4)
    return v, buffer(counts[0], v[0]), buffer(counts[0] + 1, v[1])


def link_cell(item: str) -> Cell:
    """A constant link of one's own, as rsfc-simsuite reads it (LINK_CELL): rates in kbit/s,
    the base round trip in ms (split evenly, half each way), the drop-tail buffers in KB of
    1000 bytes, by default 4 s of each direction's rate and at least 125 KB (deep, as a
    cellular link's). The phone sends timestamps; the constant links' targets apply. The
    cell's name is the item. ValueError for a bad one."""
    parsed = _link_fields(item, (3, 5))
    if parsed is None:
        raise ValueError(f"bad link cell {item!r}: {LINK_CELL}, every field a positive number")
    v, up_buf, down_buf = parsed
    own = LinkSpec.symmetric_rtt(round(v[0] * 1000), up_buf, round(v[1] * 1000), down_buf, v[2])
    return Cell(item, "constant", own=own)


SWING_CELL = "swing:UP_KBPS:DOWN_KBPS:RTT_MS:FACTOR:PERIOD_MS[:UP_KB:DOWN_KB]"


@dataclass(frozen=True)
class Swing:
    """A link whose downlink serves at its rate for PERIOD_MS, then at its rate / FACTOR for
    PERIOD_MS, and again (rsfc-simsuite's --down-swing, lab/EXPERIMENTS.md Q42): a variable
    link with nothing else of a trace's. The uplink is constant. Played by rsfc-linkem from a
    generated trace of the downlink (1500-byte delivery opportunities at 1 ms resolution)."""
    up_bps: int
    down_bps: int
    rtt_ms: float
    factor: float
    period_ms: int
    up_buffer: int
    down_buffer: int

    def down_trace(self) -> TraceFile:
        """Two periods, fast then slow; the opportunities of each millisecond are those the
        rate's running total reaches in it, so every period carries its rate exactly (to one
        packet), and the trace's last offset (its period) is 2 PERIOD_MS."""
        offsets, total = [], 0.0
        for t in range(1, 2 * self.period_ms + 1):
            slow = t > self.period_ms
            before = math.floor(total + 1e-9)
            total += self.down_bps / (self.factor if slow else 1) / 12_000_000  # 1500 B a ms
            offsets += [t] * (math.floor(total + 1e-9) - before)
        if not offsets or offsets[-1] != 2 * self.period_ms:
            offsets.append(2 * self.period_ms)
        return TraceFile(offsets, self.file_name())

    def spec(self, down_trace: str | None) -> LinkSpec:
        return LinkSpec(up=Direction(self.up_bps, self.up_buffer, self.rtt_ms / 2),
                        down=Direction(0, self.down_buffer, self.rtt_ms / 2, trace=down_trace))

    def file_name(self) -> str:
        return (f"swing-{self.up_bps}-{self.down_bps}-{self.rtt_ms:g}-{self.factor:g}-"
                f"{self.period_ms}")


def swing_cell(item: str) -> Cell:
    """A link whose downlink swings (SWING_CELL, Swing): rates in kbit/s, the base round trip
    in ms (half each way), FACTOR > 1, PERIOD_MS a whole number of 10 ms or more, the buffers
    in KB of 1000 bytes (by default 4 s of each direction's rate, at least 125 KB). The phone
    sends timestamps; the traces' targets apply (it is a variable link). ValueError for a bad
    one."""
    parsed = _link_fields(item, (5, 7))
    if parsed is None or parsed[0][3] <= 1 or parsed[0][4] < 10 or parsed[0][4] % 1:
        raise ValueError(f"bad swing cell {item!r}: {SWING_CELL}, every field a positive "
                         "number, FACTOR above 1, PERIOD_MS a whole number of 10 or more")
    v, up_buf, down_buf = parsed
    swing = Swing(round(v[0] * 1000), round(v[1] * 1000), v[2], v[3], int(v[4]), up_buf,
                  down_buf)
    return Cell(item, "trace", swing=swing)


NOTS = "/nots"


def select_cells(spec: str | None, duration_s: float, warmup_s: float) -> list[Cell]:
    """--cells: names ("3g", "umts@80s"), a trace's prefix ("umts": its offsets), "constant"
    (3g, lte, 3g-nots, 2g), "traces", "all" (default), a constant link of one's own
    (link_cell) or one whose downlink swings (swing_cell); any of them followed by "/nots"
    is the same link with a phone that sends no TCP timestamps ("umts@0s/nots", named so).
    ValueError for an unknown or bad one."""
    cells = all_cells(duration_s, warmup_s)
    if not spec:
        return cells
    chosen = []
    for item in (x.strip() for x in spec.split(",") if x.strip()):
        nots = item.endswith(NOTS)
        name = item[:-len(NOTS)] if nots else item
        if name.startswith("link:"):
            match = [link_cell(name)]
        elif name.startswith("swing:"):
            match = [swing_cell(name)]
        else:
            match = [c for c in cells if name in (c.name, "all") or c.name.startswith(name + "@")
                     or (name == "constant" and c.kind != "trace")
                     or (name == "traces" and c.kind == "trace")]
        if not match:
            raise ValueError(f"unknown cell {item!r} (cells: {', '.join(c.name for c in cells)}; "
                             f"or constant, traces, all, a trace prefix; each may end in {NOTS})")
        if nots:
            match = [replace(c, name=c.name + NOTS, timestamps=False) for c in match]
        chosen += [c for c in match if c not in chosen]
    return chosen


# ---- one test ------------------------------------------------------------------------
def measure_test(res: dict, warmup_s: float, duration_s: float) -> dict:
    """The numbers of a Bench result over [warmup, duration]."""
    flows = res.get("flows", {})
    st = rtt_stats(res, warmup_s, duration_s)
    starts = res.get("linkem_start_monotonic") or [0, 0]
    m = res.get("daemon_metrics") or {}
    return {"dl_mbps": flow_mbps(flows["dl"], warmup_s, duration_s) if "dl" in flows else None,
            "ul_mbps": flow_mbps(flows["ul"], warmup_s, duration_s) if "ul" in flows else None,
            "rtt_p50_ms": st["p50"], "rtt_p95_ms": st["p95"], "rtt_max_ms": st["max"],
            "ping_n": st["n"], "ping_sent": st["sent"], "ping_lost": st["lost"],
            "link_t0_s": round(res.get("t0_monotonic", 0) - sum(starts) / 2, 3),
            "linkem": res.get("linkem"),
            "windows_rewritten": m.get("rsfcd_windows_rewritten_total"),
            "errors": list(res.get("errors", []))}


def run_test(cell: Cell, policy: str, kind: str, run: int, D: float, W: float, wd: Path,
             log, upload_lead: float = 0.0) -> dict:
    """One test on a fresh lab: `kind` dl, ul or both; its numbers (the raw result is kept
    gzipped in the Bench directory). With `upload_lead` (s, both only) the upload starts
    first and the download that much later, ending with it (a background upload already
    filling the uplink buffer when the download opens: its handshake waits behind it)."""
    link = cell.link(wd / "traces")
    lead = upload_lead if kind == "both" else 0.0
    with Bench(f"suite-{cell.name}-r{run}-{kind}", link, policy, engine=cell.engine,
               phone_timestamps=cell.timestamps, workdir=wd, log=log) as b:
        b.begin(ping_s=D, linger_s=cell.linger_s())
        if kind in ("dl", "both"):
            b.at(lead, b.bulk, "dl", "down", D - lead)
        if kind in ("ul", "both"):
            b.at(0, b.bulk, "ul", "up", D)
        b.run_schedule()
        res = b.finish()
        with gzip.open(b.workdir / "result.json.gz", "wt") as f:
            json.dump(res, f)
    return measure_test(res, W, D)


def line_key(line: dict) -> str:
    """What makes two JSON lines the same test."""
    key = [line["cell"], line["run"], line["policy"], line["kind"], line["duration_s"],
           line["warmup_s"], line["config"]]
    if line.get("upload_lead_s"):
        key.append(line["upload_lead_s"])  # only lines of an --upload-lead run have one
    return json.dumps(key, sort_keys=True)


def read_lines(path: Path) -> list[dict]:
    if not path.exists():
        return []
    out = []
    for text in path.read_text().splitlines():
        try:
            out.append(json.loads(text))
        except json.JSONDecodeError:
            continue  # a line cut by a crash
    return out


# ---- the run -------------------------------------------------------------------------
def plan(cells: list[Cell], policies: list[str], runs: int,
         arms_only: bool = False) -> list[tuple]:
    """[(run, cell, policy, kind)] in order: run by run, so that a stopped suite has whole
    runs of the cells done. `arms_only` (--arms-only): each policy but off runs only its test
    with both transfers, and off runs nothing (a comparison of arms, whose percentages
    lab/compare_runs.py takes from the unregulated medians of a whole suite)."""
    def kinds(p: str) -> tuple[str, ...]:
        if arms_only:
            return () if p == "off" else ("both",)
        return kinds_for(p)

    return [(r, c, p, k) for r in range(1, runs + 1) for c in cells for p in policies
            for k in kinds(p)]


def estimate_s(tests: list[tuple], D: float, done_walls: list[float] = ()) -> float:
    """Seconds the `tests` will take: the mean wall time of tests done before if any, else
    the duration, SETUP_S and half the pinger's linger per test."""
    if done_walls:
        return len(tests) * statistics.mean(done_walls)
    return sum(D + SETUP_S + c.linger_s() / 2 for _, c, _, _ in tests)


def fmt_hours(s: float) -> str:
    return f"{int(s // 3600)} h {int(s % 3600 // 60):02d} min"


@dataclass
class Plan:
    """The tests of a suite command and those still to run."""
    D: float
    W: float
    cells: list[Cell]
    policies: list[str]
    configs: dict
    runs: int
    jsonl: Path
    tests: list[tuple]
    todo: list[tuple]
    walls: list[float]  # wall times of the tests done before (--resume)
    lead: float = 0.0   # --upload-lead, seconds (the tests with both transfers)

    def text(self) -> str:
        est = estimate_s(self.todo, self.D, self.walls)
        return (f"suite: {len(self.cells)} cells x {len(self.policies)} policies x {self.runs} "
                f"runs = {len(self.tests)} tests of {self.D:g} s ({self.W:g} s warm-up), "
                f"{len(self.tests) - len(self.todo)} done before; estimated {fmt_hours(est)} "
                f"for the {len(self.todo)} to run\n  cells: "
                f"{', '.join(c.name for c in self.cells)}\n  policies: {', '.join(self.policies)}"
                f"\n  results: {self.jsonl}")


def make_plan(a) -> Plan:
    """The suite's tests from the command line; with --resume, those already in the JSON
    lines (same cell, run, policy, test, window and configuration, no errors) are done."""
    D, W = a.duration or DEFAULT_DURATION_S, a.warmup or DEFAULT_WARMUP_S
    cells = select_cells(a.cells, D, W)
    policies = suite_policies(a)
    configs = {p: policy_config(p) for p in policies}
    jsonl = Path(a.workdir) / "suite" / "results.jsonl"
    lines = read_lines(jsonl) if a.resume else []
    done = {line_key(ln) for ln in lines if not ln["numbers"]["errors"]}
    tests = plan(cells, policies, a.runs, getattr(a, "arms_only", False))
    lead = getattr(a, "upload_lead", 0.0) or 0.0
    todo = [t for t in tests if _line(t, D, W, configs, lead) not in done]
    return Plan(D, W, cells, policies, configs, a.runs, jsonl, tests, todo,
                [ln["wall_s"] for ln in lines], lead)


def run(a, log) -> dict:
    pl = make_plan(a)
    D, W, wd = pl.D, pl.W, pl.jsonl.parent
    wd.mkdir(parents=True, exist_ok=True)
    if pl.jsonl.exists() and not a.resume:
        pl.jsonl.rename(wd / f"results-{time.strftime('%Y%m%d-%H%M%S')}.jsonl")
    log(pl.text())
    walls = list(pl.walls)
    lead = pl.lead
    for i, (r, cell, policy, kind) in enumerate(pl.todo, 1):
        t_start = time.monotonic()
        try:
            numbers = run_test(cell, policy, kind, r, D, W, wd, log, lead)
        except Exception as e:  # noqa: BLE001 (recorded; --resume runs it again)
            numbers = {"errors": [f"test failed: {e!r}"]}
        line = {"cell": cell.name, "run": r, "policy": policy, "kind": kind, "duration_s": D,
                "warmup_s": W, "config": pl.configs[policy], "commit": a.git.get("commit"),
                "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
                "wall_s": round(time.monotonic() - t_start, 1), "numbers": numbers}
        if lead and kind == "both":
            line["upload_lead_s"] = lead
        with pl.jsonl.open("a") as f:
            f.write(json.dumps(line) + "\n")
        walls.append(line["wall_s"])
        log(f"  [{i}/{len(pl.todo)}] {cell.name} run {r} {policy} {kind}: dl "
            f"{fmt(numbers.get('dl_mbps'))} ul {fmt(numbers.get('ul_mbps'))} Mbit/s, RTT "
            f"{fmt_ms(numbers.get('rtt_p50_ms'))}/{fmt_ms(numbers.get('rtt_p95_ms'))} ms "
            f"({line['wall_s']:.0f} s; {fmt_hours(estimate_s(pl.todo[i:], D, walls))} left)"
            + (f" ! {numbers['errors']}" if numbers["errors"] else ""))
    out = assemble(read_lines(pl.jsonl), pl.cells, pl.policies, pl.runs, D, W, pl.configs)
    out["jsonl"] = str(pl.jsonl)
    summarize(out)
    return out


def suite_policies(a) -> list[str]:
    """--policies (off added first if missing: it is the baseline) or the default list, then
    --extra-policies."""
    if getattr(a, "policies", None):
        pols = [p.strip() for p in a.policies.split(",") if p.strip()]
        pols = (["off"] if "off" not in pols else []) + pols + list(a.extra_policies or [])
    else:
        pols = default_policies(a.statics, a.extra_policies or [])
    return list(dict.fromkeys(pols))


def _line(test: tuple, D: float, W: float, configs: dict, lead: float = 0.0) -> str:
    r, cell, policy, kind = test
    line = {"cell": cell.name, "run": r, "policy": policy, "kind": kind, "duration_s": D,
            "warmup_s": W, "config": configs[policy]}
    if lead and kind == "both":
        line["upload_lead_s"] = lead
    return line_key(line)


def assemble(lines: list[dict], cells: list[Cell], policies: list[str], runs: int, D: float,
             W: float, configs: dict) -> dict:
    """The run's JSON from JSON lines: out["tests"][cell][policy][kind] = [numbers of run 1,
    ...] (None where missing); the last line of a test wins."""
    latest = {line_key(ln): ln for ln in lines}
    out = {"scenario": "suite", "duration_s": D, "warmup_s": W, "runs": runs,
           "cells": {c.name: c.describe() for c in cells}, "policies": policies,
           "configs": configs, "offset_rule": OFFSET_RULE, "best_static_rule": BEST_STATIC_RULE,
           "tests": {}, "commits": [], "errors": []}
    commits = set()
    for r, cell, policy, kind in plan(cells, policies, runs):
        ln = latest.get(_line((r, cell, policy, kind), D, W, configs))
        runs_of = out["tests"].setdefault(cell.name, {}).setdefault(policy, {}).setdefault(
            kind, [None] * runs)
        if ln is None:
            continue
        runs_of[r - 1] = dict(ln["numbers"], wall_s=ln["wall_s"], commit=ln.get("commit"))
        commits.add(ln.get("commit"))
        out["errors"] += [f"{cell.name} run {r} {policy} {kind}: {e}"
                          for e in ln["numbers"]["errors"]]
    out["commits"] = sorted(c for c in commits if c)
    return out


def from_jsonl(path: Path) -> dict:
    """A suite's JSON from its JSON lines alone (a run still going or stopped): the cells,
    policies, runs and window the lines name."""
    lines = read_lines(Path(path))
    if not lines:
        raise ValueError(f"{path}: no tests")
    D, W = lines[-1]["duration_s"], lines[-1]["warmup_s"]
    lines = [ln for ln in lines if (ln["duration_s"], ln["warmup_s"]) == (D, W)]
    by_name = {c.name: c for c in all_cells(D, W)}
    cells = [by_name[n] for n in dict.fromkeys(ln["cell"] for ln in lines) if n in by_name]
    policies = list(dict.fromkeys(ln["policy"] for ln in lines))
    configs = {ln["policy"]: ln["config"] for ln in lines}
    out = assemble(lines, cells, policies, max(ln["run"] for ln in lines), D, W, configs)
    out["jsonl"] = str(path)
    summarize(out)
    return out


# ---- the score -----------------------------------------------------------------------
def spread(values: list) -> dict | None:
    """Median, min, max and count of the values present (None: no value)."""
    v = [x for x in values if x is not None]
    if not v:
        return None
    return {"median": statistics.median(v), "min": min(v), "max": max(v), "n": len(v)}


def _med(agg: dict | None):
    return agg["median"] if agg else None


def _ratio(a, b):
    return a / b if a is not None and b else None


def cell_runs(tests: dict, policy: str) -> list[dict]:
    """Per run, a policy's numbers against the run's unregulated baselines (off's download
    alone and upload alone): download/upload with the other as a fraction of them, the
    phone's RTT under load and with the download alone, the download alone's fraction."""
    off, mine = tests.get("off", {}), tests.get(policy, {})
    rows = []
    # A run of the policy without its own baselines (off ran fewer runs than it) is taken
    # against the first run's: a capacity trace replays the same window every run.
    first = next((r for r, d in enumerate(off.get("dl", [])) if d), None)
    for r in range(len(off.get("dl", []))):
        base_dl, base_ul = off["dl"][r], off.get("ul", [None] * (r + 1))[r]
        own = base_dl is not None
        if not own and first is not None:
            base_dl, base_ul = off["dl"][first], off.get("ul", [None] * (first + 1))[first]
        both, dl = mine.get("both", [None] * (r + 1))[r], mine.get("dl", [None] * (r + 1))[r]
        get = lambda d, k: d.get(k) if d else None  # noqa: E731
        rows.append({
            "dl_pct": _ratio(get(both, "dl_mbps"), get(base_dl, "dl_mbps")),
            "ul_pct": _ratio(get(both, "ul_mbps"), get(base_ul, "ul_mbps")),
            "load_p50": get(both, "rtt_p50_ms"), "load_p95": get(both, "rtt_p95_ms"),
            "alone_p50": get(dl, "rtt_p50_ms"), "alone_p95": get(dl, "rtt_p95_ms"),
            "alone_dl_pct": _ratio(get(dl, "dl_mbps"), get(base_dl, "dl_mbps")),
            "base_dl_mbps": get(base_dl, "dl_mbps"), "base_ul_mbps": get(base_ul, "ul_mbps"),
            "base_alone_p95": get(base_dl, "rtt_p95_ms"), "own_base": own})
    return rows


FIELDS = ("dl_pct", "ul_pct", "load_p50", "load_p95", "alone_p50", "alone_p95", "alone_dl_pct")


def targets(cell: dict, base_alone_p95: float | None) -> list[tuple]:
    """Issue 16's targets of a cell: [(field, op, bound, what the bound is)]; a bound None
    cannot be checked."""
    half = base_alone_p95 / 2 if base_alone_p95 is not None else None
    half_t = ("load_p95", "<=", half, "half the unregulated download-alone p95")
    if cell["kind"] == "2g":
        return [("dl_pct", ">", 0.80, ""), ("ul_pct", ">", 0.80, ""),
                ("load_p95", "<", 1000.0, "1 s")]
    if cell["kind"] == "trace":
        return [("dl_pct", ">=", 0.85, ""), ("ul_pct", ">=", 0.80, ""), half_t]
    out = [("dl_pct", ">=", 0.90, ""), ("ul_pct", ">=", 0.90, ""), half_t]
    if cell.get("link_name") in ("3g", "lte") and cell["timestamps"]:
        out.append(("load_p95", "<=", cell["base_rtt_ms"] + 100.0, "base RTT + 100 ms"))
    return out


def check(value, op: str, bound) -> bool | None:
    if value is None or bound is None:
        return None
    return {">": value > bound, ">=": value >= bound, "<": value < bound,
            "<=": value <= bound}[op]


def _is_static(out: dict, policy: str) -> bool:
    cfg = out["configs"].get(policy) or {}
    knobs = [(cfg.get(k) or {}).get("policy") for k in ("uplink", "downlink")]
    return policy.startswith("static") and "static" in knobs and set(knobs) <= {"static", "off"}


def best_static(summary: dict, statics: list[str]) -> str | None:
    """BEST_STATIC_RULE over one cell's summary."""
    score = {p: summary[p]["score"] for p in statics if summary[p]["score"] is not None}
    if not score:
        return None
    top = max(score.values())
    near = [p for p, s in score.items() if s >= top - 0.01]
    return min(near, key=lambda p: (_med(summary[p]["load_p95"]) or float("inf"), -score[p]))


def summarize(out: dict) -> None:
    """out["summary"][cell][policy] (median and spread of each field, the targets checked),
    out["best_static"][cell], out["scores"][policy]."""
    statics = [p for p in out["policies"] if _is_static(out, p)]
    out["summary"], out["best_static"] = {}, {}
    for name, tests in out["tests"].items():
        cell = out["cells"][name]
        base = {k: spread([r[k] for r in cell_runs(tests, "off") if r["own_base"]])
                for k in ("base_dl_mbps", "base_ul_mbps", "base_alone_p95")}
        S = {"baseline": base}
        for p in out["policies"]:
            rows = cell_runs(tests, p)
            s = {k: spread([r[k] for r in rows]) for k in FIELDS}
            dl, ul = _med(s["dl_pct"]), _med(s["ul_pct"])
            s["score"] = min(dl, ul) if dl is not None and ul is not None else None
            s["checks"] = [{"what": f, "op": op, "bound": b, "bound_is": why,
                            "value": _med(s[f]), "ok": check(_med(s[f]), op, b)}
                           for f, op, b, why in targets(cell, _med(base["base_alone_p95"]))]
            s["ok"] = all(c["ok"] for c in s["checks"]) if s["checks"] else None
            S[p] = s
        best = best_static(S, statics)
        for p in out["policies"]:
            S[p]["p95_vs_best_static"] = _ratio(_med(S[p]["load_p95"]),
                                                _med(S[best]["load_p95"]) if best else None)
        out["summary"][name] = S
        out["best_static"][name] = best
    out["scores"] = {p: policy_score(out, p, statics) for p in out["policies"]}
    out["labels"] = labels(out["policies"])


def policy_score(out: dict, policy: str, statics: list[str]) -> dict:
    """A policy over the suite: the cells whose targets it meets, its misses, its worst cell
    by min(download %, upload %) and whether that beats every static's worst, and its p95
    under load against each cell's best static."""
    S = out["summary"]
    cells = [c for c in S if S[c][policy]["score"] is not None]
    misses = [{"cell": c, **chk} for c in cells for chk in S[c][policy]["checks"]
              if chk["ok"] is False]
    worst = min(cells, key=lambda c: S[c][policy]["score"], default=None)
    ratios = {c: S[c][policy]["p95_vs_best_static"] for c in cells
              if S[c][policy]["p95_vs_best_static"] is not None}
    static_worst = [min(S[c][p]["score"] for c in cells) for p in statics
                    if p != policy and all(S[c][p]["score"] is not None for c in cells)]
    worst_v = S[worst][policy]["score"] if worst else None
    return {"cells": len(cells), "cells_ok": sum(1 for c in cells if S[c][policy]["ok"]),
            "misses": misses, "worst_cell": worst, "worst": worst_v,
            "beats_every_static_worst": (worst_v > max(static_worst) if static_worst and
                                         worst_v is not None else None),
            "p95_vs_best_static": ratios,
            "max_p95_vs_best_static": max(ratios.values()) if ratios else None,
            "max_p95_cell": max(ratios, key=ratios.get) if ratios else None,
            "cells_p95_over_110pct": sum(1 for v in ratios.values() if v > 1.10)}


# ---- the table -----------------------------------------------------------------------
def short_label(policy: str) -> str:
    """A column head: static2:65536 -> 64K, static:65536 -> up64K, off+drwa -> drwa."""
    for prefix, tag in (("static2:", ""), ("static:", "up")):
        if policy.startswith(prefix) and policy[len(prefix):].isdigit():
            n = int(policy[len(prefix):])
            return f"{tag}{n // 1024}K" if n % 1024 == 0 else f"{tag}{n}B"
    return "drwa" if policy == "off+drwa" else policy


def labels(policies: list[str]) -> dict[str, str]:
    """Column heads; long policy strings become x1, x2, ... (listed under the table)."""
    out, n = {}, 0
    for p in policies:
        lab = short_label(p)
        if len(lab) > 12:
            n += 1
            lab = f"x{n}"
        out[p] = lab
    return out


def _pct_cell(agg) -> str:
    return fmt_pct(_med(agg))


def _range(agg, pct: bool) -> str:
    if not agg or agg["n"] < 2:
        return ""
    f = (lambda v: f"{100 * v:.0f}") if pct else (lambda v: fmt_ms(v))
    return f"{f(agg['min'])}-{f(agg['max'])}"


def _miss_text(chk: dict) -> str:
    v, b = chk["value"], chk["bound"]
    if chk["what"].endswith("_pct"):
        return (f"{chk['what'][:2]} {100 * v:.0f}% (target {chk['op']} {100 * b:.0f}%, "
                f"{100 * (b - v):.0f} points short)")
    return (f"p95 {v:.0f} ms (target {chk['op']} {b:.0f} ms = {chk['bound_is']}, "
            f"{v - b:.0f} ms over)")


def fmt_bytes(n: int) -> str:
    """1000000 -> 1 MB, 512000 -> 512 KB, 1048576 -> 1 MiB, 262144 -> 256 KiB."""
    for unit, size in (("MB", 10 ** 6), ("KB", 10 ** 3), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} B"


def cell_title(name: str, cell: dict, base: dict) -> str:
    link = cell["link"]
    if cell.get("swing"):
        up, down, sw = link["up"], link["down"], cell["swing"]
        what = (f"up {up['rate_bps'] / 1e6:g} Mbit/s {fmt_bytes(up['buffer_bytes'])}, down "
                f"{sw['down_bps'] / 1e6:g} and {sw['down_bps'] / sw['factor'] / 1e6:.3g} Mbit/s "
                f"in turn, {sw['period_ms']:g} ms each, {fmt_bytes(down['buffer_bytes'])}")
    elif cell["kind"] == "trace":
        what = (f"{cell['trace']} from {cell['offset_s']:g} s ({cell['window']} window), "
                f"buffers up {fmt_bytes(link['up']['buffer_bytes'])} / down "
                f"{fmt_bytes(link['down']['buffer_bytes'])}")
    else:
        up, down = link["up"], link["down"]
        what = (f"up {up['rate_bps'] / 1e6:g} Mbit/s {fmt_bytes(up['buffer_bytes'])}, down "
                f"{down['rate_bps'] / 1e6:g} Mbit/s {fmt_bytes(down['buffer_bytes'])}"
                + ("" if cell["timestamps"] else ", phone without timestamps"))
    return (f"\n{name}: {what}, base RTT {cell['base_rtt_ms']:g} ms; unregulated: download alone "
            f"{fmt(_med(base['base_dl_mbps']))}, upload alone {fmt(_med(base['base_ul_mbps']))} "
            f"Mbit/s, RTT p95 with the download alone {fmt_ms(_med(base['base_alone_p95']))} ms")


def cell_table(out: dict, name: str, lab: dict[str, str]) -> str:
    S, pol = out["summary"][name], out["policies"]
    many = out["runs"] > 1
    rows = [("download w/ upload [% alone]", [_pct_cell(S[p]["dl_pct"]) for p in pol])]
    if many:
        rows.append(("  min-max", [_range(S[p]["dl_pct"], True) for p in pol]))
    rows.append(("upload w/ download [% alone]", [_pct_cell(S[p]["ul_pct"]) for p in pol]))
    if many:
        rows.append(("  min-max", [_range(S[p]["ul_pct"], True) for p in pol]))
    rows.append(("RTT under load p50/p95 [ms]", [f"{fmt_ms(_med(S[p]['load_p50']))}/"
                                                 f"{fmt_ms(_med(S[p]['load_p95']))}" for p in pol]))
    if many:
        rows.append(("  p95 min-max", [_range(S[p]["load_p95"], False) for p in pol]))
    rows += [
        ("RTT dl alone p50/p95 [ms]", [f"{fmt_ms(_med(S[p]['alone_p50']))}/"
                                       f"{fmt_ms(_med(S[p]['alone_p95']))}" for p in pol]),
        ("download alone [% off]", [_pct_cell(S[p]["alone_dl_pct"]) for p in pol]),
        ("p95 / best static's", [fmt(S[p]["p95_vs_best_static"]) for p in pol]),
        ("targets", [_targets_cell(S[p]) for p in pol]),
    ]
    title = cell_title(name, out["cells"][name], S["baseline"])
    best = out["best_static"].get(name)
    return table(title, [lab[p] for p in pol], rows, lab.get(best) if best else None)


def _targets_cell(s: dict) -> str:
    if s["ok"] is None and all(c["value"] is None for c in s["checks"]):
        return "-"
    missed = list(dict.fromkeys(c["what"].split("_")[0].replace("load", "p95")
                                for c in s["checks"] if c["ok"] is False))
    return "ok" if s["ok"] else ("miss " + ",".join(missed) if missed else "?")


def score_table(out: dict, lab: dict[str, str]) -> str:
    pol, sc = out["policies"], out["scores"]
    statics = {p for p in pol if _is_static(out, p)}
    rows = [
        ("cells meeting the targets", [f"{sc[p]['cells_ok']}/{sc[p]['cells']}" for p in pol]),
        ("worst cell", [sc[p]["worst_cell"] or "-" for p in pol]),
        ("  min(download %, upload %)", [fmt_pct(sc[p]["worst"]) for p in pol]),
        ("  above every static's worst", ["" if p in statics or sc[p]["beats_every_static_worst"]
                                          is None else ("yes" if sc[p]["beats_every_static_worst"]
                                                        else "no") for p in pol]),
        ("p95 / best static's, max", [fmt(sc[p]["max_p95_vs_best_static"]) for p in pol]),
        ("  in cell", [sc[p]["max_p95_cell"] or "-" for p in pol]),
        ("  cells over 1.10", [str(sc[p]["cells_p95_over_110pct"]) for p in pol]),
    ]
    return table("\nscore (medians over the runs; issue 16's targets per cell)",
                 [lab[p] for p in pol], rows)


def report(out: dict) -> str:
    lab = labels(out["policies"])
    legend = ", ".join(f"{lab[p]} = {p}" for p in out["policies"] if lab[p] != p)
    parts = [f"scenario suite: {len(out['cells'])} cells, {out['runs']} run(s) each, "
             f"{out['duration_s']:g} s per test, first {out['warmup_s']:g} s skipped; download "
             f"and upload as % of the unregulated (off) download / upload alone of the same run "
             f"(of off's first run where off ran fewer runs); "
             f"median (min-max); {out['best_static_rule']} (*)",
             f"columns: {legend}" if legend else "",
             f"{out['offset_rule']}"]
    if len(out.get("commits", [])) > 1:
        parts.append(f"! tests from {len(out['commits'])} commits: {', '.join(out['commits'])}")
    for name in out["summary"]:
        parts.append(cell_table(out, name, lab))
    parts.append(score_table(out, lab))
    for p in out["policies"]:
        if _is_static(out, p) or p == "off" or not out["scores"][p]["misses"]:
            continue
        parts.append(f"\n{p} misses: " + "; ".join(
            f"{m['cell']}: {_miss_text(m)}" for m in out["scores"][p]["misses"]))
    if out.get("errors"):
        parts.append(f"\n{len(out['errors'])} errors: " + "; ".join(out["errors"][:10]))
    return "\n".join(x for x in parts if x)
