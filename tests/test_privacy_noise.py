"""NoiseSource: keyed reproducible streams, correct distributions; exponential mechanism frequencies."""
from __future__ import annotations

import math
import pickle

import numpy as np
import pytest
from scipy.stats import chisquare

from privcube.errors import BudgetError
from privcube.privacy import NoiseSource, exponential_mechanism, exponential_probabilities


def test_gaussian_variance_monte_carlo() -> None:
    n, sigma = 200_000, 3.7
    x = NoiseSource(seed=11).gaussian(("var", "test"), n, sigma)
    var = x.var()
    # Var of the sample variance of a normal is 2σ⁴/(n−1): 5-sigma band.
    assert abs(var - sigma**2) < 5 * math.sqrt(2 * sigma**4 / (n - 1))
    assert abs(x.mean()) < 5 * sigma / math.sqrt(n)


def test_laplace_variance_monte_carlo() -> None:
    n, b = 200_000, 1.5
    x = NoiseSource(seed=3).laplace("lap", n, b)
    # Laplace(b): variance 2b², fourth central moment 24b⁴ → Var(s²) ≈ (24 − 4)b⁴/n.
    assert abs(x.var() - 2 * b**2) < 5 * math.sqrt(20 * b**4 / n)


def test_same_seed_and_key_identical() -> None:
    a = NoiseSource(seed=42).gaussian(("aim", 3, "age,sex"), (4, 5), 1.0)
    b = NoiseSource(seed=42).gaussian(("aim", 3, "age,sex"), (4, 5), 1.0)
    np.testing.assert_array_equal(a, b)
    # order of derivation does not matter
    src = NoiseSource(seed=42)
    src.gaussian("other", 100, 1.0)
    np.testing.assert_array_equal(src.gaussian(("aim", 3, "age,sex"), (4, 5), 1.0), a)
    # generator(*key) and gaussian(key) name the same stream
    g = NoiseSource(seed=42).generator("aim", 3, "age,sex")
    np.testing.assert_array_equal(g.normal(0.0, 1.0, size=(4, 5)), a)


def test_different_keys_differ() -> None:
    src = NoiseSource(seed=42)
    draws = [
        src.gaussian(k, 50, 1.0)
        for k in [("aim", 3, "age,sex"), ("aim", 4, "age,sex"), ("aim", 3, "age"), ("aim", "3", "age,sex"),
                  (("a", "b"), "c"), ("a", ("b", "c"))]
    ]
    for i in range(len(draws)):
        for j in range(i + 1, len(draws)):
            assert not np.array_equal(draws[i], draws[j])
    # different seeds differ
    assert not np.array_equal(NoiseSource(seed=1).gaussian("k", 50, 1.0), NoiseSource(seed=2).gaussian("k", 50, 1.0))


def test_keyed_streams_uncorrelated() -> None:
    src = NoiseSource(seed=5)
    x, y = src.gaussian(("m", 1), 100_000, 1.0), src.gaussian(("m", 2), 100_000, 1.0)
    assert abs(np.corrcoef(x, y)[0, 1]) < 5 / math.sqrt(100_000)


def test_unseeded_sources_differ_and_hide_entropy() -> None:
    a, b = NoiseSource(), NoiseSource()
    assert not np.array_equal(a.gaussian("k", 20, 1.0), b.gaussian("k", 20, 1.0))
    assert a.to_dict() == {"seeded": False, "seed": None}
    assert NoiseSource(seed=7).to_dict() == {"seeded": True, "seed": 7}
    secret = str(a.state()["entropy"])
    assert secret not in repr(a) and secret not in str(a.to_dict())


def test_pickle_and_state_preserve_streams() -> None:
    src = NoiseSource()
    ref = src.gaussian(("task", 9), 30, 2.0)
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(src)).gaussian(("task", 9), 30, 2.0), ref)
    np.testing.assert_array_equal(NoiseSource.from_state(src.state()).gaussian(("task", 9), 30, 2.0), ref)


@pytest.mark.parametrize("bad", [-1, 1.5, "7", True])
def test_bad_seed_named(bad: object) -> None:
    with pytest.raises(BudgetError, match="seed"):
        NoiseSource(seed=bad)  # type: ignore[arg-type]


def test_bad_key_and_sigma() -> None:
    src = NoiseSource(seed=0)
    with pytest.raises(BudgetError, match="key"):
        src.generator("a", 1.5)  # type: ignore[arg-type]
    with pytest.raises(BudgetError, match="key"):
        src.generator()
    with pytest.raises(BudgetError, match="sigma"):
        src.gaussian("a", 3, -1.0)
    with pytest.raises(BudgetError, match="scale"):
        src.laplace("a", 3, float("nan"))


def test_exponential_mechanism_frequencies_chi_square() -> None:
    scores = np.array([0.0, 1.0, 2.5, -1.0, 2.0])
    eps, sens, n = 1.2, 0.5, 60_000
    expected_p = np.exp(eps * scores / (2 * sens))
    expected_p /= expected_p.sum()
    rng = NoiseSource(seed=2024).generator("exp-mech-test")
    counts = np.bincount([exponential_mechanism(scores, eps, sens, rng) for _ in range(n)], minlength=5)
    assert chisquare(counts, expected_p * n).pvalue > 1e-4
    np.testing.assert_allclose(exponential_probabilities(scores, eps, sens), expected_p, rtol=1e-12)


def test_exponential_mechanism_stable_and_shift_invariant() -> None:
    scores = np.array([1e6, 1e6 + 1.0, 1e6 - 3.0, -np.inf])
    picks_a = [exponential_mechanism(scores, 2.0, 1.0, np.random.default_rng(i)) for i in range(300)]
    picks_b = [exponential_mechanism(scores - 1e6, 2.0, 1.0, np.random.default_rng(i)) for i in range(300)]
    assert picks_a == picks_b
    assert 3 not in picks_a
    p = exponential_probabilities(scores, 2.0, 1.0)
    assert np.all(np.isfinite(p)) and p[3] == 0.0 and p.sum() == pytest.approx(1.0)
    with pytest.raises(BudgetError, match="sensitivity"):
        exponential_mechanism([1.0, 2.0], 1.0, 0.0, np.random.default_rng(0))
    with pytest.raises(BudgetError, match="scores"):
        exponential_mechanism([], 1.0, 1.0, np.random.default_rng(0))
