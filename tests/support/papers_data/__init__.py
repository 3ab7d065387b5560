"""The papers' tables as data: workloads and reference strategies the paper-table tests and benchmarks rebuild.

Test-only (no run uses them); tests import ``papers_data.<module>`` (``tests/`` is on ``sys.path`` under
pytest), benchmarks put ``tests/`` on ``sys.path`` first.
"""
