"""privcube: differentially private query answering and synthetic data on Dask, out of core."""
from privcube.domain import Domain
from privcube.errors import (
    BudgetError,
    ConfigError,
    DataError,
    DomainError,
    MemoryLimitError,
    PrivcubeError,
    WorkloadError,
)
from privcube.workload import QueryGroup, Workload

__version__ = "0.1.0"
__all__ = [
    "Domain", "Workload", "QueryGroup", "PrivcubeError", "DomainError", "DataError", "WorkloadError",
    "BudgetError", "ConfigError", "MemoryLimitError", "__version__",
]
