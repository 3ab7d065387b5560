"""Privacy accounting: zCDP ⇄ (ε, δ) conversions, mechanism calibration, noise source and ledger."""
from privcube.privacy.budget import PrivacyBudget
from privcube.privacy.ledger import PrivacyLedger
from privcube.privacy.noise import NoiseSource
from privcube.privacy.primitives import (
    analytic_gaussian_sigma,
    exponential_mechanism,
    exponential_probabilities,
    exponential_rho,
    gaussian_rho,
    gaussian_sigma,
    laplace_scale,
)
from privcube.privacy.zcdp import cdp_delta, cdp_epsilon, cdp_rho, pure_to_zcdp, zcdp_to_approx

__all__ = [
    "PrivacyBudget", "PrivacyLedger", "NoiseSource",
    "analytic_gaussian_sigma", "exponential_mechanism", "exponential_probabilities", "exponential_rho",
    "gaussian_rho", "gaussian_sigma", "laplace_scale",
    "cdp_delta", "cdp_epsilon", "cdp_rho", "pure_to_zcdp", "zcdp_to_approx",
]
