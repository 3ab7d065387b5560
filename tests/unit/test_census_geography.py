"""Geography-aware census generator: the map is a tree of the requested size with skewed units, files are
deterministic per (seed, file) and grouped by tract, persons' distributions differ between states, writes are
all-or-nothing."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from privcube.core.errors import ConfigError
from privcube.storage.census_geography import generate_census_geo, geography
from privcube.storage.generate import generate_part


def test_map_is_a_tree_of_the_requested_size() -> None:
    geo = geography(4, states=51, counties=3100, tracts=70_000)
    assert list(geo.columns) == ["tract", "county", "state"] and all(geo.dtypes == np.int64)
    assert (geo["tract"].to_numpy() == np.arange(70_000)).all()
    assert geo["county"].nunique() == 3100 and geo["state"].nunique() == 51
    assert (geo.groupby("county")["state"].nunique() == 1).all()  # each county in exactly one state
    per_state = geo.groupby("state")["county"].nunique()
    per_county = geo.groupby("county").size()
    assert per_state.min() >= 1 and per_county.min() >= 1
    assert per_state.max() >= 4 * per_state.median() and per_county.max() >= 8 * per_county.median()  # skewed
    assert (geo["county"] // 1000 == geo["state"]).all()  # FIPS-like county codes carry the state code


def test_map_is_seeded_and_checks_sizes() -> None:
    pd.testing.assert_frame_equal(geography(1, states=4, counties=9, tracts=40),
                                  geography(1, states=4, counties=9, tracts=40))
    assert not geography(1, states=4, counties=9, tracts=40).equals(geography(2, states=4, counties=9, tracts=40))
    one = geography(0, states=3, counties=3, tracts=3)
    assert one["county"].nunique() == 3 and one["state"].nunique() == 3
    with pytest.raises(ConfigError, match="counties=2 must be >= states=3"):
        geography(0, states=3, counties=2, tracts=10)
    with pytest.raises(ConfigError, match="tracts=5 must be >= counties=6"):
        geography(0, states=3, counties=6, tracts=5)
    with pytest.raises(ConfigError, match="states=0"):
        geography(0, states=0)


SMALL = dict(states=6, counties=30, tracts=400)


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Path], pd.DataFrame, pd.DataFrame]:
    out = tmp_path_factory.mktemp("geo") / "g"
    paths = generate_census_geo(out, 60_000, seed=5, n_attributes=30, rows_per_file=7_000, workers=2, **SMALL)
    persons = pd.concat([pd.read_parquet(f) for f in sorted(paths["persons"].glob("part-*.parquet"))],
                        ignore_index=True)
    return paths, persons, pd.read_parquet(paths["map"])


def test_outputs_domain_and_columns(small) -> None:
    paths, persons, geo = small
    assert set(paths) == {"persons", "map", "domain", "schema"} and all(p.exists() for p in paths.values())
    assert len(list(paths["persons"].glob("part-*.parquet"))) == 9 and len(persons) == 60_000
    domain = json.loads(paths["domain"].read_text())
    assert list(domain)[0] == "tract" and domain["tract"] == 400
    assert "state" not in domain and "state" not in persons.columns  # the map is the source of truth for place
    assert len(domain) == 30 and list(persons.columns) == list(domain)
    for name, size in domain.items():
        assert persons[name].min() >= 0 and persons[name].max() < size, name
    pd.testing.assert_frame_equal(geo, geography(5, **SMALL))
    state_index = np.unique(geo["state"], return_inverse=True)[1]
    assert (persons["region"].to_numpy() == state_index[persons["tract"].to_numpy()] % 9).all()  # derived


def test_files_are_grouped_by_tract(small) -> None:
    paths, persons, _ = small
    tract = persons["tract"].to_numpy()
    assert (np.diff(tract.astype(np.int64)) >= 0).all()  # sorted across files, so each file is a tract range
    first = pd.read_parquet(sorted(paths["persons"].glob("part-*.parquet"))[0])
    assert first["tract"].nunique() < 400 / 3


def test_tract_sizes_are_skewed_and_sum_up(small) -> None:
    _, persons, geo = small
    sizes = persons.groupby("tract").size().reindex(range(400), fill_value=0)
    assert sizes.max() >= 5 * sizes.median()
    county = geo.set_index("tract")["county"]
    by_county = sizes.groupby(county.reindex(sizes.index).to_numpy()).sum()
    assert by_county.sum() == 60_000 and by_county.max() >= 5 * by_county.median()


def _tv_between_states(persons: pd.DataFrame, geo: pd.DataFrame, attr: str) -> float:
    """Largest total-variation distance between one state's distribution of ``attr`` and the rest's."""
    state = geo["state"].to_numpy()[persons["tract"].to_numpy()]
    table = pd.crosstab(state, persons[attr]).to_numpy().astype(float)
    p = table / table.sum(axis=1, keepdims=True)
    rest = (table.sum(axis=0) - table) / (table.sum() - table.sum(axis=1, keepdims=True))
    return float((0.5 * np.abs(p - rest).sum(axis=1)).max())


def test_distributions_differ_between_states(small) -> None:
    _, persons, geo = small
    for attr, floor in (("age", 0.08), ("race", 0.15), ("income", 0.06), ("county_type", 0.15)):
        assert _tv_between_states(persons, geo, attr) > floor, attr
    # sex has no geographic shift: the states agree up to sampling noise
    assert _tv_between_states(persons, geo, "sex") < 0.05
    # chi-square test of independence of state and age: far beyond its 0.999 quantile
    state = geo["state"].to_numpy()[persons["tract"].to_numpy()]
    obs = pd.crosstab(state, persons["age"]).to_numpy().astype(float)
    exp = obs.sum(axis=1, keepdims=True) * obs.sum(axis=0, keepdims=True) / obs.sum()
    chi2 = float(((obs - exp) ** 2 / exp).sum())
    from scipy.stats import chi2 as chi2_dist

    assert chi2 > 3 * chi2_dist.ppf(0.999, (obs.shape[0] - 1) * (obs.shape[1] - 1))


def test_attribute_dependence_of_the_census_tables_kept(small) -> None:
    _, persons, _ = small
    married = persons.groupby("age")["marital_status"].apply(lambda s: float((s == 1).mean()))
    assert married.iloc[0] < 0.1 < 0.4 < married.iloc[6]  # the generator's age -> marital table still drives it


def test_file_depends_only_on_seed_and_index(tmp_path: Path) -> None:
    a = generate_census_geo(tmp_path / "a", 9_000, seed=3, rows_per_file=3_000, workers=1, **SMALL)
    b = generate_census_geo(tmp_path / "b", 9_000, seed=3, rows_per_file=3_000, workers=3, **SMALL)
    c = generate_census_geo(tmp_path / "c", 9_000, seed=4, rows_per_file=3_000, workers=2, **SMALL)
    files = [sorted(p["persons"].glob("*.parquet")) for p in (a, b, c)]
    for fa, fb in zip(files[0], files[1]):
        assert fa.read_bytes() == fb.read_bytes()  # threads change nothing
    assert not pd.read_parquet(files[0][0]).equals(pd.read_parquet(files[2][0]))
    assert not pd.read_parquet(files[0][0]).equals(pd.read_parquet(files[0][1]))


def test_flat_generator_unchanged() -> None:
    """The factored draw leaves the flat generator's rows as they were before it (seed 0, file 0, printed then)."""
    head = generate_part(0, 5, seed=0, n_attributes=6)
    assert head.to_numpy().tolist() == FLAT_HEAD


FLAT_HEAD = [[9, 0, 0, 0, 1, 9], [6, 1, 0, 3, 1, 12], [7, 1, 0, 3, 2, 9], [12, 0, 2, 1, 4, 12], [12, 0, 0, 2, 1, 12]]


def test_refuses_existing_output_and_leaves_nothing_on_failure(tmp_path: Path, monkeypatch) -> None:
    out = tmp_path / "o"
    generate_census_geo(out, 2_000, seed=1, rows_per_file=1_000, **SMALL)
    before = sorted(p.name for p in out.rglob("*"))
    with pytest.raises(ConfigError, match="already holds"):
        generate_census_geo(out, 2_000, seed=2, rows_per_file=1_000, **SMALL)
    import privcube.storage.census_geography as cg

    calls = {"n": 0}
    real = cg.write_part

    def failing(path, frame):  # noqa: ANN001, ANN202
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError("disk full")
        return real(path, frame)

    monkeypatch.setattr(cg, "write_part", failing)
    with pytest.raises(OSError, match="disk full"):
        generate_census_geo(out, 2_000, seed=2, rows_per_file=1_000, overwrite=True, **SMALL)
    assert sorted(p.name for p in out.rglob("*")) == before  # the old outputs intact, no staging left
    monkeypatch.setattr(cg, "write_part", real)
    generate_census_geo(out, 3_000, seed=2, rows_per_file=1_000, overwrite=True, **SMALL)
    assert len(list((out / "persons").glob("*.parquet"))) == 3


def test_bad_arguments() -> None:
    for kwargs, text in (({"n_rows": 0}, "n_rows=0"), ({"n_rows": 10, "rows_per_file": 0}, "rows_per_file=0"),
                         ({"n_rows": 10, "n_attributes": 31}, "n_attributes=31"),
                         ({"n_rows": 10, "workers": 0}, "workers=0")):
        with pytest.raises(ConfigError, match=text):
            generate_census_geo("/nonexistent/never", **kwargs)


def test_a_tilt_draws_from_the_reweighted_table() -> None:
    """Rows draw age with probability base(age) x accept[group, age] (normalised): rejection rounds plus the exact
    fallback for rows still rejected give that law, checked against the spec's printed base distribution."""
    from privcube.storage.generate import Tilt, draw_codes

    base = np.array([.08, .085, .085, .085, .08, .08, .08, .08, .075, .07, .06, .045, .035, .025, .015, .01])
    accept = np.stack([np.full(16, 1.0), np.where(np.arange(16) < 3, 1.0, 0.02)])  # group 1: mostly the young
    n = 200_000
    group = (np.arange(n) % 2).astype(np.int64)
    streams = np.random.SeedSequence(9).spawn(1)
    age = draw_codes(streams, n, 1, tilts={"age": Tilt(group, accept)})["age"]
    for g in (0, 1):
        expected = base * accept[g] / (base * accept[g]).sum()
        observed = np.bincount(age[group == g], minlength=16) / (n // 2)
        assert np.abs(observed - expected).max() < 0.006, g


def test_overwrite_never_replaces_files_the_generator_did_not_write(tmp_path) -> None:  # noqa: ANN001
    out = tmp_path / "data"
    generate_census_geo(out, 1_000, seed=1, rows_per_file=1_000, **SMALL)
    mine = out / "persons" / "my-own.csv"
    mine.write_text("a,b\n1,2\n")
    with pytest.raises(ConfigError, match="'my-own.csv', which the generator did not write"):
        generate_census_geo(out, 1_000, seed=1, rows_per_file=1_000, overwrite=True, **SMALL)
    assert mine.read_text() == "a,b\n1,2\n" and len(list((out / "persons").glob("part-*.parquet"))) == 1
