"""coupledqk Table 7 (oscrepro.papers.coupledqk.glue): every fine-tuning run fine-tunes its row's Table-1 LM run (seed
``lm_seed``) with that run's mechanism, a missing LM run is a MissingRunsError naming the command that builds
Table 1, and a task without data (MNLI) is reported in its cells and notes while the other tasks train and render.
Tiny Table-1 runs are trained at smoke in a temporary results dir (tests/papers/coupledqk/test_attention_maps.py)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from oscrepro.data import glue as glue_data
from oscrepro.papers.coupledqk import glue
from oscrepro.runs.lookup import find_record
from oscrepro.runs.record import RunRecord
from oscrepro.tables.launch import resolve_launcher
from oscrepro.tables.runs import MissingRunsError, cell_requests, source_runs
from oscrepro.tables.sources import SourceRuns, call_adapter, gather_runs
from oscrepro.tables.spec import SpecError, load_spec
from tests.helpers.shared_data import require_shared
from tests.papers.coupledqk.test_attention_maps import use_tiny_source

SPEC = load_spec("coupledqk/table7").analysis
TASKS = {t["name"]: t for t in SPEC["tasks"]}


def _lm_run(row: str, results: Path, seed: int = 0) -> Path:
    req = next(r for r in cell_requests("coupledqk/table1", "smoke", row, None, results) if r.cfg.seed == seed)
    found = find_record(req)
    assert found is not None
    return found


def _lm_runs(results: Path, rows: list[str], train: bool) -> SourceRuns:
    """Table 7's LM cells as the engine gathers them (training the missing ones with ``train``), without the
    fine-tuning stage."""
    needs = dataclasses.replace(glue.table7_runs(budget="smoke", results_dir=results, **{
        k: v for k, v in SPEC.items() if k not in ("_target_", "budgets", "rows")}, rows=rows), then=None)
    return gather_runs("coupledqk/table7", "smoke", needs, results, resolve_launcher("inprocess"), None, train, False)


def _adapter_kwargs(**changes: object) -> dict:
    """The spec's analysis kwargs without the engine's own keys (whether to train, which launcher)."""
    kwargs = {k: v for k, v in SPEC.items()
              if k not in ("_target_", "budgets", "train_missing", "launcher", "workers", "seeds_arg",
                           "cell_seeds_arg")}
    return {**kwargs, **changes}


def test_mechanism_overrides_keep_only_the_attention_choice() -> None:
    row = ["attention=coupled_qk", "model.attention.integrator=euler", "data=openwebtext", "model.d_model=32",
           "+model.attention.extra=1", "trainer.max_steps=3"]
    assert glue.mechanism_overrides(row) == ["attention=coupled_qk", "model.attention.integrator=euler",
                                             "+model.attention.extra=1"]


def test_spec_rows_are_table1_labels_and_paper_values_complete() -> None:
    table1 = [r.label for r in load_spec("coupledqk/table1").rows]
    assert set(SPEC["rows"]) <= set(table1)
    assert all(set(SPEC["paper"][r]) - {"name"} == set(TASKS) for r in SPEC["rows"])


def test_finetuning_runs_point_at_their_pretrained_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    require_shared("glue_sst2", "train.tsv")
    use_tiny_source(tmp_path, monkeypatch)
    results = tmp_path / "results"
    rows = SPEC["rows"]
    plan = glue.plan_finetuning("coupledqk/table7", "coupledqk/table1", "smoke", results, SPEC["experiment"], rows,
                                [TASKS["SST-2"]], _lm_runs(results, rows, True), lm_seed=0, n_seeds=2)
    assert not plan.not_run and not plan.skipped
    for row in rows:
        lm = _lm_run(row, results)
        assert plan.lm_runs[row] == lm
        lm_cfg = OmegaConf.load(lm / "config.yaml")
        reqs = plan.requests[(row, "SST-2")]
        assert [int(r.cfg.seed) for r in reqs] == [0, 1] and len({r.run_dir for r in reqs}) == 2
        for r in reqs:
            assert Path(r.cfg.model.pretrained_run) == lm and r.cfg.experiment_name == "coupledqk/glue"
            assert r.cfg.model.attention._target_ == lm_cfg.model.attention._target_
            assert r.cfg.data.task == "sst2" and r.cfg.data.max_train_examples == 96  # smoke budget scale
    ham = plan.requests[("Hamiltonian (coupled)", "SST-2")][0].cfg.model.attention
    assert ham.integrator == "hamiltonian"  # the row's mechanism, not another coupled variant
    assert len(list((results / "runs" / "coupledqk" / "lm").glob("*/status.json"))) == 4  # LM seed 0 only
    raised = glue.plan_finetuning("coupledqk/table7", "coupledqk/table1", "smoke", results, SPEC["experiment"],
                                  rows, [TASKS["SST-2"]], _lm_runs(results, rows, False), n_seeds=2,
                                  cell_seeds={"Standard | SST-2 (ours)": 4})  # the claims planner's per-cell raise
    assert [len(raised.requests[(r, "SST-2")]) for r in rows] == [4 if r == "Standard" else 2 for r in rows]
    assert raised.requests[("Standard", "SST-2")][:2] == plan.requests[("Standard", "SST-2")]  # seeds 0-1 unchanged
    # only the LMs of rows with a fine-tuning run still to train are recovered (their weights are loaded)
    done = {r.run_dir for (row, _t), reqs in raised.requests.items() if row != "Standard" for r in reqs}
    monkeypatch.setattr(glue, "find_record", lambda r: r.run_dir if r.run_dir in done else None)
    assert glue._weights_to_load(raised) == (plan.lm_runs["Standard"],)
    mnli = glue.plan_finetuning("coupledqk/table7", "coupledqk/table1", "smoke", results, SPEC["experiment"],
                                rows[:1], [TASKS["MNLI"]], _lm_runs(results, rows[:1], False), n_seeds=1)
    assert mnli.skipped or mnli.requests[(rows[0], "MNLI")][0].cfg.trainer.max_epochs == 3  # Sec. 3.4: 3 epochs


def test_missing_pretrained_run_names_the_table1_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    use_tiny_source(tmp_path, monkeypatch)
    with pytest.raises(MissingRunsError, match=r"python -m oscrepro\.table coupledqk/table1 --budget smoke"):
        call_adapter(glue.coupledqk_table7, "coupledqk/table7", "smoke", tmp_path / "results", tmp_path / "out",
                     train_missing=False, **_adapter_kwargs())
    assert not (tmp_path / "results" / "runs").exists()


def test_a_mechanism_mismatch_is_refused_before_training(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    use_tiny_source(tmp_path, monkeypatch)
    results = tmp_path / "results"
    found, notes = source_runs("t", "coupledqk/table1", "smoke", {"Standard": ("Standard", None)}, results, True,
                               seeds=[0])
    monkeypatch.setattr(glue, "mechanism_overrides", lambda overrides: [])  # glue.yaml's default: coupled_qk
    with pytest.raises(SpecError, match="SoftmaxAttention"):
        glue.plan_finetuning("coupledqk/table7", "coupledqk/table1", "smoke", results, SPEC["experiment"],
                             ["Standard"], [TASKS["SST-2"]], SourceRuns(found, notes), n_seeds=1)


def test_table7_reports_a_task_without_data_and_renders_the_rest(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    require_shared("glue_sst2", "train.tsv")
    require_shared("glue_qnli", "dev.tsv")
    use_tiny_source(tmp_path, monkeypatch)
    found = glue_data.find_dataset
    monkeypatch.setattr(glue_data, "find_dataset",  # hermetic: MNLI absent even where a copy exists
                        lambda name, *a, **k: None if name == "glue_mnli" else found(name, *a, **k))
    rows = ["Standard", "Hamiltonian (coupled)"]
    _lm_runs(tmp_path / "results", rows, True)  # the LMs first: Standard's is then marked as retrained elsewhere
    RunRecord(_lm_run("Standard", tmp_path / "results")).update_status({"checkpoint_recovered": {
        "metrics_match": False, "max_rel_diff": 0.0029, "differ": ["test/ppl 692.142 -> 692.333"],
        "date": "2026-11-27 16:50 UTC"}})
    columns, out, notes = call_adapter(glue.coupledqk_table7, "coupledqk/table7", "smoke", tmp_path / "results",
                                       tmp_path / "out", **_adapter_kwargs(rows=rows, n_seeds=1))
    assert columns[:2] == ["Attention", "LM run"] and "MNLI (ours)" in columns and "QNLI Δ" in columns
    assert [r["Attention"] for r in out] == rows
    for r in out:
        assert r["MNLI (ours)"].startswith("not run: no MNLI data here") and r["MNLI Δ"] == "—"
        assert str(r["SST-2 (ours)"]).endswith("(n=1)") and str(r["QNLI (ours)"]).endswith("(n=1)")
        assert r["SST-2 (ours)"].n == 1 and 0.0 <= r["SST-2 (ours)"].mean <= 100.0
        assert str(r["SST-2 Δ"]).startswith(("+", "-"))
        assert r["LM run"].startswith("seed 0 (")
    assert str(out[1]["SST-2 (paper)"]) == "86.8 ± 0.5" and str(out[0]["MNLI (paper)"]) == "72.9 ± 0.4"
    text = "\n".join(notes)
    assert "**MNLI not run:** Dataset 'glue_mnli' not found." in text
    assert "**Data, QNLI:** (dev hold-out: NOT comparable to the paper's dev accuracy)" in text
    assert "Hamiltonian (coupled) = the paper's “Coupled QK”" in text
    # an LM retrained to recover its weights, with metrics off the record: the fine-tuning notes say so
    assert "**Retrained weights differ:**" in text and "0.29 %" in text
    assert "fine-tuning runs trained after that date start from the retrained weights" in text
    ft = list((tmp_path / "results" / "runs" / "coupledqk" / "glue").glob("*/status.json"))
    assert len(ft) == 4  # 2 rows x (SST-2 + QNLI) x 1 seed; MNLI never started
