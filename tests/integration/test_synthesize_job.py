"""`synthesize` in a single-table job: records from the run's noisy marginals, written by `privcube run`."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from privcube import api
from privcube.core.errors import ConfigError


def _records(out):  # noqa: ANN001, ANN202
    files = sorted((out / "synthetic" / "records").glob("part-*.parquet"))
    return files, pd.concat([pd.read_parquet(f) for f in files], ignore_index=True)


def test_residual_planner_job_writes_labelled_records_without_spending(single_table_job, tmp_path):
    path, n = single_table_job(synthesize={"rows": 2500, "chunk_size": 1000})
    res = api.run(path, tmp_path / "out", seed=1, quiet=True)
    files, rec = _records(res.out_dir)
    assert len(files) == 3 and len(rec) == 2500
    assert list(rec.columns) == ["sex", "age", "job", "sex_label", "age_label"]
    assert set(rec["sex_label"]) <= {"F", "M"} and rec["job"].between(0, 2).all()
    assert (rec["sex_label"] == np.array(["F", "M"])[rec["sex"]]).all()
    # post-processing: the ledger holds the mechanism's one charge only
    ledger = json.loads((res.out_dir / "ledger.json").read_text())
    assert [c["label"] for c in ledger["charges"]] == ["residual-planner"]
    assert json.loads((res.out_dir / "report.json").read_text())["synthetic_records"]["rows"] == 2500
    # the records follow the private 2-way answers (ε = 10: close to the truth): sex x age
    index = json.loads((res.out_dir / "answers" / "index.json").read_text())["groups"]
    g = next(x for x in index if x["attributes"] == ["sex", "age"])
    noisy = pd.read_parquet(res.out_dir / "answers" / g["file"])["estimate"].to_numpy().reshape(2, 4)
    syn = np.zeros((2, 4))
    np.add.at(syn, (rec["sex"].to_numpy(), rec["age"].to_numpy()), 1)
    p, q = np.clip(noisy, 0, None) / np.clip(noisy, 0, None).sum(), syn / syn.sum()
    assert 0.5 * np.abs(p - q).sum() < 0.05  # total variation distance


def test_auto_rows_from_aim_answers_and_no_records_without_the_key(single_table_job, tmp_path):
    path, n = single_table_job(mechanism="aim-grem", synthesize=True)
    out = api.run(path, tmp_path / "out", seed=2, quiet=True).out_dir
    _, rec = _records(out)
    assert abs(len(rec) - n) < 0.05 * n  # the noisy record count
    path2, _ = single_table_job(mechanism="residual-planner")
    out2 = api.run(path2, tmp_path / "out2", seed=2, quiet=True).out_dir
    assert not (out2 / "synthetic").exists()


def test_records_on_a_cluster_equal_the_local_ones(single_table_job, tmp_path, monkeypatch):
    """Chunks sampled as tasks on a LocalCluster of processes, written here: same rows as threads."""
    import privcube.synth.records as records

    monkeypatch.setattr(records, "LOCAL_ROWS", 0)  # small outputs are sampled locally: force the tasks
    local, _ = single_table_job(synthesize={"rows": 1500, "chunk_size": 400})
    a = _records(api.run(local, tmp_path / "a", seed=3, quiet=True).out_dir)[1]
    dist, _ = single_table_job(synthesize={"rows": 1500, "chunk_size": 400},
                   cluster={"type": "local", "n_workers": 2, "threads_per_worker": 1})
    b = _records(api.run(dist, tmp_path / "b", seed=3, quiet=True).out_dir)[1]
    pd.testing.assert_frame_equal(a, b)


@pytest.mark.parametrize("spec,needle", [
    ({"rows": -1}, "synthesize.rows"), ({"chunk_size": 0}, "synthesize.chunk_size"),
    ({"estimator": "gan"}, "synthesize.estimator"), ({"bogus": 1}, "unknown key"), ("yes", "synthesize"),
])
def test_bad_synthesize_config_is_refused_before_anything(single_table_job, tmp_path, spec, needle):
    path, _ = single_table_job(synthesize=spec)
    with pytest.raises(ConfigError, match=needle):
        api.run(path, tmp_path / "out", seed=1, quiet=True)
    assert not (tmp_path / "out").exists()


def test_synthesize_needs_a_marginal_group(single_table_job, tmp_path):
    path, _ = single_table_job(mechanism="querysmasher", synthesize=True, workload=[{"kway": 1, "queries": "prefix"}])
    with pytest.raises(ConfigError, match="no marginal group"):
        api.run(path, tmp_path / "out", seed=1, quiet=True)
