"""The shared attention contract (STYLE rule 5), parametrized over every conf/attention/*.yaml.

Each mechanism must: keep (B, T, D) shape and dtype; be causal by gradient when causal=True; give finite
gradients; give the same output for the same seed; fill aux only when need_weights=True.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf

CONF = Path(__file__).resolve().parents[2] / "conf" / "attention"
ATTENTION_CONFIGS = sorted(CONF.glob("*.yaml"))
D_MODEL, N_HEADS, T = 16, 2, 6


def _build(path: Path, seed: int = 0):
    cfg = OmegaConf.load(path)
    factory = instantiate(cfg)
    torch.manual_seed(seed)
    mech = factory(d_model=D_MODEL, n_heads=N_HEADS, layer_idx=0)
    return mech.double()


def _is_contract_mechanism(path: Path) -> bool:
    """Mechanisms on the (B, T, D) contract; torus-phase coupling laws declare `contract: phase` instead."""
    return OmegaConf.load(path).get("_contract_", "vector") == "vector"


VECTOR = [p for p in ATTENTION_CONFIGS if _is_contract_mechanism(p)]


@pytest.fixture(params=VECTOR, ids=[p.stem for p in VECTOR])
def conf_path(request) -> Path:
    return request.param


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
