"""Square roots and pseudo-inverses of symmetric positive semi-definite matrices (by eigendecomposition)."""
from __future__ import annotations

import numpy as np


def psd_sqrt(a: np.ndarray) -> np.ndarray:
    """The symmetric PSD square root of (the symmetric part of) ``a``; negative eigenvalues clipped to 0."""
    w, v = np.linalg.eigh((a + a.T) / 2)
    return (v * np.sqrt(np.clip(w, 0, None))) @ v.T


def psd_pinv(a: np.ndarray, rtol: float = 1e-10) -> np.ndarray:
    """Pseudo-inverse of (the symmetric part of) PSD ``a``: eigenvalues at most ``rtol`` · the largest are dropped."""
    w, v = np.linalg.eigh((a + a.T) / 2)
    keep = w > rtol * max(w.max(), 1e-300)
    return (v[:, keep] / w[keep]) @ v[:, keep].T
