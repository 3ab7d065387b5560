"""Fitting targets of relational link learning (issue 17, quality side): shrinkage of each release by its
orthogonal ANOVA components (``shrink_by: components``), post-processing that keeps a strong low-order
signal while dropping the noise of the many high-order cells."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from privcube.errors import ConfigError
from privcube.mechanisms.relational.linking import components, shrink
from privcube.mechanisms.relational.parameters import check_params


def test_components_are_orthogonal_and_sum_to_the_centred_table() -> None:
    x = np.random.default_rng(0).normal(size=(7, 2, 3))
    parts = components(x)
    assert [d for _, d in parts] == [6, 1, 6, 2, 12, 2, 12]  # Π (n_i − 1) over each non-empty subset
    assert np.allclose(sum(c for c, _ in parts), x - x.mean())
    for (a, _), (b, _) in itertools.combinations(parts, 2):
        assert abs(float(np.sum(a * b))) < 1e-12
    # i.i.d. noise has power dim·σ² in each component (averaged over draws)
    rng = np.random.default_rng(1)
    power = np.zeros(len(parts))
    for _ in range(400):
        power += [float(np.sum(c * c)) for c, _ in components(rng.normal(0, 0.5, (7, 2, 3)))]
    assert np.allclose(power / 400, [0.25 * d for _, d in parts], rtol=0.15)


def test_component_shrinkage_limits() -> None:
    prior = np.full(12, 1 / 12)
    y = np.random.default_rng(2).dirichlet(np.ones(12))
    assert np.allclose(shrink(y, prior, 0.0, 1.0, (3, 2, 2)), y)  # no noise: the answer is kept
    assert np.allclose(shrink(y + 3.0, prior, np.inf, 1.0, (3, 2, 2)), prior)  # no information: the prior
    out = shrink(y + np.random.default_rng(3).normal(0, 0.2, 12), prior, 0.2, 1.0, (3, 2, 2))
    assert abs(out.sum() - 1) < 1e-9 and out.min() >= 0  # a distribution


def test_component_shrinkage_beats_whole_shrinkage_on_a_low_order_signal() -> None:
    """A strong 2-way signal (age × genre) under noise on a 7 × 2 × 2 table: shrinking each component on
    its own keeps the signal and drops the 3-way noise; shrinking the whole difference at once is worse."""
    rng = np.random.default_rng(4)
    p_age = np.array([0.05, 0.2, 0.3, 0.2, 0.1, 0.08, 0.07])
    p_g0 = np.linspace(0.15, 0.85, 7)  # genre 0 depends on age; genre 1 independent
    truth = (p_age[:, None, None] * np.stack([1 - p_g0, p_g0], 1)[:, :, None] * np.array([0.7, 0.3])).ravel()
    prior = (p_age[:, None, None] * np.full((7, 2, 2), 0.25)).ravel()
    sigma, err_c, err_w = 0.02, 0.0, 0.0
    for _ in range(200):
        y = truth + rng.normal(0, sigma, truth.size)
        err_c += np.abs(shrink(y, prior, sigma, 1.0, (7, 2, 2)) - truth).sum()
        err_w += np.abs(shrink(y, prior, sigma, 1.0) - truth).sum()
    assert err_c < 0.95 * err_w  # measured: 0.90 (seeded)


def test_shrink_by_is_validated() -> None:
    assert check_params({})["shrink_by"] == "components"
    with pytest.raises(ConfigError, match="'shrink_by'"):
        check_params({"shrink_by": "parts"})
