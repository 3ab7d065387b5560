"""The budget split of a union of strategies (HDMM OPT_+, Definition 19): each block's share in closed form.

Term j with error E_j at unit sensitivity gets weight c_j. Laplace (Σc_j = 1): c_j ∝ E_j^{1/3}, loss
(Σ E_j^{1/3})³; Gaussian (Σc_j² = 1): c_j ∝ E_j^{1/4}, loss (Σ E_j^{1/2})².
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from privcube.core.errors import ConfigError


def budget_split(term_losses: Sequence[float], noise: str) -> tuple[np.ndarray, float]:
    """Closed-form c_j minimising Σ E_j / c_j² under Σ c_j = 1 (Laplace) or Σ c_j² = 1 (Gaussian)."""
    e = np.asarray(term_losses, dtype=float)
    if noise == "laplace":
        r = np.cbrt(e)
        return r / r.sum(), float(r.sum() ** 3)
    if noise == "gaussian":
        r = np.sqrt(e)
        return np.sqrt(r / r.sum()), float(r.sum() ** 2)
    raise ConfigError(f"noise must be 'laplace' or 'gaussian', got {noise!r}")
