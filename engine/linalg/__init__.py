"""Implicit matrices, marginal-strategy algebra, expected error and the SVD bound."""
from privcube.linalg.error import (expected_total_squared_error, factor_trace, frobenius_error, rmse, supports,
                                   svd_bound, svdb_explicit)
from privcube.linalg.marginals import (MarginalsPinv, MarginalsStrategy, char_vector, g_inverse_weights, gram_apply,
                                       marginal_approximation, marginal_objective, marginal_query_variances,
                                       marginal_svdb, x_matrix, y_matrix)
from privcube.linalg.matrices import (Explicit, Kronecker, Matrix, Sum, Transpose, VStack, Weighted, kron_apply,
                                      kron_terms, union_of_kron)

__all__ = ["Explicit", "Kronecker", "Matrix", "Sum", "Transpose", "VStack", "Weighted", "kron_apply", "kron_terms",
           "union_of_kron", "MarginalsStrategy", "MarginalsPinv", "char_vector", "g_inverse_weights", "gram_apply",
           "marginal_approximation", "marginal_objective", "marginal_query_variances", "marginal_svdb", "x_matrix",
           "y_matrix", "expected_total_squared_error", "factor_trace", "frobenius_error", "rmse", "supports",
           "svd_bound", "svdb_explicit"]
