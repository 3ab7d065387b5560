"""Typed errors: each names the column, value, key or parameter at fault.

The CLI turns any ``PrivcubeError`` into a one-line message and exit code 2.
"""
from __future__ import annotations


class PrivcubeError(Exception):
    """Base class of every error privcube raises on purpose."""


class DomainError(PrivcubeError):
    """A domain or schema is malformed, or data falls outside it."""


class DataError(PrivcubeError):
    """Input data is missing a column, has NaN, a wrong type or an out-of-domain value."""


class WorkloadError(PrivcubeError):
    """A workload names an unknown attribute or query type, or is malformed."""


class BudgetError(PrivcubeError):
    """A privacy parameter is invalid, or a charge would exceed the budget."""


class ConfigError(PrivcubeError):
    """A configuration key is missing, unknown or has a bad value."""


class MemoryLimitError(PrivcubeError):
    """A requested tensor (marginal, residual, data vector) is too large for the memory limit."""


class RunDirectoryError(PrivcubeError):
    """The output directory holds a finished run, or cannot be written."""


class CheckpointError(PrivcubeError):
    """A checkpoint is missing, corrupt or does not match the run being resumed."""
