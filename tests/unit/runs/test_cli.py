"""``python -m oscrepro.runs`` on real records: ls/show/compare/agg read what train() wrote, filters select what
they say, the overrides are the keys that differ from the experiment's defaults, agg's numbers are the seeds'
mean and sample std, and a bad run id is exit status 2. One tiny SVA run per seed (~2 s each)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from oscrepro.runs import catalog as C
from oscrepro.runs.__main__ import main
from oscrepro.runs.compose import compose_run, path_override
from oscrepro.train import train

TINY = ["experiment=fqo/sva", "budget=smoke", "trainer.max_epochs=1", "trainer.limit_train_batches=2",
        "trainer.limit_val_batches=1", "trainer.limit_test_batches=1", "trainer.enable_progress_bar=false"]


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("results")
    for extra in (["seed=0"], ["seed=1"], ["seed=0", "attention=softmax"]):
        train(compose_run([*TINY, path_override("paths.results_dir", out), *extra]))
    return out


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_ls_lists_and_filters(results, capsys):
    code, out, _ = _run(capsys, "--results-dir", str(results), "ls")
    assert code == 0 and len(out.splitlines()) == 3
    code, out, _ = _run(capsys, "--results-dir", str(results), "ls", "--where", "mechanism=softmax")
    lines = out.splitlines()
    assert len(lines) == 1 and "attention=softmax" in lines[0] and "seed=0" in lines[0]
    code, out, _ = _run(capsys, "--results-dir", str(results), "ls", "--where", "seed=1")
    assert len(out.splitlines()) == 1
    code, out, _ = _run(capsys, "--results-dir", str(results), "ls", "--status", "failed")
    assert out == ""


def test_overrides_are_the_differences_from_the_experiment(results):
    runs = C.select(C.scan(results), experiment="fqo/sva")
    own = [r for r in runs if r.flat.get("mechanism") != "softmax"]
    for r in own:  # exactly the test's own overrides that change the run (smoke's values differ from these)
        over = C.overrides(r, results)
        assert set(over) <= set(TINY) and "trainer.limit_train_batches=2" in over, over
    soft = [r for r in runs if r.flat.get("mechanism") == "softmax"]
    over = C.overrides(soft[0], results)
    assert over[0] == "attention=softmax" and set(over[1:]) <= set(TINY), over


def test_show_and_compare(results, capsys):
    runs = sorted(C.scan(results), key=lambda r: (r.flat.get("mechanism"), r.seed))
    a, b = runs[0], runs[1]
    code, out, _ = _run(capsys, "--results-dir", str(results), "show", a.id[:8])
    assert code == 0 and str(a.dir) in out and json.dumps(a.metrics["val/acc"]) in out.replace(" ", "")
    code, out, _ = _run(capsys, "--results-dir", str(results), "compare", a.id, b.id)
    assert code == 0 and "seed:" in out  # the two fqo seeds differ in their seed only
    assert "config: 1 key(s) differ" in out


def test_agg_is_mean_and_sample_std_over_seeds(results, capsys):
    code, out, _ = _run(capsys, "--results-dir", str(results), "agg", "--where", "mechanism=fqo")
    assert code == 0
    runs = [r for r in C.scan(results) if r.flat.get("mechanism") == "fqo"]
    vals = [r.metrics["val/acc"] for r in runs]
    (group,) = C.aggregate(runs)
    mean, std, n = group.stats["val/acc"]
    assert n == 2 and mean == pytest.approx(statistics.fmean(vals)) and std == pytest.approx(statistics.stdev(vals))
    assert "seeds 0,1" in out


def test_a_bad_run_id_is_exit_2(results, capsys):
    code, _, err = _run(capsys, "--results-dir", str(results), "show", "zzzz")
    assert code == 2 and "matches 0 records" in err
    code, _, err = _run(capsys, "--results-dir", str(results), "ls", "--where", "nokeyvalue")
    assert code == 2 and "key=value" in err


def test_works_on_the_committed_records(capsys):
    """Every committed record is listed (a status.json each), and a filter on them selects by experiment."""
    committed = Path(__file__).resolve().parents[3] / "results"
    n = len(list((committed / "runs").glob("**/status.json")))
    code, out, _ = _run(capsys, "--results-dir", str(committed), "ls", "--no-overrides")
    assert code == 0 and len(out.splitlines()) == n > 100
    code, out, _ = _run(capsys, "--results-dir", str(committed), "ls", "--no-overrides", "--experiment", "fqo/*")
    assert out and all(" fqo/" in line for line in out.splitlines())
