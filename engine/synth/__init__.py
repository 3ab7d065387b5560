"""Single-table synthesis from noisy marginals: consistency, a tree model, chunked sampling."""
from privcube.synth.estimator import MarginalEstimator, MbiEstimator, SamplingModel, TreeEstimator, get_estimator
from privcube.synth.sampler import (
    add_labels,
    marginals_from_answers,
    sample_records,
    synthesize,
    synthesize_from_answers,
)

__all__ = ["MarginalEstimator", "MbiEstimator", "SamplingModel", "TreeEstimator", "get_estimator",
           "sample_records", "synthesize", "synthesize_from_answers",
           "marginals_from_answers", "add_labels"]
