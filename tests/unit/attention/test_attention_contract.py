"""The shared attention contract (STYLE rule 5), parametrized over every conf/attention/*.yaml.

Each mechanism must: have the contract's call signature; keep (B, T, D) shape and dtype; be causal by gradient
when causal=True; give finite gradients; give the same output for the same seed; fill aux only when
need_weights=True; accept ``times`` (B, T) and ``pos`` (B, T), with explicit positions 0..T-1 equal to the default,
and, unless it is continuous-time, an output that does not depend on ``times``. The torus-phase coupling laws
(kuramoto, fsn*) share the call (x = phases), so every config is checked.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf

from oscrepro.attention.base import AttentionBase

CONF = Path(__file__).resolve().parents[3] / "conf" / "attention"
ATTENTION_CONFIGS = sorted(CONF.glob("*.yaml"))
D_MODEL, N_HEADS, T = 16, 2, 6


def _build(path: Path, seed: int = 0) -> AttentionBase:
    cfg = OmegaConf.load(path)
    factory = instantiate(cfg)
    torch.manual_seed(seed)
    mech = factory(d_model=D_MODEL, n_heads=N_HEADS, layer_idx=0)
    return mech.double()


def _irregular_times(b: int, t: int, seed: int = 0) -> torch.Tensor:
    """(B, T) strictly increasing float timestamps with random, unequal gaps."""
    gaps = torch.rand(b, t, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * 2.0 + 0.05
    return gaps.cumsum(dim=1)


def test_configs_found() -> None:
    assert len(ATTENTION_CONFIGS) >= 2, f"no attention configs under {CONF}"


@pytest.fixture(params=ATTENTION_CONFIGS, ids=[p.stem for p in ATTENTION_CONFIGS])
def conf_path(request) -> Path:
    return request.param


def test_call_signature(conf_path):
    """forward(x, *, causal=False, pos=None, times=None, need_weights=False), as DESIGN.md "Attention interface"."""
    mech = _build(conf_path)
    assert isinstance(mech, AttentionBase)
    params = inspect.signature(mech.forward).parameters
    assert list(params) == ["x", "causal", "pos", "times", "need_weights"]
    kw_only = {n: p.default for n, p in params.items() if p.kind is inspect.Parameter.KEYWORD_ONLY}
    assert kw_only == {"causal": False, "pos": None, "times": None, "need_weights": False}


def test_times_and_pos_are_accepted(conf_path):
    """times (B, T) is read only by continuous-time mechanisms; explicit positions 0..T-1 equal the default."""
    mech = _build(conf_path).eval()
    x = torch.randn(2, T, D_MODEL, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    for causal in (False, True):
        y, _ = mech(x, causal=causal)
        y_t, _ = mech(x, causal=causal, times=_irregular_times(2, T))
        assert y_t.shape == x.shape and torch.isfinite(y_t).all()
        if mech.continuous_time:  # the gaps must matter: warp them and the output moves
            y_w, _ = mech(x, causal=causal, times=_irregular_times(2, T, seed=1))
            assert (y_w - y_t).abs().max() > 1e-6
        else:
            assert torch.equal(y_t, y)
        pos = torch.arange(T).expand(2, T)  # (B, T)
        assert torch.equal(mech(x, causal=causal, pos=pos)[0], y)


def test_shape_dtype_and_aux_only_when_asked(conf_path):
    mech = _build(conf_path)
    x = torch.randn(2, T, D_MODEL, dtype=torch.float64)
    y, aux = mech(x)
    assert y.shape == x.shape and y.dtype == x.dtype
    assert aux == {}
    _, aux = mech(x, need_weights=True)
    assert aux and all(isinstance(v, torch.Tensor) for v in aux.values())
    if "weights" in aux:
        assert aux["weights"].shape == (2, N_HEADS, T, T)


def test_causal_by_gradient(conf_path):
    mech = _build(conf_path)
    x = torch.randn(2, T, D_MODEL, dtype=torch.float64, requires_grad=True)
    y, _ = mech(x, causal=True)
    for i in range(T - 1):
        (g,) = torch.autograd.grad(y[:, i].sum(), x, retain_graph=True)
        assert torch.all(g[:, i + 1 :] == 0), f"output {i} depends on future tokens"


def test_finite_gradients(conf_path):
    mech = _build(conf_path)
    x = torch.randn(2, T, D_MODEL, dtype=torch.float64, requires_grad=True)
    y, _ = mech(x)
    y.square().mean().backward()
    assert torch.isfinite(x.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in mech.parameters() if p.grad is not None)


def test_same_seed_same_output(conf_path):
    x = torch.randn(2, T, D_MODEL, dtype=torch.float64)
    torch.manual_seed(1)
    y1, _ = _build(conf_path, seed=3)(x)
    torch.manual_seed(1)
    y2, _ = _build(conf_path, seed=3)(x)
    assert torch.equal(y1, y2)
