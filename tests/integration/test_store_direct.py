"""The direct zarr writer (storage.zarr_direct) writes the very files zarr writes: every file of a store
written through TensorStore.write_many with and without the direct path is compared byte for byte."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import zarr

from privcube.storage import zarr_direct
from privcube.storage.zarr_store import TensorStore


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _items() -> list:
    rng = np.random.default_rng(3)
    return [
        ("estimate.a_b.1", rng.normal(size=(2, 3)), {"attributes": ["a", "b"], "shape": [2, 3], "kind": "estimate"},
         ("a", "b")),
        ("group-0000-a.estimate", rng.normal(size=5), {"group": 0, "weight": 1.0, "queries": {"a": "identity"},
                                                       "quantity": "estimate", "note": "ü/é", "x": float("nan")}, None),
        ("zeros", np.zeros((3, 2, 2)), {"kind": "published"}, ["a", "b", "c"]),  # fill value: no chunk file
        ("negzero", np.array([-0.0, 0.0]), None, None),                          # -0.0 differs from the fill value
        ("special", np.array([np.nan, np.inf, -np.inf, 1e-300, 7.0]), {}, None),
        ("ints", np.arange(6, dtype=np.int64).reshape(2, 3), {"i": 1}, None),     # not direct: through zarr
        ("scalar", np.array(2.5), {"s": True}, None),                               # not direct: 0-d
        ("empty", np.zeros((0, 3)), {}, None),                                      # not direct: empty axis
        ("strided", rng.normal(size=(4, 6))[::2, ::3], {}, ("p", "q")),
    ]


def test_direct_files_equal_zarr_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    items = _items()
    assert sum(zarr_direct.fits(np.asarray(a), d, True) for _, a, _, d in items) == 6
    TensorStore(tmp_path / "direct.zarr").write_many(items)
    monkeypatch.setattr(zarr_direct, "fits", lambda *a: False)
    TensorStore(tmp_path / "zarr.zarr").write_many(items)
    direct, plain = _files(tmp_path / "direct.zarr"), _files(tmp_path / "zarr.zarr")
    assert sorted(direct) == sorted(plain)
    assert "zeros/zarr.json" in direct and not any(k.startswith("zeros/c") for k in direct)
    assert any(k.startswith("negzero/c") for k in direct)
    for key in plain:
        assert direct[key] == plain[key], key


def test_direct_arrays_read_back(tmp_path: Path) -> None:
    items = _items()
    TensorStore(tmp_path / "s.zarr").write_many(items)
    store = TensorStore(tmp_path / "s.zarr", mode="r")
    for name, array, attrs, dims in items:
        np.testing.assert_array_equal(store.read(name), np.asarray(array))
        arr = zarr.open_array(tmp_path / "s.zarr" / name, mode="r")
        if dims is not None and np.ndim(array):
            assert list(arr.metadata.dimension_names) == list(dims)
    assert store.attrs("estimate.a_b.1")["kind"] == "estimate"


def test_direct_failure_leaves_no_array(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = TensorStore(tmp_path / "s.zarr")
    store.write_many([("kept", np.ones(3), {}, None)])

    written = zarr_direct.write_arrays

    def broken(folders: list, threads: int = 16) -> None:  # the first array written, then the disk is full
        written(folders[:1])
        assert Path(folders[0][0]).exists()
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(zarr_direct, "write_arrays", broken)
    with pytest.raises(OSError):
        store.write_many([("new", np.ones(2), {}, None), ("kept", np.zeros(3) + 2, {}, None)])
    assert store.names() == ["kept"]
    np.testing.assert_array_equal(store.read("kept"), np.ones(3))
    assert not [p for p in (tmp_path / "s.zarr").iterdir() if p.name.startswith(".")]


def _run_folder_files(out: Path) -> dict[str, bytes]:
    """Every file of a run folder; report.json without its timings (the only parts that may differ)."""
    import json

    files = _files(out)
    report = json.loads(files.pop("report.json"))
    report.pop("timings")
    for key in [k for k in report.get("postprocess", {}) if k.endswith("_s")]:  # seconds: time_s, fit_s
        report["postprocess"].pop(key)
    files["report.json"] = json.dumps(report, sort_keys=True).encode()
    return files


def test_seeded_run_folder_same_with_and_without_the_direct_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 single_table_job: Callable) -> None:
    from privcube import api

    path, _ = single_table_job(synthesize={"rows": 500}, workload=[{"kway": 1}, {"kway": 2}])
    api.run(path, tmp_path / "direct", seed=3, quiet=True)
    monkeypatch.setattr(zarr_direct, "fits", lambda *a: False)
    api.run(path, tmp_path / "zarr", seed=3, quiet=True)
    direct, plain = _run_folder_files(tmp_path / "direct"), _run_folder_files(tmp_path / "zarr")
    assert sorted(direct) == sorted(plain)
    assert sum(k.startswith("store.zarr/") for k in direct) > 20
    assert [k for k in plain if direct[k] != plain[k]] == []


def test_a_threads_run_does_not_import_distributed(tmp_path: Path, single_table_job: Callable) -> None:
    import subprocess
    import sys

    path, _ = single_table_job(synthesize={"rows": 200})
    code = ("import sys; from privcube import api; "
            f"api.run({str(path)!r}, {str(tmp_path / 'out')!r}, seed=0, quiet=True); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('distributed', 'tornado')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    assert (tmp_path / "out" / "synthetic" / "records").is_dir()
