"""The geography tree: built from a map, refuses a map that is not a tree, looks codes up (issue 35)."""
from __future__ import annotations

import numpy as np
import pytest

from privcube.census.hierarchy import Hierarchy
from privcube.core.errors import ConfigError, DataError


def _map():
    # tracts 10..15; counties 7, 8, 3 (county 3 in state 2, counties 7, 8 in state 1)
    return {"state": np.array([2, 1, 1, 1, 2, 1]), "county": np.array([3, 7, 8, 7, 3, 8]),
            "tract": np.array([15, 10, 11, 12, 14, 13])}


def test_tree_from_columns_orders_children_contiguously() -> None:
    h = Hierarchy.from_columns(_map(), ["state", "county", "tract"])
    assert list(h.codes["state"]) == [1, 2]
    assert list(h.codes["county"]) == [7, 8, 3]
    assert list(h.parent["county"]) == [0, 0, 1]
    assert list(h.codes["tract"]) == [10, 12, 11, 13, 14, 15]
    assert list(h.parent["tract"]) == [0, 0, 1, 1, 2, 2]
    assert list(h.parent["state"]) == [0, 0]
    assert h.n_units("tract") == 6 and h.n_units("") == 1
    assert list(h.children_counts("state")) == [2, 1]
    assert list(h.children_counts("")) == [2]
    assert list(h.children_counts("tract")) == [0] * 6
    assert list(h.segment_starts("tract")) == [0, 2, 4]
    assert list(h.ancestor("tract", np.arange(6), "state")) == [0, 0, 0, 0, 1, 1]
    assert list(h.ancestor("tract", np.array([5, 0]), "")) == [0, 0]
    assert list(h.index_of("tract", np.array([15, 10, 13]))) == [5, 0, 3]


def test_one_level_is_a_tree() -> None:
    h = Hierarchy.from_columns({"state": np.array([5, 3, 4])}, ["state"])
    assert list(h.codes["state"]) == [3, 4, 5] and list(h.children_counts("")) == [3]


def test_a_map_that_is_not_a_tree_is_refused_naming_the_unit() -> None:
    m = _map()
    m["state"][1] = 2                                    # county 7 now in states 1 and 2
    with pytest.raises(ConfigError, match=r"not a tree: county 7 lies in state 1 and state 2"):
        Hierarchy.from_columns(m, ["state", "county", "tract"])


@pytest.mark.parametrize("change, message", [
    (lambda m: m.pop("county"), "no column for level 'county'"),
    (lambda m: m["tract"].__setitem__(1, 15), "duplicate code 15"),
    (lambda m: m["state"].__setitem__(0, -2), "negative code -2"),
])
def test_bad_maps_get_one_line(change, message) -> None:
    m = _map()
    change(m)
    with pytest.raises(ConfigError, match=message) as e:
        Hierarchy.from_columns(m, ["state", "county", "tract"])
    assert "\n" not in str(e.value)


def test_unknown_codes_are_counted_not_shown() -> None:
    h = Hierarchy.from_columns(_map(), ["state", "county", "tract"])
    with pytest.raises(DataError, match=r"level 'tract': 2 code") as e:
        h.index_of("tract", np.array([10, 987654, 123456]))
    assert "987654" not in str(e.value)
    with pytest.raises(ConfigError, match="unknown level 'block'"):
        h.n_units("block")
