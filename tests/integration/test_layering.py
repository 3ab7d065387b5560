"""Layering: the engine (mechanisms, accounting, pure math) stands without the cluster layer."""
from __future__ import annotations

import subprocess
import sys
import textwrap

PLAN_WITHOUT_DISTRIBUTED = textwrap.dedent('''
    import importlib
    import pkgutil
    import sys


    class BlockDistributed:
        """A meta-path finder that refuses ``distributed`` and its submodules."""

        def find_spec(self, name, path=None, target=None):
            if name == "distributed" or name.startswith("distributed."):
                raise ImportError(f"blocked by the layering test: {name}")
            return None


    sys.meta_path.insert(0, BlockDistributed())

    import privcube.mechanisms
    from privcube.core.domain import Domain
    from privcube.mechanisms import REGISTRY, get_mechanism
    from privcube.mechanisms.aim_grem.mechanism import AIMGReM
    from privcube.privacy.budget import PrivacyBudget
    from privcube.core.workload import parse_workload

    imported = [m.name for m in pkgutil.walk_packages(privcube.mechanisms.__path__, "privcube.mechanisms.")]
    for name in imported:
        importlib.import_module(name)
    for name in REGISTRY:
        get_mechanism(name)

    dom = Domain.from_mapping({"a": 4, "b": 3, "c": 2})
    marginal = parse_workload([{"kway": 2}], dom)
    ranges = parse_workload([{"kway": 2, "queries": {"a": "prefix", "default": "identity"}}], dom)
    gaussian = PrivacyBudget.from_rho(0.5)
    plans = {
        "residual-planner": get_mechanism("residual-planner")({}).plan(marginal, gaussian),
        "querysmasher": get_mechanism("querysmasher")({}).plan(ranges, gaussian),
        "hdmm": get_mechanism("hdmm")({"restarts": 1}).plan(ranges, PrivacyBudget.pure_epsilon(1.0)),
        "eigen-design": get_mechanism("eigen-design")({}).plan(ranges, gaussian),
    }
    for name, plan in plans.items():
        assert plan.rmse > 0 and plan.groups, name
    prob = AIMGReM().problem(dom, marginal)
    assert ("a", "b") in prob.closure

    assert "distributed" not in sys.modules, "distributed was imported"
    graphs = sorted(m for m in sys.modules if m.startswith("privcube.graphs"))
    assert not graphs, f"privcube.graphs modules were imported: {graphs}"
    print("ok", len(imported), "modules;", ", ".join(sorted(plans)))
''')


def test_plan_without_distributed() -> None:
    """Every mechanism module imports, and every batch mechanism plans (aim-grem checks its problem), with
    ``distributed`` unimportable: nothing on the data-free path needs the cluster layer or privcube.graphs."""
    r = subprocess.run([sys.executable, "-c", PLAN_WITHOUT_DISTRIBUTED], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.startswith("ok "), r.stdout


CORE_ALONE = textwrap.dedent('''
    import importlib
    import pkgutil
    import sys

    import privcube.core

    names = [m.name for m in pkgutil.walk_packages(privcube.core.__path__, "privcube.core.")]
    for name in names:
        importlib.import_module(name)
    above = sorted(m for m in sys.modules if m.startswith("privcube.") and not m.startswith("privcube.core"))
    assert not above, f"privcube.core loaded modules above it: {above}"
    cluster = sorted(m for m in sys.modules if m.split(".")[0] in ("dask", "distributed"))
    assert not cluster, f"privcube.core loaded {cluster}"
    print("ok", len(names), "core modules")
''')


def test_core_stands_alone() -> None:
    """Importing every ``privcube.core`` module loads nothing else of privcube (bar the package's own
    ``__init__``, which only names the version and lazy entry points) and neither dask nor distributed."""
    r = subprocess.run([sys.executable, "-c", CORE_ALONE], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.startswith("ok "), r.stdout
