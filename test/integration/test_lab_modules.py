"""The structure of lab/'s Python modules (read with ast; nothing is run as root):

- no import cycle: no module of lab/ imports, directly or through others, one that imports
  it back (imports inside functions count too);
- no module uses another's private names (`from m import _x`, `m._x`, or `obj._x` where
  `_x` is defined only in another lab module): a helper used across modules is public;
- every experiment of lab/exps/ is a sub-command of lab/experiments.py and its command line
  parses, as do the other lab scripts' (the documents cite these commands).
"""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

import pytest

LAB = Path(__file__).resolve().parents[2] / "lab"
PY = "/usr/bin/python3"
SHARED_EXPS = {"exps.bench", "exps.common"}  # lab/exps/ modules that are not experiments


def lab_modules() -> dict[str, Path]:
    """Module name (as imported with lab/ on sys.path) -> file: "topo", "exps", "exps.bench"."""
    mods = {}
    for path in sorted(LAB.rglob("*.py")):
        parts = path.relative_to(LAB).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = path
    return mods


MODULES = lab_modules()
TREES = {name: ast.parse(path.read_text(), str(path)) for name, path in MODULES.items()}


def _package(name: str) -> str:
    return name if MODULES[name].name == "__init__.py" else name.rpartition(".")[0]


def imports_of(name: str) -> dict[str, dict[str, str]]:
    """The lab modules `name` imports -> {local name: imported name} it binds from them."""
    found: dict[str, dict[str, str]] = {}
    for node in ast.walk(TREES[name]):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name in MODULES:
                    found.setdefault(a.name, {})[a.asname or a.name] = ""
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = _package(name).split(".")
                pkg = pkg[:len(pkg) - (node.level - 1)]
                base = ".".join(pkg + ([node.module] if node.module else []))
            for a in node.names:
                sub = f"{base}.{a.name}" if base else a.name
                if sub in MODULES:  # `from exps import trace`: the module exps.trace
                    found.setdefault(sub, {})[a.asname or a.name] = ""
                elif base in MODULES:
                    found.setdefault(base, {})[a.asname or a.name] = a.name
    found.pop(name, None)
    return found


GRAPH = {name: set(imports_of(name)) for name in MODULES}


def _cycles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, on_stack, stack, out = {}, {}, set(), [], []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(GRAPH[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(GRAPH):
        if v not in index:
            visit(v)
    return out


def test_the_lab_modules_are_found():
    assert {"topo", "shaping", "scenarios", "experiments", "plots", "measure", "policies",
            "exps.bench", "exps.common", "exps.trace"} <= set(MODULES)
    assert "measure" in GRAPH["plots"] and "plots" in GRAPH["experiments"]
    assert "exps.bench" in GRAPH["exps.trace"]


def test_no_import_cycle():
    back = [(a, b) for a in GRAPH for b in GRAPH[a] if a in GRAPH[b]]
    assert not back, f"modules importing each other: {back}"
    assert not _cycles(), f"import cycles: {_cycles()}"


def _defined_privates(name: str) -> set[str]:
    """Private names `name` defines: functions, classes, assignments, self._x attributes."""
    names = set()
    for node in ast.walk(TREES[name]):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) \
                and isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            names.add(node.attr)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return {n for n in names if n.startswith("_") and not n.startswith("__")}


def private_uses(name: str) -> list[str]:
    mine = _defined_privates(name)
    others = set().union(*(_defined_privates(m) for m in MODULES if m != name))
    imported = imports_of(name)
    module_aliases = {local for mod, binds in imported.items() for local, attr in binds.items()
                      if not attr}
    bad = [f"from {mod} import {attr}" for mod, binds in imported.items()
           for attr in binds.values() if attr.startswith("_") and not attr.startswith("__")]
    for node in ast.walk(TREES[name]):
        if not isinstance(node, ast.Attribute) or not node.attr.startswith("_") \
                or node.attr.startswith("__"):
            continue
        owner = node.value
        if isinstance(owner, ast.Name) and owner.id in module_aliases:
            bad.append(f"{owner.id}.{node.attr} (line {node.lineno})")
        elif not (isinstance(owner, ast.Name) and owner.id in ("self", "cls")) \
                and node.attr not in mine and node.attr in others:
            bad.append(f"{ast.unparse(owner)}.{node.attr} (line {node.lineno})")
    return bad


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_module_uses_another_modules_private_names(name):
    assert not private_uses(name), f"{MODULES[name]}: {private_uses(name)}"


EXPERIMENT_MODULES = sorted(m.split(".", 1)[1] for m in MODULES
                            if m.startswith("exps.") and m not in SHARED_EXPS)


def test_every_experiment_module_is_a_subcommand():
    r = subprocess.run([PY, str(LAB / "experiments.py"), "--help"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "{" + ",".join(EXPERIMENT_MODULES) + "}" in r.stdout, r.stdout
    for exp in EXPERIMENT_MODULES:
        fns = {n.name for n in TREES[f"exps.{exp}"].body if isinstance(n, ast.FunctionDef)}
        assert {"run", "report"} <= fns, f"lab/exps/{exp}.py: run() and report() needed"


@pytest.mark.parametrize("argv", [["experiments.py", exp, "--help"] for exp in
                                  EXPERIMENT_MODULES] + [
    ["scenarios.py", "--help"], ["shaping.py", "apply", "--help"], ["topo.py", "up", "--help"],
    ["plots.py", "--help"], ["traffic.py", "bulk", "--help"], ["pinger.py", "--help"]],
    ids=lambda argv: " ".join(argv))
def test_lab_command_line_parses(argv):
    r = subprocess.run([PY, str(LAB / argv[0]), *argv[1:]], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0 and r.stdout.startswith("usage:"), r.stdout + r.stderr
