"""Tables never lie and refuse bad input in one line (issue 31): no non-finite number averaged into a cell, no
override of what a spec sets, one line and exit 2 for a bad table CLI input with nothing written, any path as the
results dir, tables written atomically, the chaos check comparing every run's metrics, ``make clean`` never
removing a tracked file. Each test fails on the code before issue 31."""

from __future__ import annotations

import csv
import errno
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from oscrepro import table as table_cli
from oscrepro.runs.compose import path_override
from oscrepro.table import build_table
from oscrepro.tables.aggregate import aggregate
from oscrepro.tables.chaos import ChaosReport, metrics_differences, run_metrics
from oscrepro.tables.plan import plan, unique_runs
from oscrepro.tables.render import render_runs_table
from oscrepro.tables.spec import OwnedOverrideError, check_extra_overrides, load_spec

ROOT = Path(__file__).resolve().parents[2]
TABLE = "fqo/table2"  # 3 rows x 1 seed at smoke: 3 SVA runs of a few seconds, the cheapest runs table
TINY = ["trainer.max_epochs=1", "trainer.limit_train_batches=2"]


def _cli(args: list[str], tmp: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "oscrepro.table", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "OSCREPRO_RESULTS_DIR": str(tmp / "unused")})


def _one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


def _records(results: Path, metrics_per_row: list[dict[str, float]]) -> list:
    """Hand-written ``ok`` records for fqo/table2's smoke runs (one per row), with the given metrics."""
    runs = unique_runs(plan(load_spec(TABLE), "smoke", [path_override("paths.results_dir", results)]))
    for run, metrics in zip(runs, metrics_per_row, strict=True):
        run.run_dir.mkdir(parents=True)
        (run.run_dir / "status.json").write_text(json.dumps({"status": "ok", "device": "cpu: test"}))
        (run.run_dir / "metrics.json").write_text(json.dumps(metrics))  # NaN as json.dumps writes it (old records)
    return runs


# -- 1. no non-finite value in a cell -------------------------------------------------------------------------------

def test_ok_record_with_nan_metric_counts_as_diverged_never_averaged(tmp_path):
    """An old record says ok with NaN in its metrics: with a NaN test loss its (finite) accuracy is the argmax of NaN
    logits, so it is not averaged either; it is flagged diverged in every cell that reads it and in the header."""
    results = tmp_path / "results"
    good = {"test/acc": 0.9, "test/acc_hard": 0.85, "test/loss": 0.3}
    _records(results, [good, {**good, "test/loss": math.nan, "test/acc": 0.5},  # finite acc, NaN loss
                       {**good, "test/acc_hard": math.nan}])  # the cell's own metric NaN
    md = build_table(TABLE, "smoke", results_dir=results, render_only=True)
    rows = {(r["row"], r["column"]): r for r in csv.DictReader(open(md.with_suffix(".csv")))}
    first, nan_loss, nan_hard = (row.label for row in load_spec(TABLE).rows)
    assert float(rows[(first, "overall")]["ours_mean"]) == pytest.approx(90.0)
    for label in (nan_loss, nan_hard):
        for col in ("overall", "hard", "failures"):
            cell = rows[(label, col)]
            assert (cell["n_diverged"], cell["n"]) == ("1", "0"), cell
        assert math.isnan(float(rows[(label, "overall")]["ours_mean"]))
    text = md.read_text()
    assert "**Runs:** 1 ok, 2 diverged" in text and "[diverged 1]" in text


# -- 2. a table build refuses overrides of what its spec sets -------------------------------------------------------

@pytest.mark.parametrize("override", ["seed=7", "attention=softmax", "+model.attention.freeze_value=false",
                                      "experiment=fqo/sva", "budget=paper"])
def test_override_of_what_the_spec_sets_is_refused_before_anything_is_written(override, tmp_path, capsys):
    results = tmp_path / "results"
    with pytest.raises(OwnedOverrideError, match="nothing was run or written") as err:
        build_table(TABLE, "smoke", extra=[override, *TINY], results_dir=results)
    assert repr(override) in str(err.value) and "\n" not in str(err.value)
    assert not results.exists() and "runs done" not in capsys.readouterr().out


def test_overrides_of_other_keys_stay_allowed():
    """What the README's variants pass (and the chaos check's short runs) is not owned by those specs."""
    check_extra_overrides(load_spec("fsn/table1"), ["+lr_schedule=cosine", "data.batch_size=8"])
    check_extra_overrides(load_spec(TABLE), ["trainer=gpu", "trainer.precision=bf16-mixed", *TINY])
    check_extra_overrides(load_spec("fsn/table4"), ["+lr_schedule=cosine"])  # an analysis: engine keys only
    with pytest.raises(OwnedOverrideError, match="'seed=1' sets 'seed'"):
        check_extra_overrides(load_spec("fsn/table4"), ["seed=1"])


# -- 3. the table CLI: one line, exit 2, nothing written; any results dir --------------------------------------------

@pytest.mark.parametrize(("args", "says"), [
    (["fqo/nope"], "no table spec 'fqo/nope'"),
    ([TABLE, "model.d_model=-4"], "model.d_model=-4: must be an integer >= 1"),
    ([TABLE, "seed=-3"], "'seed=-3' sets 'seed', which is set by the spec"),
    ([TABLE, "attention=nonexistent"], "'attention=nonexistent' sets 'attention'"),
])
def test_cli_bad_input_is_one_line_exit_2_nothing_written(args, says, tmp_path):
    results = tmp_path / "résultats et runs"
    proc = _cli([*args, "--budget", "smoke", "--results-dir", str(results)], tmp_path)
    line = _one_line(proc.stderr)
    assert proc.returncode == 2 and line.startswith(f"[table {args[0]}] ") and says in line, line
    assert not results.exists() and not (tmp_path / "unused").exists()


def test_cli_uncreatable_results_dir_is_one_line_exit_2(tmp_path):
    (tmp_path / "a_file").write_text("")
    proc = _cli([TABLE, "--budget", "smoke", "--results-dir", str(tmp_path / "a_file" / "results"), *TINY], tmp_path)
    line = _one_line(proc.stderr)
    assert proc.returncode == 2 and f"{tmp_path / 'a_file'} is not a directory" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file"]


def test_cli_read_only_results_dir_is_one_line_exit_2(tmp_path, monkeypatch, capsys):
    """A results dir the process may not write: refused before planning. Root may write a 0o555 folder, so under
    root the read-only mount is emulated where the engine asks (``os.access``, which says no on one)."""
    results = tmp_path / "read-only"
    results.mkdir()
    results.chmod(0o555)
    if os.geteuid() == 0:
        real = os.access
        monkeypatch.setattr(os, "access", lambda p, mode, **kw: False if Path(p) == results and mode & os.W_OK
                            else real(p, mode, **kw))
    try:
        with pytest.raises(SystemExit) as exit_info:
            table_cli.main([TABLE, "--budget", "smoke", "--results-dir", str(results), *TINY])
    finally:
        results.chmod(0o755)
    line = _one_line(capsys.readouterr().err)
    assert exit_info.value.code == 2 and line == (f"[table {TABLE}] results dir {results} is not writable; pass "
                                                  "--results-dir <a folder you can write>")
    assert list(results.iterdir()) == []


def test_cli_spec_error_is_one_line_exit_2(tmp_path, monkeypatch, capsys):
    """A spec with a misspelled column field (``metrc``) used to be a TypeError traceback."""
    from oscrepro.tables import spec as spec_mod

    conf = tmp_path / "conf"  # load_spec reads only conf/table/<key>.yaml
    (conf / "table" / "fqo").mkdir(parents=True)
    text = (spec_mod.CONF_DIR / "table" / f"{TABLE}.yaml").read_text().replace("metric: test/acc,", "metrc: test/acc,")
    (conf / "table" / f"{TABLE}.yaml").write_text(text)
    monkeypatch.setattr(table_cli, "load_spec", lambda key, conf_dir=conf: spec_mod.load_spec(key, conf_dir))
    with pytest.raises(SystemExit) as exit_info:
        table_cli.main([TABLE, "--budget", "smoke", "--results-dir", str(tmp_path / "results"), *TINY])
    line = _one_line(capsys.readouterr().err)
    assert exit_info.value.code == 2 and f"table spec {conf / 'table' / TABLE}.yaml: " in line and "metrc" in line
    assert not (tmp_path / "results").exists()


def test_cli_builds_into_a_results_dir_with_spaces_and_non_ascii(tmp_path):
    results = tmp_path / "résultats et runs"
    proc = _cli([TABLE, "--budget", "smoke", "--results-dir", str(results), "--variant", "tiny", *TINY], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = list(csv.DictReader(open(results / "fqo" / "smoke" / "tiny" / "table2.csv")))
    assert len(rows) == 9 and all(r["n"] == "1" and r["n_failed"] == r["n_missing"] == "0" for r in rows)
    assert len(list((results / "runs").glob("*/*/*/status.json"))) == 3 and not (tmp_path / "unused").exists()


# -- 4. tables are written atomically -------------------------------------------------------------------------------

def test_a_table_write_that_fails_leaves_the_previous_table_whole(tmp_path, monkeypatch):
    """A disk that fills while the table is written: the .md and .csv of the previous build stay as they were and
    no temporary file is left (the old code truncated the csv, then wrote it line by line)."""
    results = tmp_path / "results"
    spec = load_spec(TABLE)
    cells = plan(spec, "smoke", [path_override("paths.results_dir", results)])
    out = results / "fqo" / "smoke"
    md = render_runs_table(spec, "smoke", aggregate(spec, cells), out, [], {"missing": 3})
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    _records(results, [{"test/acc": 0.9, "test/acc_hard": 0.8}] * 3)

    def full_disk(src, dst):
        raise OSError(errno.ENOSPC, "No space left on device", str(dst))

    monkeypatch.setattr(os, "replace", full_disk)
    with pytest.raises(OSError, match="No space left"):
        render_runs_table(spec, "smoke", aggregate(spec, cells), out, [], {"ok": 3})
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before and md.name in before


# -- 5. the chaos check compares every run's metrics ----------------------------------------------------------------

def _run(root: Path, run: str, metrics: dict, status: str = "ok") -> None:
    d = root / run
    d.mkdir(parents=True)
    (d / "status.json").write_text(json.dumps({"status": status}))
    (d / "metrics.json").write_text(json.dumps(metrics))


def test_chaos_metrics_comparison_sees_a_last_bit_difference_and_ignores_wall_clock(tmp_path):
    metrics = {"test/loss": 0.6934264302, "test/acc": 0.5, "epochs": 3, "time/train_epoch_s": 1.0,
               "train_wall_time_s": 9.0}
    _run(tmp_path / "ref", "fqo/sva/aaa", metrics)
    _run(tmp_path / "same", "fqo/sva/aaa", {**metrics, "time/train_epoch_s": 2.5, "train_wall_time_s": 7.0})
    _run(tmp_path / "bits", "fqo/sva/aaa", {**metrics, "test/loss": 0.6934263706})
    _run(tmp_path / "extra", "fqo/sva/aaa", metrics)
    _run(tmp_path / "extra", "fqo/sva/bbb", metrics, status="diverged")
    ref = run_metrics(tmp_path / "ref")
    assert metrics_differences(ref, run_metrics(tmp_path / "same")) == []
    assert metrics_differences(ref, run_metrics(tmp_path / "bits")) == [
        "fqo/sva/aaa: test/loss 0.6934264302 -> 0.6934263706"]
    assert metrics_differences(ref, run_metrics(tmp_path / "extra")) == ["fqo/sva/bbb: not in the reference build"]
    report = ChaosReport("t", "smoke", 1.0, rounds_equal=[True], rounds_metrics_equal=[False])
    assert not report.passed  # an equal table does not pass the check when a run's metrics differ


# -- 8. make clean never removes a tracked file ---------------------------------------------------------------------

def _tree(root: Path) -> tuple[list[str], list[str]]:
    """A checkout-like tree: (files git would track, files a build or a test leaves)."""
    tracked = ["results/runs/fqo/sva/abc/status.json", "results/runs/fqo/sva/abc/metrics.json",
               "results/runs/fqo/sva/abc/config.yaml", "results/fqo/smoke/table2.md", "results/chaos/report.md"]
    left = ["results/runs/fqo/sva/abc/checkpoints/last.ckpt", "results/runs/fqo/sva/abc/lock",
            "results/runs/fqo/sva/abc/logs/metrics.csv", "results/runs/fqo/sva/new/status.json",
            "results/hydra/x/.hydra/config.yaml", ".cache/oscrepro/integrity.json", "oscrepro/__pycache__/a.pyc"]
    shutil.copy(ROOT / "Makefile", root / "Makefile")
    shutil.copy(ROOT / ".gitignore", root / ".gitignore")
    for rel in tracked + left:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("x")
    return tracked, left


def _files(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() and ".git/" not in p.as_posix()}


def test_make_clean_removes_caches_checkpoints_and_untracked_records_never_a_tracked_file(tmp_path):
    tracked, left = _tree(tmp_path)
    git = ["git", "-C", str(tmp_path), "-c", "init.defaultBranch=main"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-f", *tracked], check=True)  # in git's index: tracked, as a commit would be
    listed = subprocess.run(["make", "-s", "-C", str(tmp_path), "clean", "DRY_RUN=1"], capture_output=True, text=True,
                            check=True).stdout
    assert all(f"Would remove {t}" not in listed for t in tracked) and "results/runs/fqo/sva/new/" in listed
    assert _files(tmp_path) >= set(tracked) | set(left)  # a dry run removes nothing
    subprocess.run(["make", "-s", "-C", str(tmp_path), "clean"], check=True, capture_output=True)
    assert _files(tmp_path) == set(tracked) | {"Makefile", ".gitignore"}


def test_make_clean_outside_git_keeps_every_run_record(tmp_path):
    """No git: nothing tells a committed record from a new one, so records stay; what is never committed goes."""
    tracked, left = _tree(tmp_path)
    proc = subprocess.run(["make", "-s", "-C", str(tmp_path), "clean"], check=True, capture_output=True, text=True,
                          env={**os.environ, "GIT_CEILING_DIRECTORIES": str(tmp_path.parent)})
    assert "not a git checkout" in proc.stdout
    assert _files(tmp_path) == set(tracked) | {"Makefile", ".gitignore", "results/runs/fqo/sva/new/status.json"}
