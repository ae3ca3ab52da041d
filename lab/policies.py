"""The lab's policy strings: each names the rsfcd configuration a test runs the gateway with
(merged over lab/topo.py's DEFAULT_CONFIG; rsfcd regulates the uplink knob, the downlink
knob is off unless the policy says otherwise). Used by lab/scenarios.py and lab/exps/.

    none                      no rsfcd (and no NFQUEUE rules on the gateway)
    off, observe, rsfc        uplink.policy
    static:BYTES              uplink.policy static, static_window_bytes BYTES
    static2:BYTES             both knobs static at BYTES (the downlink one is what Android's
                              tcp_rmem_max does on the phone)
    rsfc[key=value;...]       rsfc with rsfc.* overrides
    rsfc+drwa                 rsfc on the uplink knob, DRWA on the downlink knob
    rsfc+drwa[key=value;...]  with drwa.* overrides; keys "rsfc.KEY" override rsfc.*
    off+drwa                  DRWA on the downlink knob alone (the uplink knob off)
    off+drwa[key=value;...]   with drwa.* overrides
    rsfc+rsfc                 rsfc on both knobs (the downlink one: the downlink queue
                              regulator, on the same rsfc.* keys)
    off+rsfc                  rsfc on the downlink knob alone (the uplink knob off)
    rsfc+rsfc[...], off+rsfc[...]  with rsfc.* overrides (both knobs read them); keys
                              "pacing.KEY" set the downlink pacer's (pacing.enabled=true)
    shipped                   the regulation keys of conf/rsfcd.yaml as it is in the tree
                              (both knobs, min_window_bytes, rsfc, drwa, ...; not the keys of
                              the machine it runs on: queues, subscriber_networks, flows,
                              queue, metrics, log, decision_log)
    shipped[key=value;...]    the same with overrides of its top-level keys, e.g.
                              shipped[rsfc.tuning.rtt_window_min_ms=2000]: a variant of the
                              shipped file, run beside it in one suite
    POLICY@NAME               POLICY run by another build's rsfcd: NAME's build directory
                              (experiments.py --build NAME=DIR, or RSFC_BUILDS="NAME=DIR,...");
                              shipped,shipped@variant runs the two builds side by side, test
                              by test, in one suite (the cells move between sessions by as
                              much as a change does: lab/EXPERIMENTS.md Q53)

A dotted key nests: rsfc[tuning.probe_below=0.3] sets rsfc.tuning.probe_below (the control
law's experimental block), rsfc+drwa[rsfc.tuning.probe_below=0.3;lambda=2] the same and
drwa.lambda. A value is a number, true/false or a string ("auto", a path). check_policy()
has rsfcd --check-config the resulting configuration, so a misspelt key stops a run before
it starts. Tests that log rsfcd's decisions set the top-level `decision_log` key.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from pathlib import Path

import topo as topo_mod

POLICY_FORMS = ("none, off, observe, static:BYTES, static2:BYTES, rsfc, rsfc[key=value;...], "
                "rsfc+drwa, rsfc+drwa[key=value;...], off+drwa, off+drwa[key=value;...], "
                "rsfc+rsfc, rsfc+rsfc[key=value;...], off+rsfc, off+rsfc[key=value;...], shipped, "
                "shipped[key=value;...]; any of them @NAME for another build")
BUILD_NAME = re.compile(r"[A-Za-z0-9_.-]{1,40}")


def parse_builds(text: str) -> dict[str, Path]:
    """"NAME=DIR,NAME=DIR" (RSFC_BUILDS; one item: --build) -> {NAME: DIR}. ValueError for
    an item without "=", a name outside [A-Za-z0-9_.-]{1,40}, an empty directory or a name
    given twice."""
    builds: dict[str, Path] = {}
    for item in filter(None, (x.strip() for x in text.split(","))):
        name, eq, path = item.partition("=")
        name, path = name.strip(), path.strip()
        if not eq or not path or not BUILD_NAME.fullmatch(name):
            raise ValueError(f"build {item!r}: expected NAME=DIR, NAME of [A-Za-z0-9_.-]")
        if name in builds:
            raise ValueError(f"build {name!r} given twice")
        builds[name] = Path(path)
    return builds


# The builds a policy may name (POLICY@NAME): RSFC_BUILDS, then experiments.py --build. A
# malformed RSFC_BUILDS is reported by the first policy checked (a clear error, not a failed
# import).
try:
    BUILDS: dict[str, Path] = parse_builds(os.environ.get("RSFC_BUILDS", ""))
    BUILDS_ERROR = ""
except ValueError as e:
    BUILDS, BUILDS_ERROR = {}, f"RSFC_BUILDS: {e}"


def split_build(policy: str) -> tuple[str, str | None]:
    """"POLICY@NAME" -> (POLICY, NAME); a policy without a build suffix -> (policy, None).
    ValueError for a NAME that no --build / RSFC_BUILDS gave, or a malformed RSFC_BUILDS."""
    if BUILDS_ERROR:
        raise ValueError(BUILDS_ERROR)
    base, at, name = policy.rpartition("@")
    if not at or not BUILD_NAME.fullmatch(name) or base.endswith("@"):
        return policy, None
    if name not in BUILDS:
        known = ", ".join(sorted(BUILDS)) or "none given"
        raise ValueError(f"policy {policy!r}: no build {name!r} (--build NAME=DIR or "
                         f"RSFC_BUILDS; builds: {known})")
    return base, name


def build_binary(name: str | None) -> Path:
    """The rsfcd of build NAME (from split_build), or RSFC_BUILD_DIR's for None."""
    return BUILDS[name] / "rsfcd" if name else topo_mod.rsfcd_binary()


def policy_binary(policy: str) -> Path:
    """The rsfcd a policy runs: its build's (POLICY@NAME) or RSFC_BUILD_DIR's."""
    return build_binary(split_build(policy)[1])


SHIPPED_CONFIG = Path(__file__).resolve().parent.parent / "conf" / "rsfcd.yaml"
# Keys of conf/rsfcd.yaml that describe the machine rsfcd runs on rather than how it
# regulates: the lab sets its own (topo.DEFAULT_CONFIG, the decision log per test).
MACHINE_KEYS = ("queues", "subscriber_networks", "flows", "queue", "metrics", "log",
                "decision_log")


def parse_value(text: str):
    """An override's value: true/false, an int, a float, else the string ("auto", a path)."""
    if text in ("true", "false"):
        return text == "true"
    try:
        num = float(text)
    except ValueError:
        return text
    return int(num) if num.is_integer() and "." not in text else num


def parse_overrides(text: str) -> dict:
    """"key=value;key=value" (a policy's [...] part) -> {key: value}; a dotted key nests:
    "tuning.probe_below=0.3;fast_target=1.5" -> {"tuning": {"probe_below": 0.3},
    "fast_target": 1.5}. ValueError for an item without "=", an empty key part, or a key
    set twice (also as a value and as a block)."""
    params: dict = {}
    for item in filter(None, (x.strip() for x in text.split(";"))):
        key, eq, value = item.partition("=")
        parts = [k.strip() for k in key.split(".")]
        if not eq or not all(parts):
            raise ValueError(f"override {item!r}: expected key=value (key parts joined by '.')")
        node = params
        for depth, part in enumerate(parts[:-1]):
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ValueError(f"override {item!r}: {'.'.join(parts[:depth + 1])} is a value")
        if parts[-1] in node:
            raise ValueError(f"override {item!r}: {key.strip()} is set twice")
        node[parts[-1]] = parse_value(value.strip())
    return params


def policy_config(policy: str) -> dict | None:
    """rsfcd config (merged over topo.DEFAULT_CONFIG) for an uplink policy; None = no daemon.
    ValueError for a string this does not know. POLICY@NAME is POLICY's (split_build())."""
    policy, _ = split_build(policy)
    if policy == "none":
        return None
    down = {"policy": "off"}
    if policy.startswith("static:"):
        return {"uplink": {"policy": "static", "static_window_bytes": _bytes(policy)},
                "downlink": down}
    if policy.startswith("static2:"):  # both knobs, one value
        size = _bytes(policy)
        return {"uplink": {"policy": "static", "static_window_bytes": size},
                "downlink": {"policy": "static", "static_window_bytes": size}}
    if policy == "shipped":
        return shipped_config()
    if policy.startswith("shipped[") and policy.endswith("]"):
        return topo_mod.deep_merge(shipped_config(), parse_overrides(policy[8:-1]))
    if policy == "off+drwa" or (policy.startswith("off+drwa[") and policy.endswith("]")):
        drwa = parse_overrides(policy[9:-1]) if policy.endswith("]") else {}
        return {"uplink": {"policy": "off"}, "downlink": {"policy": "drwa"}} | (
            {"drwa": drwa} if drwa else {})
    for up in ("rsfc", "off"):  # the downlink knob rsfc: rsfc+rsfc, off+rsfc
        form = up + "+rsfc"
        if policy == form or (policy.startswith(form + "[") and policy.endswith("]")):
            rsfc = parse_overrides(policy[len(form) + 1:-1]) if policy.endswith("]") else {}
            pacing = rsfc.pop("pacing", {})  # "pacing.KEY": the top-level pacing block
            if not isinstance(pacing, dict):
                raise ValueError(f"policy {policy!r}: pacing overrides are pacing.KEY=value")
            return {"uplink": {"policy": up}, "downlink": {"policy": "rsfc"}} | (
                {"rsfc": rsfc} if rsfc else {}) | ({"pacing": pacing} if pacing else {})
    if policy in ("off", "observe", "rsfc"):
        return {"uplink": {"policy": policy}, "downlink": down}
    if policy == "rsfc+drwa":  # both knobs: RSFC on the uplink, DRWA on the downlink
        return {"uplink": {"policy": "rsfc"}, "downlink": {"policy": "drwa"}}
    if policy.startswith("rsfc+drwa[") and policy.endswith("]"):
        # both knobs with DRWA parameter overrides, e.g. "rsfc+drwa[lambda=2]"; keys
        # "rsfc.KEY" override rsfc's, e.g. "rsfc+drwa[rsfc.tuning.probe_below=0.3]"
        drwa = parse_overrides(policy[10:-1])
        rsfc = drwa.pop("rsfc", {})
        if not isinstance(rsfc, dict):
            raise ValueError(f"policy {policy!r}: rsfc overrides are rsfc.KEY=value")
        cfg = {"uplink": {"policy": "rsfc"}, "downlink": {"policy": "drwa"}}
        return cfg | ({"drwa": drwa} if drwa else {}) | ({"rsfc": rsfc} if rsfc else {})
    if policy.startswith("rsfc[") and policy.endswith("]"):
        # rsfc with parameter overrides, e.g. "rsfc[fast_target=1.5;tuning.probe_below=0.3]"
        rsfc = parse_overrides(policy[5:-1])
        return {"uplink": {"policy": "rsfc"}, "downlink": down} | ({"rsfc": rsfc} if rsfc else {})
    raise ValueError(f"unknown policy {policy!r} ({POLICY_FORMS})")


def _bytes(policy: str) -> int:
    """The BYTES of "static:BYTES" / "static2:BYTES" (decimal digits)."""
    text = policy.partition(":")[2]
    if not text.isdigit():
        raise ValueError(f"policy {policy!r}: BYTES must be a decimal number of bytes")
    return int(text)


def shipped_config(path: Path = SHIPPED_CONFIG) -> dict:
    """The regulation keys of a configuration file (default conf/rsfcd.yaml): all but
    MACHINE_KEYS (and rsfc.decision_log, the former place of the decision log). A knob's
    policy written as a bare `off` (YAML 1.1's false, which rsfcd reads as "off") is "off".
    ValueError if the file is not a mapping."""
    import yaml  # PyYAML, only for this policy

    doc = yaml.safe_load(Path(path).read_text())
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: not a YAML mapping")
    cfg = {k: v for k, v in doc.items() if k not in MACHINE_KEYS}
    for knob in ("uplink", "downlink"):
        if isinstance(cfg.get(knob), dict) and cfg[knob].get("policy") is False:
            cfg[knob] = dict(cfg[knob], policy="off")
    if isinstance(cfg.get("rsfc"), dict) and "decision_log" in cfg["rsfc"]:
        cfg["rsfc"] = {k: v for k, v in cfg["rsfc"].items() if k != "decision_log"}
    return cfg


def check_policy(policy: str) -> None:
    """Rejects a bad policy before anything runs: ValueError for a string policy_config does
    not know, and, when the rsfcd binary is built, for a configuration rsfcd --check-config
    refuses (a misspelt override key would otherwise end a long run with a failed start).
    A policy of another build (POLICY@NAME) needs that build's rsfcd."""
    cfg = policy_config(policy)
    _, build = split_build(policy)
    binary = build_binary(build)
    if build and not binary.exists():
        raise ValueError(f"policy {policy!r}: no {binary} (build target rsfcd)")
    if cfg is None or not binary.exists():
        return
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
        f.write(topo_mod.to_yaml(topo_mod.deep_merge(topo_mod.DEFAULT_CONFIG, cfg)))
        f.flush()
        r = subprocess.run([str(binary), "--check-config", f.name], capture_output=True,
                           text=True, timeout=10)
    if r.returncode != 0:
        raise ValueError(f"policy {policy!r}: {(r.stdout + r.stderr).strip()}")


def wants_decision_log(policy: str) -> bool:
    """The policies whose controller decisions rsfcd can log: the uplink knob observe or
    rsfc (`observe`, the rsfc ones, `shipped` when conf/rsfcd.yaml runs rsfc), or the
    downlink knob rsfc (`off+rsfc`; its records have "knob": "downlink")."""
    cfg = policy_config(policy)
    return cfg is not None and ((cfg.get("uplink") or {}).get("policy") in ("observe", "rsfc") or
                                (cfg.get("downlink") or {}).get("policy") == "rsfc")


def with_decision_log(cfg: dict, path: Path) -> dict:
    """`cfg` with rsfcd's decision log written to `path` (the top-level `decision_log`)."""
    return topo_mod.deep_merge(cfg, {"decision_log": str(path)})
