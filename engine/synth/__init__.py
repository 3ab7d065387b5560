"""Single-table synthesis from noisy marginals: consistency, a tree model, chunked sampling."""
from privcube.synth.estimator import MarginalEstimator, MbiEstimator, SamplingModel, TreeEstimator, get_estimator
from privcube.synth.sampler import sample_records, synthesize

__all__ = ["MarginalEstimator", "MbiEstimator", "SamplingModel", "TreeEstimator", "get_estimator",
           "sample_records", "synthesize"]
