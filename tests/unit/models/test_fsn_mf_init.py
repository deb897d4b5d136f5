"""FSN-MF initialisation (oscrepro/papers/fsn/fsn_mf.py, ``init``): the configs' "linear" init starts the model out of
the chaotic regime that kept the first ("gaussian") choice at the unigram level (issue 16)."""

from __future__ import annotations

import functools

import pytest
import torch
import torch.nn.functional as F

from oscrepro.attention.fsn import FSNAttention
from oscrepro.papers.fsn.fsn_mf import CollectiveModeFFN, WindingRegisterFFN
from oscrepro.papers.fsn.torus_lm import SwiGLUPhaseFFN, TorusLM


def grad_norm(ffn: functools.partial, seed: int = 0) -> float:
    """Global gradient norm of the Table 3 model (k = 176, 4 layers) on one random batch at init."""
    torch.manual_seed(seed)
    model = TorusLM(205, functools.partial(FSNAttention, chunk_size=64), ffn)
    tokens = torch.randint(0, 205, (2, 65))
    logits, _ = model(tokens[:, :-1])
    F.cross_entropy(logits.reshape(-1, 205), tokens[:, 1:].reshape(-1)).backward()
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]).norm().item()


@pytest.mark.parametrize("cls", [CollectiveModeFFN, WindingRegisterFFN])
def test_linear_init_has_the_swiglu_models_gradient_scale(cls: type) -> None:
    """"linear": within 3x of the SwiGLU model's gradient norm; "gaussian" (kept for its records) far above it."""
    ref = grad_norm(functools.partial(SwiGLUPhaseFFN))
    linear = grad_norm(functools.partial(cls, init="linear"))
    gaussian = grad_norm(functools.partial(cls, init="gaussian"))
    assert linear < 3 * ref, (linear, ref)
    assert gaussian > 10 * ref, (gaussian, ref)


def test_linear_init_bounds_and_unknown_init() -> None:
    """Every entry of C and D within nn.Linear's bound 1/sqrt(fan_in) (fan_in = 2k for C, 2M for D)."""
    ffn = CollectiveModeFFN(176, init="linear")
    k, m = ffn.k, ffn.n_modes
    assert ffn.c_g.abs().max() <= (2 * k) ** -0.5 and ffn.c_v.abs().max() <= (2 * k) ** -0.5
    assert ffn.d.abs().max() <= (2 * m) ** -0.5
    with pytest.raises(ValueError, match="init="):
        CollectiveModeFFN(16, init="xavier")
