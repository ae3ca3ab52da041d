"""The lab's policy strings: each names the rsfcd configuration a test runs the gateway with
(merged over lab/topo.py's DEFAULT_CONFIG; rsfcd regulates the uplink knob, the downlink
knob is off unless the policy says otherwise). Used by lab/scenarios.py and lab/exps/.

    none                      no rsfcd (and no NFQUEUE rules on the gateway)
    off, observe, rsfc        uplink.policy
    static:BYTES              uplink.policy static, static_window_bytes BYTES
    rsfc[key=value;...]       rsfc with rsfc.* overrides
    rsfc+drwa                 rsfc on the uplink knob, DRWA on the downlink knob
    rsfc+drwa[key=value;...]  with drwa.* overrides; keys "rsfc.KEY" override rsfc.*

A value is a number, true/false or a string ("auto", a path). check_policy() has rsfcd
--check-config the resulting configuration, so a misspelt key stops a run before it starts.
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

import topo as topo_mod

POLICY_FORMS = ("none, off, observe, static:BYTES, rsfc, rsfc[key=value;...], rsfc+drwa, "
                "rsfc+drwa[key=value;...]")


def parse_overrides(text: str) -> dict:
    """"key=value;key=value" -> {key: number, true/false or string} (a policy's [...] part)."""
    params = {}
    for kv in filter(None, text.split(";")):
        k, _, v = kv.partition("=")
        k, v = k.strip(), v.strip()
        if v in ("true", "false"):
            params[k] = v == "true"
            continue
        try:
            num = float(v)
            params[k] = int(num) if num.is_integer() and "." not in v else num
        except ValueError:
            params[k] = v  # "auto", a path
    return params


def policy_config(policy: str) -> dict | None:
    """rsfcd config (merged over topo.DEFAULT_CONFIG) for an uplink policy; None = no daemon.
    ValueError for a string this does not know."""
    if policy == "none":
        return None
    down = {"policy": "off"}
    if policy.startswith("static:"):
        return {"uplink": {"policy": "static", "static_window_bytes": int(policy[7:])},
                "downlink": down}
    if policy in ("off", "observe", "rsfc"):
        return {"uplink": {"policy": policy}, "downlink": down}
    if policy == "rsfc+drwa":  # both knobs: RSFC on the uplink, DRWA on the downlink
        return {"uplink": {"policy": "rsfc"}, "downlink": {"policy": "drwa"}}
    if policy.startswith("rsfc+drwa[") and policy.endswith("]"):
        # both knobs with DRWA parameter overrides, e.g. "rsfc+drwa[lambda=2]"; keys
        # "rsfc.KEY" override rsfc's
        kv = parse_overrides(policy[10:-1])
        return {"uplink": {"policy": "rsfc"}, "downlink": {"policy": "drwa"},
                "drwa": {k: v for k, v in kv.items() if not k.startswith("rsfc.")},
                "rsfc": {k[5:]: v for k, v in kv.items() if k.startswith("rsfc.")}}
    if policy.startswith("rsfc[") and policy.endswith("]"):
        # rsfc with parameter overrides, e.g. "rsfc[fast_target=1.5;drain_fraction=0.9]"
        return {"uplink": {"policy": "rsfc"}, "downlink": down,
                "rsfc": parse_overrides(policy[5:-1])}
    raise ValueError(f"unknown policy {policy!r} ({POLICY_FORMS})")


def check_policy(policy: str) -> None:
    """Rejects a bad policy before anything runs: ValueError for a string policy_config does
    not know, and, when the rsfcd binary is built, for a configuration rsfcd --check-config
    refuses (a misspelt override key would otherwise end a long run with a failed start)."""
    cfg = policy_config(policy)
    binary = topo_mod.rsfcd_binary()
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
    """The policies whose controller decisions rsfcd can log (observe and the rsfc ones)."""
    return policy == "observe" or policy.startswith("rsfc")


def with_decision_log(cfg: dict, path: Path) -> dict:
    """`cfg` with rsfcd's decision log written to `path`."""
    return topo_mod.deep_merge(cfg, {"rsfc": {"decision_log": str(path)}})
