"""Model side of the copy-depth battery (fsn Tables 4/5): checkpoints reload exactly, per-token CE is the task's
validation loss term by term in loader order, and the paired margins behave as differences must."""

from __future__ import annotations

import json
import math
import os
import shutil

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from omegaconf import OmegaConf

from oscrepro.papers.fsn.copy_depth_eval import (
    best_epoch,
    cached_token_ce,
    copy_depth_battery,
    eval_slices,
    token_ce,
)
from oscrepro.runs.compose import compose_run
from oscrepro.runs.record import run_dir as run_dir_for
from oscrepro.tables.runs import load_run
from oscrepro.train import train


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two finished smoke runs (seeds 0 and 1) of fsn/charlm: tiny FSN torus LM on the WikiText-2 stand-in."""
    root = tmp_path_factory.mktemp("results")
    dirs = []
    for seed in (0, 1):
        cfg = compose_run(["experiment=fsn/charlm", "budget=smoke", f"seed={seed}",
                           f"paths.results_dir={root}"])
        assert train(cfg)["status"] == "ok"
        dirs.append(run_dir_for(cfg))
    return dirs


def test_reloaded_checkpoint_reproduces_the_logged_validation_loss(runs):
    run = load_run(runs[0])
    metrics = json.loads((runs[0] / "metrics.json").read_text())
    n = int(run.cfg.trainer.limit_val_batches) * int(run.cfg.data.batch_size)  # the windows smoke validated on
    _, chunks = run.datamodule.eval_chunks("val", n)
    ce = token_ce(run.model, chunks, batch_size=3)  # batch size must not matter
    assert ce.shape == (n, run.cfg.data.seq_len)
    assert float(ce.mean()) == pytest.approx(metrics["val/loss"], rel=1e-5)


def test_token_ce_is_in_validation_loader_order(runs):
    run = load_run(runs[0])
    _, chunks = run.datamodule.eval_chunks("val")
    ce = token_ce(run.model, chunks)
    rows = []
    with torch.no_grad():
        for x, y in run.datamodule.val_dataloader():
            logits, _ = run.model(x)
            rows.append(F.cross_entropy(logits.transpose(1, 2), y, reduction="none").numpy())
    np.testing.assert_allclose(ce, np.concatenate(rows), rtol=1e-5, atol=1e-6)


def test_eval_slices_follow_app_c(runs):
    run = load_run(runs[0])
    sl = eval_slices(run.datamodule, n_standard=6, n_enriched=3)
    np.testing.assert_array_equal(sl["standard"], np.arange(6))  # the first windows, in loader order
    assert sl["depth_standard"].shape == (6, run.cfg.data.seq_len)
    assert sl["chunks_standard"].shape == (6, run.cfg.data.seq_len + 1)
    starts, _ = run.datamodule.eval_chunks("val")
    first_free = starts[5] + run.cfg.data.seq_len + 1
    assert all(starts[i] >= first_free for i in sl["enriched"])  # enriched windows never overlap the standard ones


def test_reference_against_itself_has_zero_margins(runs):
    bat = copy_depth_battery([runs[0]], {"self": [runs[0]]}, n_standard=6, n_enriched=3, n_resamples=50)
    for m in bat.families["self"][0]:
        if m.n_tokens:
            assert m.mean == 0.0 and m.ci_low == 0.0 and m.ci_high == 0.0
    n_std = bat.n_windows["standard"] * 32
    shallow = sum(m.n_tokens for m in bat.families["self"][0] if m.hi < 16)
    assert shallow <= n_std <= sum(m.n_tokens for m in bat.families["self"][0])


def test_mean_reference_halves_the_pairwise_margin(runs):
    a, b = runs
    against_b = copy_depth_battery([b], {"a": [a]}, mode="best", n_standard=6, n_enriched=3, n_resamples=20)
    against_mean = copy_depth_battery([a, b], {"a": [a]}, mode="mean", n_standard=6, n_enriched=3, n_resamples=20)
    for mb, mm in zip(against_b.families["a"][0], against_mean.families["a"][0], strict=True):
        assert mb.n_tokens == mm.n_tokens
        if mb.n_tokens:
            assert mm.mean == pytest.approx(0.5 * mb.mean, rel=1e-5, abs=1e-8)  # float32 CE
    assert any(m.n_tokens and abs(m.mean) > 1e-4 for m in against_b.families["a"][0])  # seeds really differ


def test_best_reference_is_the_lowest_validation_loss(runs):
    losses = [json.loads((r / "metrics.json").read_text())["val/loss"] for r in runs]
    bat = copy_depth_battery(runs, {"x": [runs[0]]}, mode="best", n_standard=4, n_enriched=0, n_resamples=10)
    assert bat.reference == [runs[int(np.argmin(losses))]]


def test_runs_on_other_tokens_are_refused(runs, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(runs[1], other)
    cfg = OmegaConf.load(other / "config.yaml")
    cfg.data.max_chars = int(cfg.data.max_chars) - 128
    OmegaConf.save(cfg, other / "config.yaml")
    with pytest.raises(ValueError, match="identical tokens"):
        copy_depth_battery([runs[0]], {"x": [other]}, n_standard=4, n_enriched=0, n_resamples=10)


def test_token_ce_cache_is_keyed_by_checkpoint(runs, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(runs[0], run_dir)
    shutil.rmtree(run_dir / "eval", ignore_errors=True)  # caches written by the other tests
    run = load_run(run_dir)
    _, chunks = run.datamodule.eval_chunks("val", 4)
    first = cached_token_ce(run, chunks)
    (cached,) = (run_dir / "eval").glob("token_ce_*.npy")
    np.save(cached, np.zeros_like(first))
    assert not cached_token_ce(run, chunks).any()  # read back from the cache
    ckpt = run_dir / "checkpoints" / "last.ckpt"
    os.utime(ckpt, ns=(ckpt.stat().st_atime_ns, ckpt.stat().st_mtime_ns + 1_000_000))
    np.testing.assert_allclose(cached_token_ce(run, chunks), first)  # a new checkpoint is rescored


def test_best_epoch_reads_history(runs):
    epoch, value = best_epoch(runs[0])
    hist = [r for r in (runs[0] / "history.csv").read_text().splitlines()[1:] if r]
    assert epoch in (0, 1) and math.isfinite(value) and len(hist) > 2

