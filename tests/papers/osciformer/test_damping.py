"""osciformer Tables 10 / 11 (oscrepro.papers.osciformer.damping): regime counting on hand-made zeta values (the
eps band edges, zeta exactly 1, the tail thresholds) and the checkpoint reader on a tiny OsciFormer trained at smoke."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from oscrepro.papers.osciformer.damping import damping_regimes, learned_damping
from oscrepro.runs.compose import compose_run
from oscrepro.runs.lookup import model_state_dict
from oscrepro.tables.runs import load_run
from oscrepro.train import train


def test_regimes_split_at_the_eps_band() -> None:
    # eps = 0.25 keeps the band edges exact in binary: 0.5, 0.74 UD; 0.75, 1.0, 1.25 NearCrit (closed); 1.26+ OD
    zeta = np.array([0.5, 0.74, 0.75, 1.0, 1.25, 1.26, 1.5, 2.0])
    s = damping_regimes(zeta, np.ones_like(zeta), eps=0.25)
    assert s.n_channels == 8
    assert (s.ud_pct, s.near_pct, s.od_pct) == pytest.approx((25.0, 37.5, 37.5))
    assert s.median_zeta == pytest.approx(1.125)
    assert s.p_105 == pytest.approx(4 / 8) and s.p_110 == pytest.approx(4 / 8)


def test_default_band_and_tail_thresholds() -> None:
    zeta = np.array([0.9, 0.96, 1.0, 1.04, 1.05, 1.08, 1.10, 1.2])  # eps 0.05: 1.05 sits on the band's float edge
    s = damping_regimes(zeta, np.ones_like(zeta))
    assert s.ud_pct == pytest.approx(12.5)  # 0.9
    assert s.od_pct in (pytest.approx(100 * 3 / 8), pytest.approx(100 * 4 / 8))  # 1.08, 1.10, 1.2 (+ 1.05)
    assert s.near_pct + s.ud_pct + s.od_pct == pytest.approx(100.0)  # the float edge 1.05 lands in exactly one
    assert s.p_105 == pytest.approx(4 / 8) and s.p_110 == pytest.approx(2 / 8)  # >= includes 1.05 and 1.10


def test_exactly_critical_is_near_critical_for_any_eps() -> None:
    for eps in (0.0, 0.05, 0.2):
        s = damping_regimes(np.array([1.0]), np.array([3.0]), eps=eps)
        assert (s.ud_pct, s.near_pct, s.od_pct) == (0.0, 100.0, 0.0)
        assert math.isnan(s.median_omega_d)  # no underdamped channel


def test_damped_frequency_median_uses_underdamped_channels_only() -> None:
    zeta = np.array([0.6, 0.8, 1.5])
    omega = np.array([10.0, 5.0, 100.0])
    s = damping_regimes(zeta, omega)
    assert s.median_omega_d == pytest.approx(np.median([10 * 0.8, 5 * 0.6]))  # omega sqrt(1 - zeta^2)


def test_regimes_reject_mismatched_inputs() -> None:
    with pytest.raises(ValueError):
        damping_regimes(np.array([0.5, 0.6]), np.array([1.0]))


def test_checkpoint_reader_returns_softplus_of_the_trained_raw_damping(tmp_path) -> None:
    """A tiny OsciFormer (osciformer/uea at smoke: 1 layer, 2 heads, d 16) trained 3 steps on JapaneseVowels; the
    reader's zeta / omega are softplus / exp of the checkpoint's raw parameters, keys then values."""
    cfg = compose_run(["experiment=osciformer/uea", "budget=smoke", "data.name=JapaneseVowels",
                       f"paths.results_dir={tmp_path}", "trainer.enable_progress_bar=false"])
    result = train(cfg)
    assert result["status"] == "ok"
    run = load_run(next((tmp_path / "runs" / "osciformer" / "uea").iterdir()))
    zeta, omega = learned_damping(run.model)
    state = model_state_dict(run.ckpt_path)
    raw = {k.rsplit(".", 1)[-1]: v for k, v in state.items() if "zeta_raw" in k or "log_omega" in k}
    want_zeta = torch.cat([F.softplus(raw[f"zeta_raw_{r}"].double()).flatten() for r in "kv"])
    want_omega = torch.cat([raw[f"log_omega_{r}"].double().exp().flatten() for r in "kv"])
    assert zeta.shape == (2 * 16,)  # keys + values x H x d_h = 2 x 2 x 8
    np.testing.assert_allclose(zeta, want_zeta.numpy(), rtol=1e-12)
    np.testing.assert_allclose(omega, want_omega.numpy(), rtol=1e-12)
    assert (zeta > 0.0).all() and (zeta < 0.6).all()  # init U[0.05, 0.4], 3 AdamW steps of lr <= 1e-3
    stats = damping_regimes(zeta, omega)
    assert stats.ud_pct == 100.0


def test_reader_refuses_a_model_without_oscillators() -> None:
    with pytest.raises(ValueError, match="no oscillator attention"):
        learned_damping(torch.nn.Linear(2, 2))
