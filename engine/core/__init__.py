"""privcube's ground floor: domain, workload, query types, residuals, Kronecker products, counting kernels,
typed errors, atomic writes, JSON/YAML encoding, progress bars and the oracle protocols.

Nothing here imports any other part of privcube (tests/unit/test_import_graph.py holds the rule), so every
layer above (privacy, mechanisms, storage, graphs, the driver) can stand on it.
"""

#: the package version (privcube.__version__), here so every layer can name it without importing the driver
__version__ = "0.1.0"
