"""Exact discrete samplers (CKS 2020) and the CSPRNG: moments, tails and pmf against closed forms."""
from __future__ import annotations

import math
import pickle
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from privcube.core.errors import BudgetError, ConfigError
from privcube.privacy import discrete
from privcube.privacy.csprng import RandomBits
from privcube.privacy.discrete import (
    DiscreteNoiseSource,
    bernoulli_exp,
    discrete_gaussian,
    discrete_gaussian_array,
    discrete_gaussian_rho,
    discrete_gaussian_variance,
    discrete_laplace,
    discrete_laplace_array,
    discrete_laplace_epsilon,
    discrete_laplace_variance,
    make_noise_source,
    round_up_rational,
)
from privcube.privacy.noise import NoiseSource
from privcube.privacy.primitives import gaussian_rho

N = 20_000
Z_TOL = 5.0  # tolerances are 5 standard errors: a correct sampler fails with probability < 1e-6


# ------------------------------------------------------------------ theory, written out independently
def dgauss_pmf(sigma2: float, support: np.ndarray) -> np.ndarray:
    """P(x) = e^{-x²/2σ²} / Σ_y e^{-y²/2σ²}, normaliser summed over |y| ≤ 60σ + 10."""
    m = int(60 * math.sqrt(sigma2)) + 10
    y = np.arange(-m, m + 1, dtype=float)
    z = np.exp(-y * y / (2 * sigma2)).sum()
    return np.exp(-support.astype(float) ** 2 / (2 * sigma2)) / z


def dlap_pmf(t: float, support: np.ndarray) -> np.ndarray:
    """P(x) = (1−q)/(1+q) q^{|x|}, q = e^{−1/t}."""
    q = math.exp(-1 / t)
    return (1 - q) / (1 + q) * q ** np.abs(support).astype(float)


def moments(pmf, param: float, half_width: int) -> tuple[float, float]:
    """(variance, fourth central moment) of a symmetric integer pmf, summed over |x| ≤ half_width."""
    x = np.arange(-half_width, half_width + 1)
    p = pmf(param, x)
    xf = x.astype(float)
    return float((p * xf**2).sum()), float((p * xf**4).sum())


def check_sample(sample: np.ndarray, pmf, param: float, half_width: int) -> None:
    """Mean ≈ 0, variance and P(|X| ≥ k) within 5 SE of theory, and a chi-square pmf test."""
    n = sample.size
    var, m4 = moments(pmf, param, half_width)
    assert abs(sample.mean()) <= Z_TOL * math.sqrt(var / n)
    se_var = math.sqrt((m4 - var * var) / n)
    assert abs(np.mean(sample.astype(float) ** 2) - var) <= Z_TOL * se_var
    sd = math.sqrt(var)
    for k in sorted({1, max(1, round(sd)), max(2, round(2 * sd)), max(3, round(3 * sd))}):
        x = np.arange(k, half_width + 1)
        p_tail = 2 * float(pmf(param, x).sum())
        freq = float(np.mean(np.abs(sample) >= k))
        assert abs(freq - p_tail) <= Z_TOL * math.sqrt(p_tail * (1 - p_tail) / n) + 1e-4, (k, freq, p_tail)
    # chi-square over the central cells (expected count ≥ 20) plus the two pooled tails
    cells = np.arange(-half_width, half_width + 1)
    probs = pmf(param, cells)
    keep = cells[probs * n >= 20]
    lo, hi = keep.min(), keep.max()
    obs = [np.sum(sample < lo)] + [np.sum(sample == c) for c in range(lo, hi + 1)] + [np.sum(sample > hi)]
    exp_p = np.concatenate([[probs[cells < lo].sum()], probs[(cells >= lo) & (cells <= hi)], [probs[cells > hi].sum()]])
    mask = exp_p * n > 0
    obs_a = np.asarray(obs, dtype=float)[mask]
    exp_a = exp_p[mask] / exp_p[mask].sum() * n
    assert stats.chisquare(obs_a, exp_a).pvalue > 1e-5


# ------------------------------------------------------------------------------------- samplers
@pytest.mark.parametrize("batch", [True, False], ids=["batch", "scalar"])
@pytest.mark.parametrize("sigma2", [Fraction(1, 2), Fraction(3), Fraction(20)])
def test_discrete_gaussian_matches_theory(sigma2: Fraction, batch: bool) -> None:
    sample = discrete_gaussian_array(sigma2, N, RandomBits.keyed(2020, "dgauss", str(sigma2)), batch=batch)
    assert sample.dtype == np.int64 and sample.shape == (N,)
    check_sample(sample, dgauss_pmf, float(sigma2), int(12 * math.sqrt(float(sigma2))) + 6)


@pytest.mark.parametrize("batch", [True, False], ids=["batch", "scalar"])
@pytest.mark.parametrize("t", [Fraction(1, 2), Fraction(3), Fraction(20), Fraction(7, 3)])
def test_discrete_laplace_matches_theory(t: Fraction, batch: bool) -> None:
    sample = discrete_laplace_array(t, N, RandomBits.keyed(2020, "dlap", str(t)), batch=batch)
    assert sample.dtype == np.int64
    check_sample(sample, dlap_pmf, float(t), int(40 * float(t)) + 10)


def test_batch_fallbacks_to_python_ints_stay_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    # Bernoulli(exp(-1/2)) with d = 2^61: d·k leaves the int64 range at k = 2, so most draws finish
    # on the scalar continuation.
    n = 4000
    d = np.full(n, 1 << 61, dtype=np.int64)
    hits = discrete._v_bern_exp_unit(RandomBits.keyed(9, "fallback"), d // 2, d)
    p = math.exp(-0.5)
    assert abs(hits.mean() - p) <= Z_TOL * math.sqrt(p * (1 - p) / n)
    # Shrink the exact range so many acceptance tests take the Python-int branch of _v_dgauss.
    monkeypatch.setattr(discrete, "_LIM", 1 << 9)  # rmax = 22: |y| > 8 goes to Python ints
    sample = discrete._v_dgauss(RandomBits.keyed(9, "far"), 20, 1, N)
    check_sample(sample, dgauss_pmf, 20.0, 60)


def test_discrete_gaussian_os_source_matches_theory() -> None:
    sample = discrete_gaussian_array(Fraction(7, 3), N, RandomBits.os())
    check_sample(sample, dgauss_pmf, 7 / 3, 25)


def test_variance_series_against_closed_forms() -> None:
    # σ² = 1/2: P(x) ∝ e^{-x²}; four terms reach float precision.
    z = 1 + 2 * sum(math.exp(-k * k) for k in range(1, 8))
    v = 2 * sum(k * k * math.exp(-k * k) for k in range(1, 8)) / z
    assert discrete_gaussian_variance(Fraction(1, 2)) == pytest.approx(v, rel=1e-13)
    # Poisson summation: var = σ²(1 − O(σ² e^{−2π²σ²})) — indistinguishable from σ² once σ² ≥ 3.
    for s2 in (3, 20, 1000):
        assert discrete_gaussian_variance(s2) == pytest.approx(s2, rel=1e-12)
    assert discrete_gaussian_variance(Fraction(1, 10)) < 0.1  # strictly below σ² for small σ
    for t in (0.5, 3.0, 20.0):
        q = math.exp(-1 / t)
        assert discrete_laplace_variance(t) == pytest.approx(2 * q / (1 - q) ** 2, rel=1e-12)
    assert discrete_laplace_variance(1000) == pytest.approx(2 * 1000**2, rel=1e-5)  # → 2t² (continuous)


@pytest.mark.parametrize("gamma", [Fraction(0), Fraction(1, 3), Fraction(1), Fraction(5, 2)])
def test_bernoulli_exp_frequency(gamma: Fraction) -> None:
    rng = RandomBits.keyed(5, "bexp", str(gamma))
    p = math.exp(-float(gamma))
    freq = sum(bernoulli_exp(gamma, rng) for _ in range(N)) / N
    assert abs(freq - p) <= Z_TOL * math.sqrt(p * (1 - p) / N) + 1e-12


def test_scalar_samplers_return_ints_and_validate() -> None:
    rng = RandomBits.keyed(1, "scalar")
    assert isinstance(discrete_gaussian(Fraction(9, 4), rng), int)
    assert isinstance(discrete_laplace(2, rng), int)
    with pytest.raises(BudgetError, match="sigma2"):
        discrete_gaussian(Fraction(-1), rng)
    with pytest.raises(BudgetError, match="sigma2"):
        discrete_gaussian(0, rng)
    with pytest.raises(BudgetError, match="t must"):
        discrete_laplace(float("inf"), rng)
    with pytest.raises(BudgetError, match="gamma"):
        bernoulli_exp(Fraction(-1, 2), rng)
    with pytest.raises(BudgetError, match="rng"):
        discrete_gaussian(1, np.random.default_rng(0))
    with pytest.raises(BudgetError, match="shape"):
        discrete_gaussian_array(1, (2, -1), rng)


def test_accounting_matches_continuous_gaussian() -> None:
    assert discrete_gaussian_rho(Fraction(1, 2), 1.0) == 1.0
    assert discrete_gaussian_rho(8, 2.0) == pytest.approx(gaussian_rho(math.sqrt(8), 2.0))
    assert discrete_laplace_epsilon(Fraction(1, 2), 1) == 2.0
    with pytest.raises(BudgetError, match="l2"):
        discrete_gaussian_rho(1, 0)


def test_round_up_never_less_noise() -> None:
    for s in (0.1, 1 / 3, 2.718281828, 1e-3, 12345.678, 1e9 + 0.5):
        exact = Fraction(s) ** 2
        r = round_up_rational(exact, "sigma")
        assert exact <= r <= exact * (1 + Fraction(1, 2**19))
        assert r.numerator < 2**23 or r.denominator == 1  # small enough for the exact batch path
    for keep in (Fraction(9, 4), Fraction(3), Fraction(0)):
        assert round_up_rational(keep) == keep


# ------------------------------------------------------------------------------------- CSPRNG
def test_randombits_keyed_reproduces_and_separates() -> None:
    a, b = RandomBits.keyed(7, "m", 1), RandomBits.keyed(7, "m", 1)
    assert a.randbytes(10_000) == b.randbytes(10_000)  # crosses a block boundary
    assert RandomBits.keyed(7, "m", 1).randbytes(64) != RandomBits.keyed(7, "m", 2).randbytes(64)
    assert RandomBits.keyed(7, "m", 1).randbytes(64) != RandomBits.keyed(8, "m", 1).randbytes(64)
    assert RandomBits.keyed(7, "1").randbytes(64) != RandomBits.keyed(7, 1).randbytes(64)  # typed keys
    assert RandomBits.os().randbytes(32) != RandomBits.os().randbytes(32)
    with pytest.raises(BudgetError, match="key"):
        RandomBits.keyed(7)
    with pytest.raises(BudgetError, match="seed"):
        RandomBits.keyed(-1, "a")
    with pytest.raises(TypeError):
        pickle.dumps(RandomBits.os())


def test_randbelow_and_bernoulli_are_exact_uniform() -> None:
    rng = RandomBits.keyed(3, "uniform")
    draws = np.array([rng.randbelow(6) for _ in range(12_000)])
    assert draws.min() == 0 and draws.max() == 5
    assert stats.chisquare(np.bincount(draws, minlength=6)).pvalue > 1e-5
    freq = sum(rng.bernoulli(1, 3) for _ in range(12_000)) / 12_000
    assert abs(freq - 1 / 3) <= Z_TOL * math.sqrt(2 / 9 / 12_000)
    assert rng.randbelow(1) == 0 and rng.bernoulli(0, 5) is False and rng.bernoulli(5, 5) is True
    with pytest.raises(BudgetError, match="num"):
        rng.bernoulli(4, 3)
    with pytest.raises(BudgetError, match="n must"):
        rng.randbelow(0)


# ------------------------------------------------------------------------------------- noise source
def test_discrete_noise_source_interface() -> None:
    src = DiscreteNoiseSource(seed=11)
    assert isinstance(src, NoiseSource)
    g = src.gaussian(("aim", 1, "age,sex"), (40, 50), 1.5)
    assert g.shape == (40, 50) and g.dtype == np.float64 and np.all(g == np.round(g))
    assert np.array_equal(g, DiscreteNoiseSource(seed=11).gaussian(("aim", 1, "age,sex"), (40, 50), 1.5))
    assert not np.array_equal(g, src.gaussian(("aim", 2, "age,sex"), (40, 50), 1.5))
    lap = src.laplace("q", 500, 2.0)
    assert np.all(lap == np.round(lap)) and np.array_equal(lap, DiscreteNoiseSource(11).laplace("q", 500, 2.0))
    # variance of the noise is the discrete Gaussian's with σ² = 2.25 (within 5 SE, 2000 draws)
    var = discrete_gaussian_variance(Fraction(9, 4))
    assert abs(np.mean(g**2) - var) <= Z_TOL * var * math.sqrt(2 / g.size)
    assert np.array_equal(src.gaussian("z", 3, 0.0), np.zeros(3))
    # unseeded: secret OS entropy; a retry of one measurement redraws the same noise, other
    # measurements and other sources differ
    u = DiscreteNoiseSource()
    assert np.array_equal(u.gaussian("k", 200, 3.0), u.gaussian("k", 200, 3.0))
    assert not np.array_equal(u.gaussian("k", 200, 3.0), u.gaussian("k2", 200, 3.0))
    assert not np.array_equal(u.gaussian("k", 200, 3.0), DiscreteNoiseSource().gaussian("k", 200, 3.0))
    assert src.to_dict() == {"seeded": True, "seed": 11, "sampler": "discrete"}
    assert "entropy" not in str(u.to_dict()) and u.to_dict()["sampler"] == "discrete"
    # pickles (to workers) with the same streams; the generator() interface is inherited
    clone = pickle.loads(pickle.dumps(src))
    assert isinstance(clone, DiscreteNoiseSource)
    assert np.array_equal(clone.gaussian(("aim", 1, "age,sex"), (40, 50), 1.5), g)
    assert clone.generator("sel", 1).integers(1 << 30) == src.generator("sel", 1).integers(1 << 30)
    with pytest.raises(BudgetError, match="sigma"):
        src.gaussian("k", 3, -1.0)
    with pytest.raises(BudgetError, match="scale"):
        src.laplace("k", 3, float("nan"))


def test_make_noise_source_by_config() -> None:
    assert type(make_noise_source(1, "discrete")) is DiscreteNoiseSource
    assert type(make_noise_source(1, "continuous")) is NoiseSource
    with pytest.raises(ConfigError, match="noise_sampler"):
        make_noise_source(1, "quantum")


# ------------------------------------------------------------------- integer-valued measurements only
def test_integer_noise_on_a_real_valued_query_leaks_so_it_is_refused() -> None:
    """Why require_integers: with a strategy row of weight 1/2 (as HDMM/QuerySmasher strategies have),
    q(x) + Z keeps q(x)'s fractional part, which tells neighbouring datasets apart with certainty."""
    from privcube.privacy.discrete import require_integers

    a = np.array([[0.5, 0.5], [1.0, 0.0]])
    x, x_nb = np.array([3.0, 4.0]), np.array([3.0, 5.0])  # neighbours: one more record in cell 1
    src = DiscreteNoiseSource(seed=1)
    frac = [np.mod(a @ v + src.gaussian(("m", i), 2, 4.0), 1.0)[0] for i, v in enumerate((x, x_nb) * 50)]
    assert set(frac[0::2]) == {0.5} and set(frac[1::2]) == {0.0}  # the attacker's test never errs
    with pytest.raises(ConfigError, match=r"noise_sampler: discrete.*\['hdmm', 'measure'\].*continuous") as e:
        src.add_gaussian(("hdmm", "measure"), a @ x, 4.0)
    assert "3.5" not in str(e.value) and "7" not in str(e.value)  # names the measurement, never a value
    with pytest.raises(ConfigError, match="not integer-valued"):
        src.add_laplace("w", np.array([2.25, 1.0]), 1.0)  # e.g. weighted counts
    with pytest.raises(ConfigError, match="not integer-valued"):
        require_integers(np.array([1.0, np.nan]))
    # counts and integer combinations of them (residual differences) pass, as float arrays of integers
    counts = np.array([[7.0, 0.0], [2.0, 5.0]])
    y = src.add_gaussian(("rp", "a,b"), counts, 2.0)
    assert y.shape == (2, 2) and np.array_equal(y, np.round(y))
    assert np.array_equal(y - counts, src.gaussian(("rp", "a,b"), (2, 2), 2.0))
    assert np.array_equal(src.add_laplace("r", counts[0] - counts[1], 1.0) - (counts[0] - counts[1]),
                          src.laplace("r", 2, 1.0))
    # the continuous source takes any real values
    cont = NoiseSource(seed=1)
    assert np.allclose(cont.add_gaussian("h", a @ x, 1.0) - a @ x, cont.gaussian("h", 2, 1.0), rtol=0, atol=1e-12)
    assert np.allclose(cont.add_laplace("h", a @ x, 1.0) - a @ x, cont.laplace("h", 2, 1.0), rtol=0, atol=1e-12)


@pytest.mark.parametrize("mech", ["residual-planner", "aim-grem"])
def test_discrete_run_spends_what_the_continuous_run_spends(tmp_path, mech: str) -> None:
    """`noise_sampler: discrete` through privcube run: same ledger (accounting), sampler recorded, answers out."""
    import json

    import pandas as pd
    import yaml

    from privcube import api

    rng = np.random.default_rng(6)
    n = 3000
    a = rng.integers(0, 3, n)
    pd.DataFrame({"a": a, "b": (a + rng.integers(0, 2, n)) % 4, "c": rng.integers(0, 2, n)}).to_parquet(
        tmp_path / "d.parquet", index=False)
    ledgers = {}
    for sampler in ("continuous", "discrete"):
        cfg = {"data": {"path": "d.parquet", "domain": {"a": 3, "b": 4, "c": 2}}, "mechanism": {"name": mech},
               "workload": [{"kway": 2}], "privacy": {"epsilon": 1.0, "delta": 1e-6}, "noise_sampler": sampler}
        (tmp_path / f"{sampler}.yaml").write_text(yaml.safe_dump(cfg))
        res = api.run(tmp_path / f"{sampler}.yaml", tmp_path / sampler, seed=5, quiet=True)
        ledgers[sampler] = json.loads((res.out_dir / "ledger.json").read_text())
        index = json.loads((res.out_dir / "answers" / "index.json").read_text())
        assert index["groups"] and all(
            np.isfinite(pd.read_parquet(res.out_dir / "answers" / g["file"])["estimate"]).all() for g in index["groups"])
    assert ledgers["discrete"]["noise"] == {"seeded": True, "seed": 5, "sampler": "discrete"}
    assert ledgers["discrete"]["budget"] == ledgers["continuous"]["budget"]
    for key in ("rho", "epsilon", "delta"):
        assert ledgers["discrete"]["spent"][key] == pytest.approx(ledgers["continuous"]["spent"][key], rel=1e-12)
