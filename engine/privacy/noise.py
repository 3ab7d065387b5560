"""The run's one noise source: OS entropy or a seed, split into streams keyed by measurement identity.

A stream is a pure function of (root entropy, key), so retries, task order and the number of
workers never change the noise a measurement receives. The object pickles with its root entropy:
shipping it to a dask worker lets the worker derive exactly the stream the scheduler would. That
entropy is secret for unseeded runs; ``to_dict`` (what goes into ``ledger.json``) never shows it.

Where the bits come from:

- **Unseeded (the default)**: ``gaussian``, ``laplace`` and ``gumbel`` read a cryptographically
  secure stream, SHAKE-256 in counter mode keyed by SHA-256(128 secret bits from the OS CSPRNG ‖
  key) (:class:`privcube.privacy.csprng.RandomBits`), and turn its 53-bit uniforms into noise with
  numpy (Box–Muller, inverse CDFs). Seeing some noise values tells nothing about others: a PCG64
  stream, by contrast, can be reconstructed from a few hundred of its outputs.
- **Seeded** (``--seed``): numpy PCG64 streams (``generator(*key)``), reproducible by anyone who has
  the seed, which ``ledger.json`` records; for tests and reproducible experiments, not for releases.

``generator(*key)`` is always a PCG64 ``numpy.random.Generator``: for post-processing (sampling
synthetic records, optimiser restarts), not for a mechanism's own randomness. Either way the values
are floating-point: ``noise_sampler: discrete`` (:mod:`privcube.privacy.discrete`) gives exact
integer noise that closes the floating-point attack on such samplers.
"""
from __future__ import annotations

import hashlib
import math
import secrets
from collections.abc import Sequence
from typing import Any

import numpy as np

from privcube.core.errors import BudgetError
from privcube.privacy.keys import KeyPart, as_key, encode_key

def _spawn_key(parts: Sequence[Any]) -> tuple[int, ...]:
    """Eight 32-bit words of SHA-256 of the encoded key: a stable spawn_key (unlike hash())."""
    digest = hashlib.sha256(b"privcube-noise-v1\x00" + encode_key(parts)).digest()
    return tuple(int.from_bytes(digest[i : i + 4], "little") for i in range(0, 32, 4))


class NoiseSource:
    """Root of all randomness in a run; ``generator(*key)`` gives an independent, reproducible stream."""

    __slots__ = ("_entropy", "_seed")
    #: True for sources of exact integer noise (see privacy.discrete); views that forward attributes to a
    #: source (e.g. key-prefixing wrappers) report the source's value
    discrete = False

    def __init__(self, seed: int | None = None) -> None:
        """Seeded (recorded, reproducible) or, with ``seed=None``, 128 bits of OS entropy (not recorded)."""
        if seed is None:
            self._entropy: int = secrets.randbits(128)
            self._seed: int | None = None
        else:
            if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or int(seed) < 0:
                raise BudgetError(f"seed must be a non-negative integer or None, got {seed!r}")
            self._entropy = int(seed)
            self._seed = int(seed)

    @property
    def seeded(self) -> bool:
        """Whether the run is reproducible from a recorded seed."""
        return self._seed is not None

    @property
    def seed(self) -> int | None:
        """The user's seed, or None for OS entropy."""
        return self._seed

    def generator(self, *key: KeyPart) -> np.random.Generator:
        """A PCG64 generator determined by (root entropy, key) alone; distinct keys give independent streams."""
        if not key:
            raise BudgetError("noise key must name the measurement, e.g. ('aim', round, 'age,sex'); got none")
        ss = np.random.SeedSequence(entropy=self._entropy, spawn_key=_spawn_key(key))
        return np.random.Generator(np.random.PCG64(ss))

    def _secure(self, tag: str, key: KeyPart | Sequence[Any]) -> Any:
        """The CSPRNG stream (keyed SHAKE-256) of one measurement of an unseeded source."""
        from privcube.privacy.csprng import RandomBits

        parts = as_key(key)
        if not parts:
            raise BudgetError("noise key must name the measurement, e.g. ('aim', round, 'age,sex'); got none")
        return RandomBits.keyed(self._entropy, "continuous", tag, parts)

    def gaussian(self, key: KeyPart | Sequence[Any], shape: int | tuple[int, ...], sigma: float) -> np.ndarray:
        """N(0, σ²) noise of the given shape from the stream named by ``key`` (CSPRNG when unseeded)."""
        if isinstance(sigma, bool) or not isinstance(sigma, (int, float, np.floating)) or not math.isfinite(sigma) or sigma < 0:
            raise BudgetError(f"sigma must be a non-negative finite number, got {sigma!r}")
        if self.seeded:
            return self.generator(*as_key(key)).normal(0.0, float(sigma), size=shape)
        shp, n = _shape(shape)
        rb = self._secure("gaussian", key)
        m = (n + 1) // 2
        u1 = 1.0 - _unit(rb, m)  # (0, 1]: log is finite
        u2 = _unit(rb, m)
        r = np.sqrt(-2.0 * np.log(u1))
        z = np.concatenate([r * np.cos(2 * np.pi * u2), r * np.sin(2 * np.pi * u2)])[:n]
        return (float(sigma) * z).reshape(shp)

    def laplace(self, key: KeyPart | Sequence[Any], shape: int | tuple[int, ...], scale: float) -> np.ndarray:
        """Laplace(0, b) noise of the given shape from the stream named by ``key`` (CSPRNG when unseeded)."""
        if isinstance(scale, bool) or not isinstance(scale, (int, float, np.floating)) or not math.isfinite(scale) or scale < 0:
            raise BudgetError(f"scale must be a non-negative finite number, got {scale!r}")
        if self.seeded:
            return self.generator(*as_key(key)).laplace(0.0, float(scale), size=shape)
        shp, n = _shape(shape)
        bits = self._secure("laplace", key).uint64(n)
        u = 1.0 - (bits >> np.uint64(11)).astype(np.float64) * 2.0**-53  # (0, 1]
        sign = np.where((bits & np.uint64(1)) == 1, 1.0, -1.0)  # the low bit, unused by u
        return (float(scale) * sign * -np.log(u)).reshape(shp)

    def gumbel(self, key: KeyPart | Sequence[Any], shape: int | tuple[int, ...]) -> np.ndarray:
        """Standard Gumbel noise (the exponential mechanism's Gumbel-max draw; CSPRNG when unseeded).

        Seeded, it equals ``generator(*key).gumbel(size=shape)``.
        """
        if self.seeded:
            return self.generator(*as_key(key)).gumbel(size=shape)
        shp, n = _shape(shape)
        u = 1.0 - _unit(self._secure("gumbel", key), n)  # (0, 1]
        e = -np.log(u)  # standard exponential, >= 0
        with np.errstate(divide="ignore"):
            return (-np.log(e)).reshape(shp)  # e == 0 (probability 2^-53) gives +inf: that candidate wins

    def add_gaussian(self, key: KeyPart | Sequence[Any], values: Any, sigma: float) -> np.ndarray:
        """``values + gaussian(key, values.shape, sigma)``: the release of one measurement.

        Mechanisms should release through this (rather than adding ``gaussian`` themselves) so a
        discrete source can refuse measurements that are not integer-valued.
        """
        v = np.asarray(values, dtype=float)
        return v + self.gaussian(key, v.shape, sigma)

    def add_laplace(self, key: KeyPart | Sequence[Any], values: Any, scale: float) -> np.ndarray:
        """``values + laplace(key, values.shape, scale)``: the release of one measurement."""
        v = np.asarray(values, dtype=float)
        return v + self.laplace(key, v.shape, scale)

    def to_dict(self) -> dict[str, Any]:
        """Public record for ledger.json: whether seeded, and the seed; never the OS entropy."""
        return {"seeded": self.seeded, "seed": self._seed}

    def state(self) -> dict[str, Any]:
        """Full state including the secret root entropy, for shipping to workers; never write it to disk."""
        return {"entropy": self._entropy, "seed": self._seed}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> NoiseSource:
        """Rebuild the source from :meth:`state` (on a worker), yielding identical streams."""
        obj = cls.__new__(cls)
        obj._entropy = int(state["entropy"])
        obj._seed = None if state.get("seed") is None else int(state["seed"])
        return obj

    def __getstate__(self) -> dict[str, Any]:
        """Pickle with the root entropy so dask workers derive the same streams."""
        return self.state()

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Restore from :meth:`__getstate__`."""
        self._entropy = int(state["entropy"])
        self._seed = state.get("seed")

    def __repr__(self) -> str:
        """Show the seed only; the OS entropy stays hidden."""
        return f"NoiseSource(seed={self._seed!r})" if self.seeded else "NoiseSource(<os entropy>)"


def _shape(shape: int | tuple[int, ...]) -> tuple[tuple[int, ...], int]:
    """(shape tuple, number of elements), checked."""
    shp = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    if any(isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 0 for d in shp):
        raise BudgetError(f"shape must be non-negative integers, got {shape!r}")
    shp = tuple(int(d) for d in shp)
    return shp, int(np.prod(shp, dtype=np.int64))


def _unit(rb: Any, n: int) -> np.ndarray:
    """``n`` uniforms on [0, 1) with 53 random bits each, from a RandomBits stream."""
    return (rb.uint64(n) >> np.uint64(11)).astype(np.float64) * 2.0**-53


__all__ = ["NoiseSource"]
