"""The ``postprocess`` config key: ``{method, integer, max_iterations, tolerance}``, or ``none`` / false."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from privcube.errors import ConfigError

#: grem-lnn: ADMM on the residual-basis least squares with local non-negativity (default);
#: dykstra: alternating weighted projections; wls: consistent least squares, then the least lift to ≥ 0.
METHODS = ("grem-lnn", "dykstra", "wls")
DEFAULT_METHOD = "grem-lnn"
KEYS = ("method", "integer", "max_iterations", "tolerance")


@dataclass(frozen=True)
class PostprocessSpec:
    """How marginal releases are made non-negative and consistent (post-processing: spends nothing)."""

    method: str = DEFAULT_METHOD
    integer: bool = False
    max_iterations: int = 300
    tolerance: float = 1e-4

    def to_dict(self) -> dict[str, Any]:
        return {"method": self.method, "integer": self.integer, "max_iterations": self.max_iterations,
                "tolerance": self.tolerance}


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
    iters = value.get("max_iterations", PostprocessSpec.max_iterations)
    if isinstance(iters, bool) or not isinstance(iters, int) or iters < 1:
        raise ConfigError(f"postprocess.max_iterations must be a positive integer, got {iters!r}")
    tol = value.get("tolerance", PostprocessSpec.tolerance)
    if isinstance(tol, bool) or not isinstance(tol, (int, float)) or not 0 < float(tol) < 1:
        raise ConfigError(f"postprocess.tolerance must be a number in (0, 1), got {tol!r}")
    return PostprocessSpec(method=method, integer=integer, max_iterations=iters, tolerance=float(tol))


__all__ = ["DEFAULT_METHOD", "KEYS", "METHODS", "PostprocessSpec", "parse_postprocess"]
