"""Single-table synthesis from published marginals: a junction-tree (or Chow–Liu tree) model, chunked sampling."""
from privcube.synth.estimator import MarginalEstimator, MbiEstimator, SamplingModel, TreeEstimator, get_estimator
from privcube.synth.jt_fit import JunctionTreeEstimator
from privcube.synth.jt_model import JunctionTreeModel
from privcube.synth.sampler import (
    add_labels,
    marginals_from_answers,
    measured_marginals,
    sample_records,
    synthesize,
    synthesize_from_answers,
)

__all__ = ["MarginalEstimator", "MbiEstimator", "SamplingModel", "TreeEstimator", "JunctionTreeEstimator",
           "JunctionTreeModel", "get_estimator", "measured_marginals",
           "sample_records", "synthesize", "synthesize_from_answers",
           "marginals_from_answers", "add_labels"]
