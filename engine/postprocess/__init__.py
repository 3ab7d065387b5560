"""Publishable releases: non-negative, mutually consistent marginals with one total, from a run's noisy
marginal answers (post-processing: reads no data, spends no budget).

``publish(answers, domain, spec)`` sets ``GroupAnswer.published`` on every marginal group; ``spec`` is
the ``postprocess`` config key (:func:`parse_postprocess`). Methods: ``grem-lnn`` (default; residual-
basis least squares with local non-negativity, ADMM), ``dykstra`` (alternating weighted projections),
``wls`` (consistent least squares, then the least lift to ≥ 0); ``integer: true`` rounds every
marginal to non-negative integers with one integer total.
"""
from privcube.postprocess.dispatch import answer_marginals, marginal_answers, publish, publish_model, solve
from privcube.postprocess.problem import MarginalProblem, build_problem
from privcube.postprocess.spec import METHODS, PostprocessSpec, parse_postprocess

__all__ = ["METHODS", "MarginalProblem", "answer_marginals", "publish_model", "PostprocessSpec", "build_problem", "marginal_answers", "parse_postprocess",
           "publish", "solve"]
