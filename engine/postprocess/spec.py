"""The ``postprocess`` config key: ``{method, integer, max_iterations, tolerance, model_cells}``, or ``none``."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from privcube.core.errors import ConfigError
from privcube.core.params import Param

#: pgm: the graphical model that best explains the measurements (default; issue 32); grem-lnn: ADMM on the
#: residual-basis least squares with local non-negativity; dykstra: alternating weighted projections; wls:
#: consistent least squares, then the least lift to ≥ 0.
METHODS = ("pgm", "grem-lnn", "dykstra", "wls")
DEFAULT_METHOD = "pgm"
#: per method: (max_iterations, tolerance); pgm's tolerance is in standard deviations of the loss's noise
DEFAULTS = {"pgm": (1000, 1e-3), "grem-lnn": (300, 1e-4), "dykstra": (300, 1e-4), "wls": (300, 1e-4)}
DEFAULT_MODEL_CELLS = 1_000_000
#: the keys of a ``postprocess`` mapping (None: the method's default, see DEFAULTS)
PARAMS: dict[str, Param] = {
    "method": Param(DEFAULT_METHOD, " | ".join(METHODS), "how the noisy marginals are made consistent and >= 0"),
    "integer": Param(False, "bool", "round the published answers to integers"),
    "max_iterations": Param(None, "int >= 1", "iteration cap (default: 1000 for pgm, else 300)"),
    "tolerance": Param(None, "number in (0, 1)", "stopping tolerance (default: 1e-3 for pgm, in noise standard "
                                                 "deviations; else 1e-4)"),
    "model_cells": Param(DEFAULT_MODEL_CELLS, "int >= 2", "pgm only: the graphical model's public cell budget"),
}
KEYS = tuple(PARAMS)


@dataclass(frozen=True)
class PostprocessSpec:
    """How marginal releases are made non-negative and consistent (post-processing: spends nothing).
    ``max_iterations`` / ``tolerance`` of None take the method's defaults (:data:`DEFAULTS`)."""

    method: str = DEFAULT_METHOD
    integer: bool = False
    max_iterations: int | None = None
    tolerance: float | None = None
    model_cells: int = DEFAULT_MODEL_CELLS

    @property
    def iterations(self) -> int:
        """The iteration cap in force."""
        return self.max_iterations if self.max_iterations is not None else DEFAULTS[self.method][0]

    @property
    def tol(self) -> float:
        """The stopping tolerance in force."""
        return self.tolerance if self.tolerance is not None else DEFAULTS[self.method][1]

    def to_dict(self) -> dict[str, Any]:
        out = {"method": self.method, "integer": self.integer, "max_iterations": self.iterations,
               "tolerance": self.tol}
        if self.method == "pgm":
            out["model_cells"] = self.model_cells
        return out


def parse_postprocess(value: Any) -> PostprocessSpec | None:
    """The validated ``postprocess`` value: None when turned off (``none``, ``false``, ``null``), else a spec
    (absent key: the default). Bad keys or values: one ConfigError naming the key."""
    if value is None or value is False or (isinstance(value, str) and value.strip().lower() == "none"):
        return None
    if value is True:
        return PostprocessSpec()
    if isinstance(value, str):
        value = {"method": value}
    if not isinstance(value, Mapping):
        raise ConfigError(f"postprocess: expected none or a mapping {{method, integer}}, got {value!r}")
    bad = sorted(set(map(str, value)) - set(KEYS))
    if bad:
        raise ConfigError(f"postprocess: unknown key(s) {bad}; known: {list(KEYS)}")
    method = value.get("method", DEFAULT_METHOD)
    if method not in METHODS:
        raise ConfigError(f"postprocess.method must be one of {', '.join(METHODS)}, got {method!r}")
    integer = value.get("integer", False)
    if not isinstance(integer, bool):
        raise ConfigError(f"postprocess.integer must be true or false, got {integer!r}")
    iters = value.get("max_iterations")
    if iters is not None and (isinstance(iters, bool) or not isinstance(iters, int) or iters < 1):
        raise ConfigError(f"postprocess.max_iterations must be a positive integer, got {iters!r}")
    tol = value.get("tolerance")
    if tol is not None and (isinstance(tol, bool) or not isinstance(tol, (int, float)) or not 0 < float(tol) < 1):
        raise ConfigError(f"postprocess.tolerance must be a number in (0, 1), got {tol!r}")
    cells = value.get("model_cells", DEFAULT_MODEL_CELLS)
    if isinstance(cells, bool) or not isinstance(cells, (int, float)) or not cells >= 2 or cells != int(cells):
        raise ConfigError(f"postprocess.model_cells must be an integer >= 2, got {cells!r}")
    if "model_cells" in value and method != "pgm":
        raise ConfigError(f"postprocess.model_cells applies to method pgm only, not {method!r}")
    return PostprocessSpec(method=method, integer=integer, max_iterations=iters,
                           tolerance=None if tol is None else float(tol), model_cells=int(cells))


__all__ = ["DEFAULTS", "DEFAULT_METHOD", "DEFAULT_MODEL_CELLS", "KEYS", "METHODS", "PostprocessSpec",
           "parse_postprocess"]
