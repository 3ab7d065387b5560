"""NoiseSource: keyed reproducible streams, correct distributions; exponential mechanism frequencies."""
from __future__ import annotations

import math
import pickle

import numpy as np
import pytest
from scipy.stats import chisquare

from privcube.core.errors import BudgetError
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


# ------------------------------------------------------------- unseeded (default): CSPRNG-backed noise
def test_unseeded_noise_comes_from_the_keyed_csprng(monkeypatch: pytest.MonkeyPatch) -> None:
    """Unseeded gaussian/laplace/gumbel read the SHAKE-256 DRBG keyed by (secret entropy, key), never PCG64."""
    from privcube.privacy.csprng import RandomBits

    src = NoiseSource()
    used: list[tuple] = []
    real = RandomBits.keyed.__func__

    def spy(cls, seed, *key):  # noqa: ANN001, ANN202
        used.append((seed, key))
        return real(cls, seed, *key)

    monkeypatch.setattr(RandomBits, "keyed", classmethod(spy))
    monkeypatch.setattr(NoiseSource, "generator", lambda self, *k: pytest.fail("PCG64 used for unseeded noise"))
    src.gaussian(("rp", "a,b"), 7, 1.0)
    src.laplace("q", 3, 1.0)
    src.gumbel(("aim", 1, "select"), 5)
    secret = src.state()["entropy"]
    assert used == [(secret, ("continuous", "gaussian", ("rp", "a,b"))), (secret, ("continuous", "laplace", ("q",))),
                    (secret, ("continuous", "gumbel", ("aim", 1, "select")))]


def test_unseeded_gaussian_laplace_gumbel_match_theory() -> None:
    """Moments, tails and the whole distribution (KS) of the CSPRNG-backed samplers."""
    from scipy import stats

    n = 200_000
    src = NoiseSource()
    sigma, b = 2.5, 1.5
    g = src.gaussian(("g",), (400, 500), sigma)
    assert g.shape == (400, 500)
    g = g.ravel()
    assert abs(g.mean()) < 5 * sigma / math.sqrt(n)
    assert abs(g.var() - sigma**2) < 5 * math.sqrt(2 * sigma**4 / (n - 1))
    for k in (1, 2, 3):  # P(|X| > kσ)
        p = 2 * stats.norm.sf(k)
        assert abs(np.mean(np.abs(g) > k * sigma) - p) < 5 * math.sqrt(p * (1 - p) / n)
    assert stats.kstest(g / sigma, "norm").pvalue > 1e-5
    lap = src.laplace("l", n, b)
    assert abs(lap.var() - 2 * b**2) < 5 * math.sqrt(20 * b**4 / n)
    for k in (1, 3, 6):  # P(|X| > k b) = e^{-k}
        p = math.exp(-k)
        assert abs(np.mean(np.abs(lap) > k * b) - p) < 5 * math.sqrt(p * (1 - p) / n)
    assert stats.kstest(lap / b, "laplace").pvalue > 1e-5
    gu = src.gumbel("u", n)
    assert stats.kstest(gu, "gumbel_r").pvalue > 1e-5
    assert abs(np.corrcoef(src.gaussian("x", n, 1.0), src.gaussian("y", n, 1.0))[0, 1]) < 5 / math.sqrt(n)
    # pairs from one Box–Muller draw are independent too
    h = src.gaussian("pairs", n, 1.0)
    assert abs(np.corrcoef(h[: n // 2], h[n // 2:])[0, 1]) < 5 / math.sqrt(n / 2)


def test_unseeded_noise_is_reproducible_per_key_and_hides_entropy() -> None:
    src = NoiseSource()
    a = src.gaussian(("t", 1), 33, 1.0)  # odd length: Box–Muller pairs cut at n
    assert np.array_equal(src.gaussian(("t", 1), 33, 1.0), a)  # a retried task redraws the same noise
    assert np.array_equal(pickle.loads(pickle.dumps(src)).gaussian(("t", 1), 33, 1.0), a)  # on a worker
    assert np.array_equal(src.gaussian(("t", 1), 33, 2.0), 2 * a)
    assert not np.array_equal(NoiseSource().gaussian(("t", 1), 33, 1.0), a)
    assert np.array_equal(src.laplace("z", (2, 3), 0.0), np.zeros((2, 3)))
    assert np.all(np.isfinite(src.laplace("big", 100_000, 1.0))) and np.all(np.isfinite(a))
    with pytest.raises(BudgetError, match="shape"):
        src.gaussian("k", (2, -1), 1.0)
    with pytest.raises(BudgetError, match="key"):
        src.gaussian((), 3, 1.0)


def test_seeded_gumbel_is_the_generator_stream_and_drives_the_exponential_mechanism() -> None:
    s = NoiseSource(seed=9)
    assert np.array_equal(s.gumbel(("aim", 2, "select"), 6), s.generator("aim", 2, "select").gumbel(size=6))
    # Gumbel-max with these draws picks index i with probability softmax(ε·score/2Δ)
    scores = np.array([0.0, 1.0, 2.0, 4.0])
    probs = exponential_probabilities(scores, 1.0, 1.0)
    src = NoiseSource()
    logits = 0.5 * scores
    picks = np.argmax(logits[None, :] + src.gumbel("em", (40_000, 4)), axis=1)
    counts = np.bincount(picks, minlength=4)
    assert chisquare(counts, probs * counts.sum()).pvalue > 1e-5
