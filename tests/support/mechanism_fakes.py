"""Test doubles for mechanism runs: noise sources (none, or seeded i.i.d.) and a recording ledger."""
from __future__ import annotations

from typing import Any

import numpy as np


class ZeroNoise:
    """A noise source that adds nothing (σ → 0): noiseless runs must reconstruct exactly."""

    def gaussian(self, key: Any, shape: tuple[int, ...], sigma: float) -> np.ndarray:
        return np.zeros(shape)

    def add_gaussian(self, key: Any, values: Any, sigma: float) -> np.ndarray:
        return np.asarray(values, dtype=float) + self.gaussian(key, np.shape(values), sigma)


class RngNoise:
    """Seeded i.i.d. Gaussian noise for Monte-Carlo checks; records the measurement keys it was asked for."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.keys: list = []

    def gaussian(self, key: Any, shape: tuple[int, ...], sigma: float) -> np.ndarray:
        self.keys.append(key)
        return self.rng.normal(0.0, sigma, size=shape)

    def add_gaussian(self, key: Any, values: Any, sigma: float) -> np.ndarray:
        return np.asarray(values, dtype=float) + self.gaussian(key, np.shape(values), sigma)


class RecordingLedger:
    """Keeps every charge and the running ρ total."""

    def __init__(self) -> None:
        self.charges: list[dict] = []
        self.rho = 0.0

    def charge(self, label: str, *, rho: float | None = None, epsilon: float | None = None, delta: float = 0.0,
               **details: Any) -> None:
        self.charges.append({"label": label, "rho": rho, **details})
        self.rho += rho or 0.0
