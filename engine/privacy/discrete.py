"""Exact discrete Laplace and discrete Gaussian samplers (Canonne, Kamath & Steinke 2020).

Why not floats. Mironov (2012, "On significance of the least significant bits for differential
privacy") showed that textbook floating-point noise breaks differential privacy: a Laplace sample
computed as ``-b·log(U)`` from a 53-bit uniform ``U`` cannot take every double, and the set of
doubles reachable from ``x + noise`` depends on the true value ``x``. The output distribution is
full of holes whose positions shift with ``x``, so an attacker who sees the low-order bits of one
release can often tell neighbouring datasets apart with certainty. Gaussian samplers built from
floating-point transforms (Box–Muller, ziggurat) leak the same way. Rounding or "snapping" after the
fact only hides part of it.

The samplers here never touch floating point. Every parameter is a rational number
(:class:`fractions.Fraction`), every random draw is a uniform integer from a cryptographically secure
source (:class:`privcube.privacy.csprng.RandomBits`), and every comparison is exact integer
arithmetic, so the output distribution is *exactly* the one the privacy proof assumes:

- :func:`bernoulli_exp` — Bernoulli(exp(−γ)) for rational γ ≥ 0 (CKS Algorithm 1): for γ ≤ 1 draw
  Bernoulli(γ/k) for k = 1, 2, … until the first failure and return whether k is odd; for γ > 1
  multiply ⌊γ⌋ independent Bernoulli(exp(−1)) draws by one Bernoulli(exp(−(γ−⌊γ⌋))).
- :func:`discrete_laplace` — P(x) ∝ exp(−|x|/t) on the integers, t = p/q rational (CKS Algorithm 2):
  a geometric ``X`` with ratio exp(−1/p) built from a uniform remainder and a Bernoulli(exp(−1))
  run, then ``⌊X/q⌋`` with a random sign (rejecting "−0").
- :func:`discrete_gaussian` — P(x) ∝ exp(−x²/(2σ²)), σ² rational (CKS Algorithm 3): propose from
  the discrete Laplace with t = ⌊σ⌋ + 1 and accept with probability exp(−(|y| − σ²/t)²/(2σ²)).

Accounting. The discrete Gaussian with variance parameter σ² added to an integer-valued query of L2
sensitivity Δ is (Δ²/(2σ²))-zCDP (CKS Theorem 4): the same ρ as the continuous Gaussian, see
:func:`discrete_gaussian_rho`. Its variance is slightly *below* σ² (:func:`discrete_gaussian_variance`).
The discrete Laplace with scale t on an integer query of L1 sensitivity Δ is (Δ/t)-DP.

Speed. The scalar samplers are short pure-Python loops: ~4·10⁴ discrete Gaussians (~8·10⁴ discrete
Laplace) per second per core. The ``*_array`` helpers run the *same* algorithms on whole numpy arrays
(uniforms by 64-bit rejection, every intermediate integer checked to stay below 2⁶², the rare
element that would not finishing on the Python-int path), ~2·10⁵ discrete Gaussians and ~4·10⁵
discrete Laplace per second: a 10⁶-cell marginal takes seconds. The batch path needs σ² (or t) with
small numerator and denominator (2abt² < 2⁵⁶ for σ² = a/b), which :func:`round_up_rational` gives;
otherwise the helpers fall back to the scalar loop. ``batch=False`` forces the loop.

:class:`DiscreteNoiseSource` is a drop-in :class:`~privcube.privacy.noise.NoiseSource` whose
``gaussian``/``laplace`` draw from these samplers (σ² and the scale are rounded *up* to a rational, so
never less noise than asked), selected by the config key ``noise_sampler: discrete``.

Integer-valued measurements only. Integer noise on a real-valued query leaks through the lattice:
``q(x) + Z`` keeps the fractional part of ``q(x)``, so answers of neighbouring datasets that differ by
a non-integer are distinguished with certainty. Mechanisms release through
``DiscreteNoiseSource.add_gaussian`` / ``add_laplace``, which refuse (``require_integers``) a
measurement that is not integer-valued: exact counts and integer combinations of them pass;
weighted data and real-valued strategies need ``noise_sampler: continuous``.
"""
from __future__ import annotations

import math
from fractions import Fraction
from numbers import Rational
from typing import Any

import numpy as np

from privcube.core.errors import BudgetError, ConfigError
from privcube.privacy.csprng import RandomBits
from privcube.privacy.keys import KeyPart, as_key
from privcube.privacy.noise import NoiseSource

# A float σ² or scale is rounded up to ~20 significant bits (relative excess < 2⁻¹⁹): never less noise.
_ROUND_BITS = 20
_SMALL = 1 << 24  # rationals with numerator and denominator below this are kept exactly
_LIM = 1 << 62  # the vectorised path keeps every intermediate integer below this (int64/uint64 exact)
_BATCH_MIN = 64  # below this many samples the scalar loop is as fast


# ----------------------------------------------------------------------------------------- validation
def _as_fraction(value: Any, name: str, *, allow_zero: bool = False) -> Fraction:
    """An exact rational from an int, Fraction or finite float (floats convert exactly), checked > 0."""
    if isinstance(value, bool):
        raise BudgetError(f"{name} must be a rational number (int, Fraction or float), got bool {value!r}")
    if isinstance(value, (Rational, int, np.integer)):
        f = Fraction(int(value)) if isinstance(value, np.integer) else Fraction(value)
    elif isinstance(value, (float, np.floating)):
        if not math.isfinite(float(value)):
            raise BudgetError(f"{name} must be finite, got {value!r}")
        f = Fraction(float(value))
    else:
        raise BudgetError(f"{name} must be a rational number (int, Fraction or float), got {type(value).__name__} {value!r}")
    if f < 0 or (f == 0 and not allow_zero):
        raise BudgetError(f"{name} must be {'non-negative' if allow_zero else 'positive'}, got {value!r}")
    return f


def _check_rng(rng: Any) -> RandomBits:
    """The exact samplers need a RandomBits source (not a numpy Generator, whose floats/bits are not CSPRNG)."""
    if not isinstance(rng, RandomBits):
        raise BudgetError(f"rng must be a privcube.privacy.csprng.RandomBits, got {type(rng).__name__}")
    return rng


def round_up_rational(value: float | Fraction, name: str = "value", rel_bits: int = _ROUND_BITS) -> Fraction:
    """value itself if it is a small rational, else the next multiple of 2^(⌊log₂ value⌋−rel_bits) above it.

    Never below ``value`` (never less noise) and at most a factor 1 + 2^(1−rel_bits) above it; the
    result has a numerator of about ``rel_bits`` bits, which keeps the samplers' integers small.
    """
    f = _as_fraction(value, name, allow_zero=True)
    if f == 0 or (f.numerator < _SMALL and f.denominator < _SMALL):
        return f
    e = f.numerator.bit_length() - f.denominator.bit_length()  # ⌊log₂ f⌋ or one less
    k = rel_bits - e
    if k >= 0:
        den = 1 << k
        return Fraction(-((-f.numerator * den) // f.denominator), den)
    step = 1 << (-k)
    return Fraction(-((-f.numerator) // (f.denominator * step)) * step)


# ------------------------------------------------------------------------------- integer core (hot)
def _bern_exp_unit(rng: RandomBits, n: int, d: int, k: int = 1) -> bool:
    """Bernoulli(exp(−n/d)) for 0 ≤ n/d ≤ 1: first failing k of Bernoulli(γ/k), return k odd."""
    while rng._randbelow(d * k) < n:
        k += 1
    return bool(k & 1)


def _bern_exp(rng: RandomBits, n: int, d: int) -> bool:
    """Bernoulli(exp(−n/d)) for any n/d ≥ 0: ⌊γ⌋ draws of Bernoulli(e⁻¹), then the fractional part."""
    while n > d:
        if not _bern_exp_unit(rng, 1, 1):
            return False
        n -= d
    return _bern_exp_unit(rng, n, d)


def _dlap(rng: RandomBits, p: int, q: int) -> int:
    """Discrete Laplace with scale t = p/q (P(y) ∝ exp(−|y|q/p)), CKS Algorithm 2."""
    while True:
        u = rng._randbelow(p)
        if not _bern_exp_unit(rng, u, p):
            continue
        v = 0
        while _bern_exp_unit(rng, 1, 1):
            v += 1
        y = (u + p * v) // q
        if rng._bits(1):
            if y == 0:
                continue
            return -y
        return y


def _dgauss(rng: RandomBits, a: int, b: int) -> int:
    """Discrete Gaussian with σ² = a/b > 0, CKS Algorithm 3 (proposal: discrete Laplace, t = ⌊σ⌋+1)."""
    t = math.isqrt(a // b) + 1
    den = 2 * a * b * t * t
    bt = b * t
    while True:
        y = _dlap(rng, t, 1)
        r = abs(y) * bt - a
        if _bern_exp(rng, r * r, den):
            return y


# ------------------------------------------------------------------ vectorised exact core (numpy)
# The same algorithms run on whole arrays at once. Every quantity is an int64/uint64 kept below 2⁶²
# (checked; rare out-of-range elements finish on the Python-int scalar path), so nothing is rounded.
def _v_below(rng: RandomBits, n: np.ndarray) -> np.ndarray:
    """Independent uniforms on [0, n_i) for an int64 array 1 ≤ n_i < 2⁶²: 64-bit draws with rejection."""
    nu = n.astype(np.uint64)
    out = np.empty(n.shape, dtype=np.uint64)
    todo = np.arange(n.size)
    while todo.size:
        v = rng.uint64(todo.size)
        m = nu[todo]
        ok = v < (np.uint64(0xFFFFFFFFFFFFFFFF) // m) * m  # a whole number of copies of [0, m)
        out[todo[ok]] = v[ok] % m[ok]
        todo = todo[~ok]
    return out.astype(np.int64)


def _v_bern_exp_unit(rng: RandomBits, n: np.ndarray, d: np.ndarray) -> np.ndarray:
    """Vectorised Bernoulli(exp(−n_i/d_i)), 0 ≤ n_i ≤ d_i < 2⁶² (CKS Algorithm 1 on arrays)."""
    k = np.ones(n.shape, dtype=np.int64)
    idx = np.arange(n.size)
    while idx.size:
        kk, dd = k[idx], d[idx]
        big = kk > (_LIM - 1) // dd  # d·k would leave the exact range: finish on Python ints
        for i in idx[big]:
            k[i] = 1 if _bern_exp_unit(rng, int(n[i]), int(d[i]), int(k[i])) else 2
        idx, kk, dd = idx[~big], kk[~big], dd[~big]
        a = _v_below(rng, dd * kk) < n[idx]
        k[idx[a]] += 1
        idx = idx[a]
    return (k & 1).astype(bool)


def _v_bern_exp(rng: RandomBits, n: np.ndarray, d: np.ndarray) -> np.ndarray:
    """Vectorised Bernoulli(exp(−n_i/d_i)) for any 0 ≤ n_i, 1 ≤ d_i < 2⁶²."""
    m = n // d
    alive = np.ones(n.shape, dtype=bool)
    j = 0
    while True:  # ⌊γ⌋ rounds of Bernoulli(e⁻¹); an element leaves at its first failure
        sel = np.flatnonzero(alive & (m > j))
        if not sel.size:
            break
        one = np.ones(sel.size, dtype=np.int64)
        alive[sel] = _v_bern_exp_unit(rng, one, one)
        j += 1
    live = np.flatnonzero(alive)
    alive[live] = _v_bern_exp_unit(rng, n[live] - m[live] * d[live], d[live])
    return alive


def _v_dlap(rng: RandomBits, p: int, q: int, size: int) -> np.ndarray:
    """``size`` discrete Laplace draws with scale p/q (CKS Algorithm 2 on arrays); p, q < 2⁴⁰."""
    out = np.empty(size, dtype=np.int64)
    idx = np.arange(size)
    while idx.size:
        m = idx.size
        pp = np.full(m, p, dtype=np.int64)
        u = _v_below(rng, pp)
        ok = _v_bern_exp_unit(rng, u, pp)
        v = np.zeros(m, dtype=np.int64)
        run = np.flatnonzero(ok)
        while run.size:  # geometric run of Bernoulli(e⁻¹) successes
            one = np.ones(run.size, dtype=np.int64)
            hit = _v_bern_exp_unit(rng, one, one)
            v[run[hit]] += 1
            run = run[hit]
        # |y| ≥ 2⁶¹/q cannot be stored in int64 at all; such a draw (probability < e^{−2²¹} for p < 2⁴⁰)
        # is rejected rather than wrapped: a deviation from the exact law far below 2⁻¹⁰⁰⁰⁰⁰⁰.
        big = v > (_LIM >> 1) // p
        ok &= ~big
        y = (u + p * np.where(big, 0, v)) // q
        neg = _v_below(rng, np.full(m, 2, dtype=np.int64)).astype(bool)
        ok &= ~(neg & (y == 0))
        out[idx[ok]] = np.where(neg, -y, y)[ok]
        idx = idx[~ok]
    return out


def _v_dgauss(rng: RandomBits, a: int, b: int, size: int) -> np.ndarray:
    """``size`` discrete Gaussian draws with σ² = a/b (CKS Algorithm 3 on arrays); needs 2abt² < 2⁵⁶."""
    t = math.isqrt(a // b) + 1
    den = 2 * a * b * t * t
    bt = b * t
    rmax = math.isqrt(_LIM - 1)
    out = np.empty(size, dtype=np.int64)
    idx = np.arange(size)
    while idx.size:
        y = _v_dlap(rng, t, 1, idx.size)
        ay = np.abs(y)
        far = ay > (rmax + a) // bt  # (|y|·b·t − a)² would leave the exact range: Python ints
        acc = np.zeros(idx.size, dtype=bool)
        for i in np.flatnonzero(far):
            r = int(ay[i]) * bt - a
            acc[i] = _bern_exp(rng, r * r, den)
        near = np.flatnonzero(~far)
        r = ay[near] * bt - a
        acc[near] = _v_bern_exp(rng, r * r, np.full(near.size, den, dtype=np.int64))
        out[idx[acc]] = y[acc]
        idx = idx[~acc]
    return out


def _batch_ok_dgauss(a: int, b: int) -> bool:
    """Whether σ² = a/b is small enough in bits for the exact int64 batch path."""
    t = math.isqrt(a // b) + 1
    return 2 * a * b * t * t < (1 << 56) and b * t < (1 << 40)


# ----------------------------------------------------------------------------------- public samplers
def bernoulli_exp(gamma: Fraction | int, rng: RandomBits) -> bool:
    """True with probability exactly exp(−γ), for rational γ ≥ 0 (CKS Algorithm 1)."""
    g = _as_fraction(gamma, "gamma", allow_zero=True)
    return _bern_exp(_check_rng(rng), g.numerator, g.denominator)


def discrete_laplace(t: Fraction | int, rng: RandomBits) -> int:
    """One integer x with P(x) ∝ exp(−|x|/t), rational scale t > 0 (CKS Algorithm 2)."""
    f = _as_fraction(t, "t")
    return _dlap(_check_rng(rng), f.numerator, f.denominator)


def discrete_gaussian(sigma2: Fraction | int, rng: RandomBits) -> int:
    """One integer x with P(x) ∝ exp(−x²/(2σ²)), rational σ² > 0 (CKS Algorithm 3)."""
    f = _as_fraction(sigma2, "sigma2")
    return _dgauss(_check_rng(rng), f.numerator, f.denominator)


def _shape_size(shape: int | tuple[int, ...]) -> tuple[tuple[int, ...], int]:
    """Normalise a numpy-style shape and return it with its element count."""
    shp = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    for s in shp:
        if isinstance(s, bool) or not isinstance(s, (int, np.integer)) or int(s) < 0:
            raise BudgetError(f"shape must be non-negative integers, got {shape!r}")
    shp = tuple(int(s) for s in shp)
    return shp, int(np.prod(shp, dtype=np.int64)) if shp else 1


def discrete_gaussian_array(sigma2: Fraction | int, shape: int | tuple[int, ...], rng: RandomBits,
                            *, batch: bool = True) -> np.ndarray:
    """int64 array of independent discrete Gaussians (σ²): exact numpy batch path, or the scalar loop."""
    f = _as_fraction(sigma2, "sigma2")
    rng = _check_rng(rng)
    shp, n = _shape_size(shape)
    a, b = f.numerator, f.denominator
    if batch and n >= _BATCH_MIN and _batch_ok_dgauss(a, b):
        return _v_dgauss(rng, a, b, n).reshape(shp)
    return np.fromiter((_dgauss(rng, a, b) for _ in range(n)), dtype=np.int64, count=n).reshape(shp)


def discrete_laplace_array(t: Fraction | int, shape: int | tuple[int, ...], rng: RandomBits,
                           *, batch: bool = True) -> np.ndarray:
    """int64 array of independent discrete Laplace draws (scale t): exact numpy batch path, or the loop."""
    f = _as_fraction(t, "t")
    rng = _check_rng(rng)
    shp, n = _shape_size(shape)
    p, q = f.numerator, f.denominator
    if batch and n >= _BATCH_MIN and p < (1 << 40) and q < (1 << 40):
        return _v_dlap(rng, p, q, n).reshape(shp)
    return np.fromiter((_dlap(rng, p, q) for _ in range(n)), dtype=np.int64, count=n).reshape(shp)


# ---------------------------------------------------------------------------------- theory / accounting
def discrete_gaussian_variance(sigma2: Fraction | float) -> float:
    """Exact variance Σx²e^{−x²/2σ²} / Σe^{−x²/2σ²} over the integers (series, float64 precision)."""
    s2 = float(_as_fraction(sigma2, "sigma2"))
    m = int(math.ceil(40.0 * math.sqrt(s2))) + 2  # terms beyond e^{-800} vanish in float64
    x = np.arange(1, m + 1, dtype=np.float64)
    w = np.exp(-x * x / (2.0 * s2))
    return float(2.0 * np.sum(x * x * w) / (1.0 + 2.0 * np.sum(w)))


def discrete_laplace_variance(t: Fraction | float) -> float:
    """Exact variance 2q/(1−q)² of the discrete Laplace with scale t, q = e^{−1/t}."""
    tt = float(_as_fraction(t, "t"))
    q = math.exp(-1.0 / tt)
    one_minus_q = -math.expm1(-1.0 / tt)
    return 2.0 * q / (one_minus_q * one_minus_q)


def discrete_gaussian_rho(sigma2: Fraction | float, l2: float = 1.0) -> float:
    """ρ = Δ²/(2σ²): zCDP of discrete Gaussian noise on an integer query of L2 sensitivity Δ (CKS Thm 4)."""
    s2 = _as_fraction(sigma2, "sigma2")
    if isinstance(l2, bool) or not isinstance(l2, (int, float, np.integer, np.floating, Rational)) \
            or not math.isfinite(float(l2)) or float(l2) <= 0:
        raise BudgetError(f"l2 must be a positive finite number, got {l2!r}")
    return float(l2) ** 2 / (2.0 * float(s2))


def discrete_laplace_epsilon(t: Fraction | float, l1: float = 1.0) -> float:
    """ε = Δ/t: pure DP of discrete Laplace noise (scale t) on an integer query of L1 sensitivity Δ."""
    tt = _as_fraction(t, "t")
    if isinstance(l1, bool) or not isinstance(l1, (int, float, np.integer, np.floating, Rational)) \
            or not math.isfinite(float(l1)) or float(l1) <= 0:
        raise BudgetError(f"l1 must be a positive finite number, got {l1!r}")
    return float(l1) / float(tt)


# ------------------------------------------------------------------------------------- noise source
class DiscreteNoiseSource(NoiseSource):
    """A NoiseSource whose gaussian/laplace are exact discrete samplers (integer-valued float arrays).

    Each ``key`` gets a keyed SHAKE-256 DRBG stream over (root entropy, key): the user's seed when
    seeded (reruns reproduce), else 128 secret bits from the OS CSPRNG. Keying by the measurement
    identity means a retried task redraws the *same* noise, so a retry never releases a second,
    independent sample of one measurement. ``generator(*key)`` is inherited unchanged.
    """

    __slots__ = ()
    discrete = True

    def _bits(self, tag: str, key: KeyPart | Any) -> RandomBits:
        """The uniform source for one measurement: a DRBG keyed by (root entropy, measurement key)."""
        parts = as_key(key)
        if not parts:
            raise BudgetError("noise key must name the measurement, e.g. ('aim', round, 'age,sex'); got none")
        return RandomBits.keyed(self._entropy, "discrete", tag, parts)

    def gaussian(self, key: KeyPart | Any, shape: int | tuple[int, ...], sigma: float) -> np.ndarray:
        """Discrete Gaussian noise with σ² = sigma² rounded up to a rational, as a float array of integers."""
        if isinstance(sigma, bool) or not isinstance(sigma, (int, float, np.integer, np.floating, Rational)) \
                or not math.isfinite(float(sigma)) or sigma < 0:
            raise BudgetError(f"sigma must be a non-negative finite number, got {sigma!r}")
        shp, _ = _shape_size(shape)
        s2 = round_up_rational(_as_fraction(sigma, "sigma", allow_zero=True) ** 2, "sigma")
        rng = self._bits("gaussian", key)
        if s2 == 0:
            return np.zeros(shp, dtype=np.float64)
        return discrete_gaussian_array(s2, shp, rng).astype(np.float64)

    def laplace(self, key: KeyPart | Any, shape: int | tuple[int, ...], scale: float) -> np.ndarray:
        """Discrete Laplace noise with scale rounded up to a rational, as a float array of integers."""
        if isinstance(scale, bool) or not isinstance(scale, (int, float, np.integer, np.floating, Rational)) \
                or not math.isfinite(float(scale)) or scale < 0:
            raise BudgetError(f"scale must be a non-negative finite number, got {scale!r}")
        shp, _ = _shape_size(shape)
        t = round_up_rational(scale, "scale")
        rng = self._bits("laplace", key)
        if t == 0:
            return np.zeros(shp, dtype=np.float64)
        return discrete_laplace_array(t, shp, rng).astype(np.float64)

    def add_gaussian(self, key: KeyPart | Any, values: Any, sigma: float) -> np.ndarray:
        """``values + discrete Gaussian noise``; ``values`` must be integer-valued (see ``require_integers``)."""
        v = require_integers(values, key)
        return v + self.gaussian(key, v.shape, sigma)

    def add_laplace(self, key: KeyPart | Any, values: Any, scale: float) -> np.ndarray:
        """``values + discrete Laplace noise``; ``values`` must be integer-valued (see ``require_integers``)."""
        v = require_integers(values, key)
        return v + self.laplace(key, v.shape, scale)

    def to_dict(self) -> dict[str, Any]:
        """Public record for ledger.json: seeded flag, seed and ``sampler: discrete``."""
        return {**super().to_dict(), "sampler": "discrete"}

    def __repr__(self) -> str:
        """Show the seed only; the OS entropy stays hidden."""
        return f"DiscreteNoiseSource(seed={self._seed!r})" if self.seeded else "DiscreteNoiseSource(<os csprng>)"


def require_integers(values: Any, key: KeyPart | Any = None) -> np.ndarray:
    """``values`` as a float array, or ConfigError if any entry is not a finite integer.

    Integer noise on a real-valued query is not private: the release ``q(x) + Z`` lies on the lattice
    ``q(x) + ℤᵐ``, so its fractional parts are those of ``q(x)`` itself, and neighbouring datasets whose
    answers differ by a non-integer are told apart with certainty (e.g. a strategy row with weight
    1/2 reveals the parity of a count). Exact counts, and integer combinations of them, are fine;
    weighted data or real-valued strategies (HDMM, QuerySmasher bases) need ``noise_sampler:
    continuous``. The message names the measurement, never a value.
    """
    v = np.asarray(values, dtype=float)
    if not np.all(np.isfinite(v)) or not np.array_equal(v, np.round(v)):
        what = "" if key is None else f" {list(as_key(key))!r}"
        raise ConfigError(f"noise_sampler: discrete adds integer noise, which is private only for integer-valued "
                          f"measurements; measurement{what} is not integer-valued (weighted data or a real-valued "
                          f"strategy): use noise_sampler: continuous")
    return v


NOISE_SAMPLERS = ("continuous", "discrete")


def is_discrete(noise: Any) -> bool:
    """Whether ``noise`` (a source, or a view forwarding to one) draws exact discrete (integer) noise."""
    return bool(getattr(noise, "discrete", False))


def make_noise_source(seed: int | None = None, sampler: str = "continuous") -> NoiseSource:
    """The run's noise source for config ``noise_sampler`` ("continuous" float, or "discrete" exact)."""
    if sampler == "discrete":
        return DiscreteNoiseSource(seed)
    if sampler in ("continuous", "float"):
        return NoiseSource(seed)
    raise ConfigError(f"noise_sampler must be one of {list(NOISE_SAMPLERS)}, got {sampler!r}")


__all__ = [
    "DiscreteNoiseSource", "NOISE_SAMPLERS", "bernoulli_exp", "discrete_gaussian", "discrete_gaussian_array",
    "discrete_gaussian_rho", "discrete_gaussian_variance", "discrete_laplace", "discrete_laplace_array",
    "discrete_laplace_epsilon", "discrete_laplace_variance", "is_discrete", "make_noise_source", "require_integers",
    "round_up_rational",
]
