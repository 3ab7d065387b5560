"""The layers point one way (issue 16), read from the source's import statements with ``ast``.

- No engine module (``engine/`` = ``privcube``) imports ``privcube.graphs`` or ``distributed`` at
  module level: a data-free ``plan`` or a config check never loads the cluster machinery.
- No mechanism, synthesis or post-processing module imports ``privcube.graphs`` at all, not even inside
  a function: they receive their execution (the run context, the oracle) from the driver.
- ``storage/`` does not import ``privcube.graphs``.
- No ``graphs`` module imports a mechanism's internals (mechanisms, synthesis, post-processing, relational):
  the graph builders receive the numpy kernels and data classes they need as arguments.
- No mechanism, synthesis or post-processing module imports ``dask`` or ``distributed``, not even inside a
  function: they go through the run context's ``map`` / ``compute`` / ``persist`` / ``scatter`` and kernels.
- No import cycle between modules, counting imports inside functions too (``TYPE_CHECKING`` blocks
  excluded; a package's ``__init__`` re-exports are not edges).
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {"engine": "privcube", "graphs": "privcube.graphs", "storage": "privcube.storage"}
EXECUTION_FREE = ("privcube.mechanisms", "privcube.synth", "privcube.postprocess", "privcube.relational",
                  "privcube.census")
#: what the graphs layer must not import: the internals of the layers it executes
MECHANISM_SIDE = EXECUTION_FREE


def _modules() -> dict[str, Path]:
    mods: dict[str, Path] = {}
    for folder, pkg in PACKAGES.items():
        for p in sorted((ROOT / folder).rglob("*.py")):
            parts = list(p.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            mods[".".join([pkg, *parts])] = p
    return mods


MODULES = _modules()


def _target(module: str, node: ast.AST, is_package: bool) -> list[str]:
    """The privcube modules (or ``distributed``, ``dask``) an import statement names, resolved to files we have."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        assert isinstance(node, ast.ImportFrom)
        if node.level:
            base = module.split(".") if is_package else module.split(".")[:-1]
            base = base[: len(base) - (node.level - 1)]
            stem = ".".join(base + ([node.module] if node.module else []))
        else:
            stem = node.module or ""
        names = [f"{stem}.{a.name}" if f"{stem}.{a.name}" in MODULES else stem for a in node.names]
    out = []
    for name in names:
        if name in ("distributed", "dask") or name.startswith(("distributed.", "dask.")):
            out.append(name.split(".")[0])
            continue
        while name not in MODULES and "." in name and name.startswith("privcube"):
            name = name.rsplit(".", 1)[0]
        if name in MODULES and name != module:
            out.append(name)
    return out


def _imports() -> dict[str, list[tuple[str, bool]]]:
    """``{module: [(imported module, at module level?)]}``."""
    edges: dict[str, list[tuple[str, bool]]] = {}
    for module, path in MODULES.items():
        found: list[tuple[str, bool]] = []

        def walk(node: ast.AST, top: bool) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                    walk(child, False)
                elif isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                    continue
                elif isinstance(child, (ast.Import, ast.ImportFrom)):
                    found.extend((t, top) for t in _target(module, child, path.name == "__init__.py"))
                else:
                    walk(child, top)

        walk(ast.parse(path.read_text(), str(path)), True)
        edges[module] = found
    return edges


EDGES = _imports()


def _layer(module: str) -> str:
    for prefix in ("privcube.graphs", "privcube.storage"):
        if module.startswith(prefix):
            return prefix
    return "privcube"


def test_the_scan_sees_the_package() -> None:
    assert {"privcube.api", "privcube.graphs.marginals", "privcube.storage.outputs",
            "privcube.mechanisms.aim_grem.mechanism"} <= set(MODULES)
    assert any(t == "privcube.core.errors" for t, _ in EDGES["privcube.graphs.marginals"])


def test_engine_imports_neither_graphs_nor_distributed_at_module_level() -> None:
    bad = sorted(f"{m} -> {t}" for m, ts in EDGES.items() if _layer(m) == "privcube"
                 for t, top in ts if top and (t == "distributed" or _layer(t) == "privcube.graphs"))
    assert bad == []


def test_mechanisms_synthesis_and_postprocess_never_import_graphs() -> None:
    bad = sorted(f"{m} -> {t}" for m, ts in EDGES.items() if m.startswith(EXECUTION_FREE)
                 for t, _ in ts if t == "distributed" or _layer(t) == "privcube.graphs")
    assert bad == []


def test_graphs_import_no_mechanism_internals() -> None:
    bad = sorted(f"{m} -> {t}" for m, ts in EDGES.items() if _layer(m) == "privcube.graphs"
                 for t, _ in ts if t.startswith(MECHANISM_SIDE))
    assert bad == []


def test_mechanisms_synthesis_and_postprocess_never_import_dask() -> None:
    bad = sorted(f"{m} -> {t}" for m, ts in EDGES.items()
                 if m.startswith(EXECUTION_FREE)
                 for t, _ in ts if t in ("dask", "distributed"))
    assert bad == []


def test_storage_does_not_import_graphs() -> None:
    bad = sorted(f"{m} -> {t}" for m, ts in EDGES.items() if _layer(m) == "privcube.storage"
                 for t, _ in ts if _layer(t) == "privcube.graphs")
    assert bad == []


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        found.append(sorted(comp))
    return found


def test_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles() -> None:
    packages = {m for m, p in MODULES.items() if p.name == "__init__.py"}
    graph = {m: {t for t, _ in ts if t in MODULES and t not in packages}
             for m, ts in EDGES.items() if m not in packages}
    assert _cycles(graph) == []


#: the driver's root modules (issue 34): the layers below never import them, not even inside a function
DRIVER_MODULES = {"privcube.api", "privcube.cli", "privcube.config", "privcube.result", "privcube.admission",
                  "privcube.memory_plan", "privcube.demo"}
#: layers below the jobs: they are given what they need (a planner, a config section) or find it in core
BELOW_JOBS = ("privcube.core", "privcube.linalg", "privcube.storage", "privcube.synth", "privcube.postprocess",
              "privcube.mechanisms", "privcube.report", "privcube.graphs")


def test_layers_below_the_jobs_never_import_the_driver() -> None:
    """Each layer checks its own config section and the cluster layer reads no driver module: nothing in
    core, linalg, storage, synth, postprocess, mechanisms, report or graphs imports config/api/cli/result/
    admission/memory_plan/demo (the privacy audit harness, which runs jobs, stands with the jobs)."""
    below = [m for m in MODULES if m.startswith((*BELOW_JOBS, "privcube.privacy", "privcube.relational"))]
    bad = sorted(f"{m} -> {t}" for m in below for t, _ in EDGES[m] if t in DRIVER_MODULES)
    assert below and bad == []


# --- issue 34: the house's layers ------------------------------------------------------------------------

#: the layers, bottom to top; a package may import its own layer and those below, never above. Top-level
#: driver modules (api, cli, config, ...) are the top layer and every one of them counts as its own node.
LAYERS = (
    ("privcube.core",),
    ("privcube.linalg", "privcube.privacy"),
    ("privcube.storage",),
    ("privcube.synth",),
    ("privcube.postprocess",),
    ("privcube.mechanisms",),
    ("privcube.report",),
    ("privcube.relational", "privcube.census", "privcube.graphs"),
)


def _node(module: str) -> str:
    """A module's package-level node: ``privcube.<first part>`` (a subpackage, or a top-level module)."""
    return ".".join(module.split(".")[:2])


def _package_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {_node(m): set() for m in MODULES}
    for m, ts in EDGES.items():
        for t, _ in ts:
            if t not in ("dask", "distributed") and _node(t) != _node(m):
                graph[_node(m)].add(_node(t))
    return graph


def test_no_cycle_between_packages() -> None:
    """Package level, ``__init__`` re-exports and imports inside functions counted: one direction only."""
    assert _cycles(_package_graph()) == []


def test_each_layer_imports_only_itself_and_below() -> None:
    rank = {pkg: i for i, layer in enumerate(LAYERS) for pkg in layer}
    top = len(LAYERS)
    bad = sorted(f"{a} -> {b}" for a, bs in _package_graph().items() for b in bs
                 if rank.get(a, top) < rank.get(b, top))
    assert bad == []


def test_core_imports_nothing_of_privcube_outside_core() -> None:
    bad = sorted(f"{m} -> {t}" for m, ts in EDGES.items() if m.startswith("privcube.core")
                 for t, _ in ts if t.startswith("privcube") and not t.startswith("privcube.core"))
    assert bad == []


def test_no_function_over_80_lines() -> None:
    long = sorted(f"{module}:{node.name} ({node.end_lineno - node.lineno + 1})"
                  for module, path in MODULES.items() for node in ast.walk(ast.parse(path.read_text()))
                  if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.end_lineno - node.lineno + 1 > 80)
    assert long == []


def test_relational_lives_in_one_package_with_names_that_do_not_look_alike() -> None:
    """Every relational module is under privcube.relational, and no module name there is another's name plus a
    suffix (the old degree / degrees / degree_distributions)."""
    outside = sorted(m for m in MODULES if "relational" in m.split(".")[-1] and not m.startswith("privcube.relational"))
    assert outside == []
    names = sorted({m.rsplit(".", 1)[-1] for m in MODULES if m.startswith("privcube.relational.")})
    look_alike = [(a, b) for a in names for b in names if a != b and (b.startswith(a) or a.rstrip("s") == b.rstrip("s"))]
    assert len(names) > 20 and look_alike == []
