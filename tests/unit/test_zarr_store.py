"""TensorStore: zarr v3 round-trips for numpy and dask arrays, attrs, marginals, replace semantics."""
from __future__ import annotations

import json

import dask.array as da
import numpy as np
import pytest
import zarr

from privcube.core.domain import Domain
from privcube.core.errors import DataError, DomainError
from privcube.storage.zarr_store import TensorStore, marginal_name


def test_numpy_roundtrip_and_attrs(tmp_path):
    """numpy arrays of several dtypes/ranks come back equal with their attrs."""
    ts = TensorStore(tmp_path / "run.zarr")
    rng = np.random.default_rng(0)
    arrays = {"i64": rng.integers(-5, 5, size=(3, 4, 5)), "f64": rng.normal(size=(17,)),
              "scalar": np.array(7, dtype=np.int64), "empty": np.zeros((0, 3))}
    for name, a in arrays.items():
        ts.write(name, a, {"note": name, "n": int(a.size)})
    assert ts.names() == sorted(arrays)
    for name, a in arrays.items():
        back = ts.read(name)
        assert back.dtype == a.dtype and back.shape == a.shape
        np.testing.assert_array_equal(back, a)
        assert ts.attrs(name) == {"note": name, "n": int(a.size)}
    # the group on disk is zarr v3
    meta = json.loads((tmp_path / "run.zarr" / "zarr.json").read_text())
    assert meta["zarr_format"] == 3 and meta["node_type"] == "group"


def test_dask_nonaligned_chunks_with_shards(tmp_path):
    """A dask array whose chunks straddle shards is rechunked to the shard grid and stored intact."""
    ts = TensorStore(tmp_path / "run.zarr")
    x = np.arange(103 * 211, dtype=np.int64).reshape(103, 211)
    d = da.from_array(x, chunks=(7, 33))  # 7 and 33 divide neither chunk nor shard sizes
    ts.write("sharded", d, {"k": "v"}, chunks=(5, 10), shards=(20, 50))
    arr = zarr.open_array(tmp_path / "run.zarr" / "sharded")
    assert arr.shards == (20, 50) and arr.chunks == (5, 10)
    np.testing.assert_array_equal(ts.read("sharded"), x)
    lazy = ts.read_dask("sharded")
    assert lazy.chunks[0][0] == 20 and lazy.chunks[1][0] == 50
    np.testing.assert_array_equal(lazy.compute(), x)
    assert ts.attrs("sharded") == {"k": "v"}


def test_dask_irregular_chunks_without_shards(tmp_path):
    """Irregular dask chunks are aligned to the zarr chunk grid (threaded parallel store)."""
    ts = TensorStore(tmp_path / "run.zarr")
    x = np.random.default_rng(1).integers(0, 1000, size=(1000,))
    d = da.from_array(x, chunks=((100, 3, 397, 250, 250),))
    ts.write("v", d, chunks=(64,))
    np.testing.assert_array_equal(ts.read("v"), x)
    ts.write("v_default", d)  # chunk grid taken from the first dask chunk
    np.testing.assert_array_equal(ts.read("v_default"), x)


def test_replace_is_clean_and_leaves_no_temporaries(tmp_path):
    """Overwriting replaces data and attrs; no hidden temp/old directories remain."""
    root = tmp_path / "run.zarr"
    ts = TensorStore(root)
    ts.write("a", np.ones((4, 4)), {"v": 1})
    ts.write("a", np.full((2,), 3.0), {"v": 2})
    np.testing.assert_array_equal(ts.read("a"), [3.0, 3.0])
    assert ts.attrs("a") == {"v": 2}
    assert sorted(p.name for p in root.iterdir()) == ["a", "zarr.json"]
    # a leftover from an interrupted write is invisible and removed by cleanup()
    (root / ".tmp-b-deadbeef").mkdir()
    assert ts.names() == ["a"]
    ts.cleanup()
    assert not (root / ".tmp-b-deadbeef").exists()


def test_failed_write_keeps_old_array(tmp_path):
    """If computing the new data fails, the previous array under that name is untouched."""
    ts = TensorStore(tmp_path / "run.zarr")
    ts.write("m", np.arange(6))

    def bad(block):
        raise RuntimeError("worker died")

    broken = da.from_array(np.arange(6), chunks=3).map_blocks(bad, dtype=np.int64)
    with pytest.raises(RuntimeError, match="worker died"):
        ts.write("m", broken)
    np.testing.assert_array_equal(ts.read("m"), np.arange(6))
    assert ts.names() == ["m"]


def test_marginals_and_domain(tmp_path):
    """write_marginal stores attributes/shape/kind; group attrs record the domain; reopen works."""
    domain = Domain.from_mapping({"age": 4, "sex": 2, "income>50K": 2})
    ts = TensorStore(tmp_path / "run.zarr", domain=domain)
    mu = np.arange(8).reshape(2, 4)
    name = ts.write_marginal(("sex", "age"), mu, domain, kind="noisy", attrs={"sigma": 1.5})
    tot = ts.write_marginal((), np.array(100), domain, kind="exact")
    assert name == marginal_name(("sex", "age"), "noisy") and name != marginal_name(("age", "sex"), "noisy")
    assert ts.attrs(name) == {"attributes": ["sex", "age"], "shape": [2, 4], "kind": "noisy", "sigma": 1.5}
    reopened = TensorStore(tmp_path / "run.zarr", mode="r")
    assert reopened.domain() == domain
    np.testing.assert_array_equal(reopened.read_marginal(("sex", "age")), mu)
    assert int(reopened.read(tot)) == 100
    assert reopened.marginals("noisy") == {("sex", "age"): name}
    assert zarr.open_array(tmp_path / "run.zarr" / name).metadata.dimension_names == ("sex", "age")
    with pytest.raises(DomainError, match=r"\(2, 4\)"):
        ts.write_marginal(("sex", "age"), np.zeros((4, 2)), domain)


def test_bad_names(tmp_path):
    """Unknown and invalid names raise DataError naming them."""
    ts = TensorStore(tmp_path / "run.zarr")
    with pytest.raises(DataError, match="'nope'"):
        ts.read("nope")
    with pytest.raises(DataError, match="'a/b'"):
        ts.write("a/b", np.zeros(2))
    with pytest.raises(DataError, match="'.tmp-x'"):
        ts.write(".tmp-x", np.zeros(2))


def test_write_many_equals_one_by_one(tmp_path):
    rng = np.random.default_rng(3)
    items = [(f"g{i}.estimate", rng.normal(size=5 + i % 3), {"group": i}, None) for i in range(40)]
    items.append(("cube", rng.integers(0, 9, size=(2, 3)).astype(float), {"kind": "estimate"}, ("a", "b")))
    items.append(("scalar", np.array(7.5), None, None))
    one = TensorStore(tmp_path / "one.zarr")
    for name, arr, attrs, dims in items:
        one.write(name, arr, attrs, dimension_names=dims)
    many = TensorStore(tmp_path / "many.zarr")
    many.write_many(items)
    assert many.names() == one.names() == sorted(n for n, *_ in items)
    for name, arr, attrs, dims in items:
        np.testing.assert_array_equal(many.read(name), arr)
        assert many.attrs(name) == one.attrs(name) == dict(attrs or {})
        assert many.group[name].metadata.dimension_names == one.group[name].metadata.dimension_names
    assert not [p.name for p in (tmp_path / "many.zarr").iterdir() if p.name.startswith((".tmp-", ".old-"))]


def test_write_many_replaces_and_fails_whole(tmp_path):
    store = TensorStore(tmp_path / "s.zarr")
    store.write("keep", np.arange(3.0))
    store.write_many([("keep", np.arange(4.0), {"v": 2}, None)])
    np.testing.assert_array_equal(store.read("keep"), np.arange(4.0))
    with pytest.raises(DataError, match="invalid array name 'a/b'"):
        store.write_many([("new", np.ones(2), None, None), ("a/b", np.ones(2), None, None)])
    assert store.names() == ["keep"]
    with pytest.raises(Exception):  # an object array cannot be stored: nothing new appears, no temporaries
        store.write_many([("ok", np.ones(2), None, None), ("bad", np.array([{}, []], dtype=object), None, None)])
    assert store.names() == ["keep"]
    np.testing.assert_array_equal(store.read("keep"), np.arange(4.0))
    assert not [p.name for p in (tmp_path / "s.zarr").iterdir() if p.name.startswith((".tmp-", ".old-"))]
