"""The experiments of lab/experiments.py, one module each (trace, web, fairness, changes,
stacks, uploads), on a shared test bench (bench.py) and shared tables (common.py).

An experiment module has `run(a, log) -> dict` (a: lab/experiments.py's parsed arguments;
the dict is the run's JSON, with "scenario" = the experiment's name) and
`report(out) -> str` (its table); `summarize(out)` where --show --recompute can derive the
summary again from the saved samples. This package imports nothing by itself.
"""
