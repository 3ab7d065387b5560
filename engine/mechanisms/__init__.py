"""Mechanism registry: config name -> class (imported lazily so unused optimizers cost nothing)."""
from __future__ import annotations

import importlib

from privcube.core.errors import ConfigError

REGISTRY: dict[str, str] = {
    "residual-planner": "privcube.mechanisms.residual_planner:ResidualPlanner",
    "querysmasher": "privcube.mechanisms.querysmasher.mechanism:QuerySmasher",
    "hdmm": "privcube.mechanisms.hdmm.mechanism:HDMM",
    "eigen-design": "privcube.mechanisms.eigen_design:EigenDesign",
    "aim-grem": "privcube.mechanisms.aim_grem.mechanism:AIMGReM",
}


def get_mechanism(name: str):  # noqa: ANN201 - returns a Mechanism subclass
    """The mechanism class registered under ``name``; a ConfigError names unknown ones."""
    if not isinstance(name, str) or name not in REGISTRY:
        raise ConfigError(f"unknown mechanism {name!r}; known: {', '.join(REGISTRY)}")
    module, cls = REGISTRY[name].split(":")
    try:
        return getattr(importlib.import_module(module), cls)
    except (ImportError, AttributeError) as e:
        raise ConfigError(f"mechanism {name!r} is not available in this build ({e})") from None
