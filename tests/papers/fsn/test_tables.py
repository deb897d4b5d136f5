"""fsn tables: every spec builds at budget=smoke (runs tables first, the analyses then read their records without
training anything), analysis tables refuse to run without the records they read, and the Table 2 wall-clock and
Figure 2 kernel-reading arithmetic is checked against hand computations."""

from __future__ import annotations

import csv
import functools
import json
import math
import shutil
import time

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from oscrepro.attention.fsn import FSNAttention
from oscrepro.papers.fsn.kernel_reading import (
    coupling_function,
    harmonic_rms,
    kernel_coefficients,
    mean_real,
    value_gate_negative_fraction,
)
from oscrepro.papers.fsn.torus_lm import SwiGLUPhaseFFN, TorusLM
from oscrepro.papers.fsn.wallclock import Curve, crossing_ratios, crossing_time, read_curve
from oscrepro.runs.lookup import find_record
from oscrepro.table import build_table
from oscrepro.tables.plan import plan
from oscrepro.tables.runs import MissingRunsError, cell_requests
from oscrepro.tables.spec import available_tables, load_spec

RUNS_TABLES = ["fsn/table1", "fsn/ladder", "fsn/screen"]
ANALYSIS_TABLES = ["fsn/table3", "fsn/table2", "fsn/table4", "fsn/table5", "fsn/fig2"]


def _rows(md):
    return list(csv.DictReader(open(md.with_suffix(".csv"))))


def _n_runs(results):
    return len(list((results / "runs").rglob("status.json")))


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """All fsn tables at smoke in one results dir: runs tables first, then the analyses."""
    results = tmp_path_factory.mktemp("results")
    t0, md = time.time(), {}
    for key in RUNS_TABLES:
        md[key] = build_table(key, budget="smoke", results_dir=results)
    n_trained = _n_runs(results)
    for key in ANALYSIS_TABLES:
        md[key] = build_table(key, budget="smoke", results_dir=results)
    return {"results": results, "md": md, "n_trained": n_trained, "seconds": time.time() - t0}


def test_every_fsn_table_is_covered():
    """Built here, or (step time: no runs involved) in tests/papers/fsn/test_step_time.py."""
    covered = RUNS_TABLES + ANALYSIS_TABLES + ["fsn/step_time"]
    assert sorted(covered) == [k for k in available_tables() if k.startswith("fsn/")]


def test_all_fsn_tables_build_at_smoke_reusing_runs(built):
    for key, md in built["md"].items():
        text = md.read_text()
        spec = load_spec(key)
        paper_protocol = spec.kind == "analysis" and "smoke" not in spec.analysis.get("budgets", {})
        assert ("BELOW PAPER BUDGET" in text) != paper_protocol and "**commit**" in text, key
        assert md.with_suffix(".csv").exists(), key
    for key in RUNS_TABLES:
        for r in _rows(built["md"][key]):
            assert int(r["n_failed"]) == 0 and int(r["n_missing"]) == 0, (key, r)
    # analyses read Table 1 / ladder records: nothing new was trained for them
    assert _n_runs(built["results"]) == built["n_trained"]
    # 11 Table-1 runs + 8 ladder runs - 2 shared (the 1M rung) + 1 screen ablation: the screen's FSN and, at
    # smoke (2 epochs either way), its no-phase ablation are Table 1's runs
    assert built["n_trained"] == 11 + 8 - 2 + 1


def test_table1_our_values_are_ours(built):
    spec = load_spec("fsn/table1")
    rows = _rows(built["md"]["fsn/table1"])
    assert len(rows) == len(spec.rows)
    for r, row in zip(rows, spec.rows, strict=True):
        paper = row.paper["bpc"][0] if isinstance(row.paper["bpc"], list) else row.paper["bpc"]
        assert math.isfinite(float(r["ours_mean"])) and float(r["ours_mean"]) != pytest.approx(paper, abs=1e-6)


def test_ladder_widths_grow_and_post_hook_reports_them(built):
    rows = {(r["row"], r["column"]): float(r["ours_mean"]) for r in _rows(built["md"]["fsn/ladder"])}
    for col in ("fsn_params", "xf_params"):
        sizes = [rows[(rung, col)] for rung in ("1M", "2M", "4M", "8M")]
        assert sizes == sorted(sizes) and len(set(sizes)) == 4
    assert "FSN lighter than the transformer by" in built["md"]["fsn/ladder"].read_text()


def test_screen_ablations_change_only_the_ablated_part(built):
    spec = load_spec("fsn/screen")
    cells = plan(spec, "smoke", [f"paths.results_dir={built['results']}"])
    full = [cells[(i, "full")][0].cfg for i in range(len(spec.rows))]
    ablated = [cells[(i, "ablated")][0].cfg for i in range(len(spec.rows))]
    assert all(c.trainer.max_epochs == 2 for c in full + ablated)
    atts = sorted((bool(c.model.attention.delay), bool(c.model.attention.static_phases)) for c in ablated)
    assert atts == [(False, True), (True, False)]  # no-delay run, no-phase run
    for f, a in zip(full, ablated, strict=True):  # nothing but the attention node differs
        fc, ac = OmegaConf.to_container(f, resolve=True), OmegaConf.to_container(a, resolve=True)
        fc["model"].pop("attention"), ac["model"].pop("attention")
        fc.pop("mechanism"), ac.pop("mechanism")  # the attention config's name (wandb job_type; not hashed)
        assert fc == ac
    assert all((r.run_dir / "status.json").exists() for reqs in cells.values() for r in reqs)


def test_table3_counts_match_the_paper_exactly(built):
    rows = _rows(built["md"]["fsn/table3"])
    checked = [r for r in rows if r["Params (paper)"] != "—"]
    assert len(checked) == 4
    for r in checked:
        assert r["Params (ours)"] == r["Params (paper)"] and r["Δ"] == "+0"
    assert "DIFFERENT" not in built["md"]["fsn/table3"].read_text()


def test_table4_layout_and_token_accounting(built):
    rows = _rows(built["md"]["fsn/table4"])
    assert [(r["Model"], r["Row"]) for r in rows] == [("Tokens", ""), ("Base layer", "s0"), ("Base layer", "mean"),
                                                      ("FSN", "s0"), ("FSN", "mean"), ("No phases", "s0"),
                                                      ("No phases", "mean")]
    bins = ["0–1", "2–3", "4–7", "8–15", "16–23", "24–32"]
    tokens = [int(rows[0][f"{b} (ours)"].replace(",", "")) for b in bins]
    n_standard_tokens = 8 * 32  # smoke: 8 standard windows of 32 targets, every target in exactly one bin
    assert sum(tokens[:4]) <= n_standard_tokens <= sum(tokens)
    assert rows[0]["0–1 (paper)"] == "208,035"
    for fam in (1, 3, 5):  # one seed: the seed mean equals the seed
        for b in bins[:3]:
            assert rows[fam][f"{b} (ours)"].split(" ")[0] == rows[fam + 1][f"{b} (ours)"].split(" ")[0]
    assert (built["md"]["fsn/table4"].parent / "table4_fig1.png").exists()
    assert (built["md"]["fsn/table4"].parent / "table4_fig4.png").exists()


def test_table5_uses_the_mean_reference_and_one_nophase_seed(built):
    text = built["md"]["fsn/table5"].read_text()
    assert "**Reference (mean):** codeparrot — Transformer" in text
    assert [r["Model"] for r in _rows(built["md"]["fsn/table5"])] == ["Tokens", "FSN", "FSN", "No phases", "No phases"]


def test_table2_and_figures(built):
    rows = _rows(built["md"]["fsn/table2"])
    assert [r["Params"] for r in rows] == ["1M", "2M", "4M", "8M"]
    assert all(r["seeds FSN × XF (ours)"] == "1×1" and r["per-epoch slowdown (ours)"].endswith("×") for r in rows)
    out = built["md"]["fsn/table2"].parent
    assert (out / "fig3.png").exists() and (out / "fig2.png").exists()
    layers = _rows(built["md"]["fsn/fig2"])
    assert [int(r["layer"]) for r in layers] == [1, 2, 3, 4]


@pytest.mark.parametrize("key,source", [("fsn/table4", "fsn/table1"), ("fsn/table2", "fsn/ladder")])
def test_analysis_tables_name_the_table_that_trains_their_runs(tmp_path, key, source):
    with pytest.raises(MissingRunsError) as err:
        build_table(key, budget="cpu", results_dir=tmp_path)
    assert f"reads the runs of table {source}" in str(err.value)
    assert f"python -m oscrepro.table {source} --budget cpu" in str(err.value)
    assert not (tmp_path / "runs").exists()  # nothing was trained


def test_records_trained_on_another_device_are_found(built, tmp_path):
    req = cell_requests("fsn/table1", "smoke", "enwik8 — FSN", None, built["results"])[0]
    moved = req.run_dir.parent / "000000000000"
    shutil.copytree(req.run_dir, moved)
    cfg = OmegaConf.load(moved / "config.yaml")
    cfg.trainer.accelerator = "gpu"
    OmegaConf.save(cfg, moved / "config.yaml")
    hidden = tmp_path / "orig"
    shutil.move(str(req.run_dir), hidden)
    try:
        assert find_record(req) == moved
        cfg.trainer.max_epochs = 7  # a real config difference is not a match
        OmegaConf.save(cfg, moved / "config.yaml")
        assert find_record(req) is None
    finally:
        shutil.move(str(hidden), req.run_dir)
        shutil.rmtree(moved)


# ------------------------------------------------------------------------------ Table 2 wall-clock arithmetic
def test_crossing_time_interpolates_between_epoch_ends():
    c = Curve(np.array([3.0, 2.0, 1.0]), np.array([10.0, 20.0, 30.0]))
    assert crossing_time(c, 1.5) == pytest.approx(25.0)
    assert crossing_time(c, 2.0) == pytest.approx(20.0)
    assert crossing_time(c, 5.0) == pytest.approx(10.0)  # already below at the first epoch end
    assert crossing_time(c, 0.5) == math.inf


def test_crossing_ratios_by_hand():
    xf = [Curve(np.array([2.0, 1.6]), np.array([5.0, 10.0])), Curve(np.array([2.0, 1.4]), np.array([6.0, 12.0]))]
    fsn = [Curve(np.array([1.8, 1.2]), np.array([30.0, 60.0]))]
    res = crossing_ratios(fsn, xf)
    assert res["slowdown"] == pytest.approx(30.0 / 5.5)
    # mean target 1.5 at mean wall 11: FSN crosses 1.5 half-way between 30 and 60 s -> 45 / 11
    assert res["vs_mean"]["median"] == pytest.approx(45.0 / 11.0)
    # lowest-loss transformer (1.4 at 12 s): crossing at 30 + 30 * 0.4 / 0.6 = 50 s
    assert res["vs_lowest"]["median"] == pytest.approx(50.0 / 12.0)
    never = crossing_ratios([Curve(np.array([3.0, 2.5]), np.array([1.0, 2.0]))], xf)
    assert never["vs_mean"]["n_reached"] == 0 and math.isnan(never["vs_mean"]["median"])


def test_read_curve_splits_wall_clock_uniformly_or_reads_a_time_column(tmp_path):
    (tmp_path / "metrics.json").write_text(json.dumps({"train_wall_time_s": 90.0}))
    (tmp_path / "history.csv").write_text(
        "epoch,step,train/loss_step,val/bpc,time/elapsed_s\n0,1,3.0,,\n0,1,,2.5,40\n1,2,,2.0,70\n2,3,,1.9,95\n")
    uniform = read_curve(tmp_path)
    np.testing.assert_allclose(uniform.values, [2.5, 2.0, 1.9])
    np.testing.assert_allclose(uniform.times, [30.0, 60.0, 90.0])
    np.testing.assert_allclose(read_curve(tmp_path, time_column="time/elapsed_s").times, [40.0, 70.0, 95.0])


# ------------------------------------------------------------------------------- Figure 2 kernel reading
def test_coupling_function_is_the_double_sum_of_eq3():
    rng = np.random.default_rng(0)
    w = rng.normal(size=(3, 5)) + 1j * rng.normal(size=(3, 5))
    delta = np.linspace(-3, 3, 7)
    explicit = np.array([sum(w[n, a].real * math.sin((n + 1) * d) + w[n, a].imag * math.cos((n + 1) * d)
                             for n in range(3) for a in range(5)) / 5 for d in delta])
    np.testing.assert_allclose(coupling_function(w, delta), explicit, rtol=1e-12)
    kuramoto = np.zeros((3, 5), dtype=complex)
    kuramoto[0] = 1.0
    np.testing.assert_allclose(coupling_function(kuramoto, delta), np.sin(delta), atol=1e-12)
    np.testing.assert_allclose(harmonic_rms(w), np.sqrt((np.abs(w) ** 2).mean(1)))
    assert (mean_real(-kuramoto) < 0).tolist() == [True, False, False]


def test_kernel_reading_of_a_fresh_fsn_and_signed_value_gates():
    model = TorusLM(11, functools.partial(FSNAttention, n_harmonics=3), functools.partial(SwiGLUPhaseFFN),
                    k=8, n_layers=2)
    kernels = kernel_coefficients(model)
    assert len(kernels) == 2 and kernels[0].w0.shape == (3, 8)
    share = 1 / (1 + math.exp(-1.5))
    assert mean_real(kernels[0].w1)[0] == pytest.approx(share, rel=1e-6)  # App. A init, read back
    assert mean_real(kernels[0].w0)[0] == pytest.approx(1 - share, rel=1e-6)
    tokens = torch.randint(0, 11, (2, 6))
    assert value_gate_negative_fraction(model, tokens) == [0.0, 0.0]  # zero weights, unit bias: all positive
    with torch.no_grad():
        model.gates.proj.bias[16:] = -1.0  # value-gate block of the shared Linear(2k, 3k)
    assert value_gate_negative_fraction(model, tokens) == [1.0, 1.0]


def test_a_device_variant_serves_a_runs_table_cell_without_retraining(built, tmp_path):
    """A record trained with trainer=gpu serves the plain table: the build neither retrains the cell nor reports
    it missing, the cell reads the variant's metric, and the header names the variant's machine."""
    results = built["results"]
    req = cell_requests("fsn/table1", "smoke", "enwik8 — FSN", None, results)[0]
    variant = req.run_dir.parent / "0000000000aa"
    shutil.copytree(req.run_dir, variant)
    cfg = OmegaConf.load(variant / "config.yaml")
    cfg.trainer.accelerator = "gpu"
    OmegaConf.save(cfg, variant / "config.yaml")
    metrics = json.loads((variant / "metrics.json").read_text())
    metrics["val/bpc"] = 9.8765
    (variant / "metrics.json").write_text(json.dumps(metrics))
    status = json.loads((variant / "status.json").read_text())
    status["device"] = "cuda: test GPU"
    (variant / "status.json").write_text(json.dumps(status))
    hidden = tmp_path / "orig"
    shutil.move(str(req.run_dir), hidden)
    n_before = _n_runs(results)
    try:
        md = build_table("fsn/table1", budget="smoke", results_dir=results)  # trains what is missing: nothing
        assert _n_runs(results) == n_before and not req.run_dir.exists()
        text = md.read_text()
        assert "cuda: test GPU (1 runs)" in text and "missing" not in text.split("|")[0]
        assert load_spec("fsn/table1").seeds_for("smoke", 1) == [0]  # one seed: the cell is the variant's value
        row = next(r for r in _rows(md) if r["row"] == "enwik8 — FSN")
        assert (int(row["n"]), int(row["n_missing"])) == (1, 0)
        assert float(row["ours_mean"]) == pytest.approx(9.8765, abs=1e-4)
    finally:
        shutil.rmtree(variant)
        shutil.move(str(hidden), req.run_dir)
    text = build_table("fsn/table1", budget="smoke", results_dir=results, render_only=True).read_text()
    assert "test GPU" not in text  # the exact record wins again


def test_copy_depth_accepts_another_copy_of_the_same_data_and_refuses_other_data(built, tmp_path):
    """Where a run's data copy lives (data.data_dir, e.g. a device's copy) does not change the scored tokens; the
    records' data fingerprints do."""
    from oscrepro.papers.fsn.copy_depth_eval import copy_depth_battery

    results = built["results"]
    ref = cell_requests("fsn/table1", "smoke", "enwik8 — Transformer, converged (50 ep)", None, results)[0].run_dir
    src = cell_requests("fsn/table1", "smoke", "enwik8 — FSN, converged (50 ep)", None, results)[0].run_dir
    moved = src.parent / "0000000000bb"
    shutil.copytree(src, moved)
    try:
        cfg = OmegaConf.load(moved / "config.yaml")
        cfg.data.data_dir = str(tmp_path / "another-copy")
        OmegaConf.save(cfg, moved / "config.yaml")
        bat = copy_depth_battery([ref], {"FSN": [moved]}, n_standard=4, n_enriched=2, n_resamples=50, cache=False)
        assert bat.runs["FSN"] == [moved]
        status = json.loads((moved / "status.json").read_text())
        status["data_fingerprint"] = "0123456789abcdef"
        (moved / "status.json").write_text(json.dumps(status))
        with pytest.raises(ValueError, match="different fingerprints"):
            copy_depth_battery([ref], {"FSN": [moved]}, n_standard=4, n_enriched=2, n_resamples=50, cache=False)
    finally:
        shutil.rmtree(moved)


def test_a_copy_depth_table_of_a_variant_reads_the_variant_runs(built, tmp_path):
    """``--variant anneal +lr_schedule=cosine`` on Table 4 reads the runs of Table 1's variant (other run ids), not
    the plain runs: at smoke (train_missing) it trains exactly those, and a missing one is named with the override."""
    over = ["+lr_schedule=cosine"]
    results = tmp_path / "results"
    shutil.copytree(built["results"] / "runs", results / "runs")  # the plain smoke runs are all there
    with pytest.raises(MissingRunsError) as err:  # cpu: no variant run exists, and the plain ones must not serve
        build_table("fsn/table4", budget="cpu", results_dir=results, extra=over, variant="anneal")
    assert "+lr_schedule=cosine --variant" in str(err.value)
    md = build_table("fsn/table4", budget="smoke", results_dir=results, extra=over, variant="anneal")
    assert md.parent == results / "fsn" / "smoke" / "anneal"
    assert "**Overrides of every source run (variant `anneal`):** `+lr_schedule=cosine`" in md.read_text()
    used = {r["Checkpoint"].split("(")[1].split(";")[0] for r in _rows(md) if r["Checkpoint"]}
    variant_ids = {r.run_dir.name for row in ("enwik8 — FSN, converged (50 ep)", "enwik8 — FSN, no phases")
                   for r in cell_requests("fsn/table1", "smoke", row, None, results, over)}
    plain_ids = {r.run_dir.name for row in ("enwik8 — FSN, converged (50 ep)", "enwik8 — FSN, no phases")
                 for r in cell_requests("fsn/table1", "smoke", row, None, results)}
    assert variant_ids <= used and not plain_ids & used
    cfg = OmegaConf.load(next(results.rglob(f"{sorted(variant_ids)[0]}/config.yaml")))
    assert cfg.task.scheduler._target_ == "oscrepro.tasks.schedules.warmup_cosine"


def test_an_analysis_of_fixed_runs_refuses_overrides(tmp_path):
    with pytest.raises(ValueError, match="takes no overrides"):
        build_table("fsn/table3", budget="smoke", results_dir=tmp_path, extra=["+lr_schedule=cosine"], variant="x")
    assert not (tmp_path / "fsn").exists()
