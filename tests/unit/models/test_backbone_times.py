"""Backbones hand the irregular timestamps ``times`` (B, T) to every layer's mechanism unchanged (DESIGN.md
"Attention interface"), whichever mechanism it is, and accept the call without them."""

from __future__ import annotations

from functools import partial

import pytest
import torch
from torch import Tensor, nn

from oscrepro.attention.base import AttentionBase, Aux
from oscrepro.models.rope_transformer import RopeTransformerLM
from oscrepro.models.transformer import CausalLM, EncoderClassifier
from oscrepro.papers.fsn.torus_lm import SwiGLUPhaseFFN, TorusLM

B, T, V = 2, 5, 11


class TimesProbe(AttentionBase):
    """A continuous-time stand-in: adds a learned multiple of ``times`` to its input and records what it got."""

    continuous_time = True

    def __init__(self, d_model: int, n_heads: int, layer_idx: int = 0, seen: list | None = None,
                 **_: object) -> None:
        super().__init__(d_model, n_heads, layer_idx)
        self.scale = nn.Parameter(torch.linspace(-1.0, 1.0, d_model))  # not constant: LayerNorm would cancel it
        self.seen = seen if seen is not None else []

    def forward(self, x: Tensor, *, causal: bool = False, pos: Tensor | None = None, times: Tensor | None = None,
                need_weights: bool = False) -> tuple[Tensor, Aux]:
        self.seen.append((self.layer_idx, causal, times))
        y = x if times is None else x + times[..., None].to(x.dtype) * self.scale  # (B, T, D)
        return y, {}


def _backbones(seen: list) -> dict[str, tuple[nn.Module, bool]]:
    """name -> (model, causal) with two layers of the probe."""
    probe = partial(TimesProbe, seen=seen)
    enc = dict(d_model=8, n_heads=2, n_layers=2, d_ff=16, attention=probe)
    return {
        "causal_lm": (CausalLM(vocab_size=V, **enc), True),
        "encoder_classifier": (EncoderClassifier(n_classes=3, vocab_size=V, **enc), False),
        "torus_lm": (TorusLM(V, probe, partial(SwiGLUPhaseFFN), k=8, n_layers=2, n_heads=2, dropout=0.0), True),
    }


@pytest.mark.parametrize("name", ["causal_lm", "encoder_classifier", "torus_lm"])
def test_times_reach_every_layer_and_change_the_output(name: str) -> None:
    seen: list = []
    model, causal = _backbones(seen)[name]
    model.eval()
    tokens = torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(0))
    times = torch.rand(B, T, generator=torch.Generator().manual_seed(1)).cumsum(dim=1)  # (B, T) irregular
    plain, _ = model(tokens)
    assert [(i, c, t) for i, c, t in seen] == [(0, causal, None), (1, causal, None)]
    seen.clear()
    timed, _ = model(tokens, times=times)
    assert [(i, c) for i, c, _ in seen] == [(0, causal), (1, causal)]
    assert all(t is times for _, _, t in seen)  # passed through, not copied or re-derived
    assert (timed - plain).abs().max() > 1e-4  # a continuous-time mechanism's reading reaches the output


def test_rope_transformer_accepts_and_ignores_times() -> None:
    torch.manual_seed(0)
    model = RopeTransformerLM(V, d_model=8, n_layers=1, n_heads=2, dropout=0.0).eval()
    tokens = torch.randint(0, V, (B, T))
    times = torch.rand(B, T).cumsum(dim=1)
    assert torch.equal(model(tokens, times=times)[0], model(tokens)[0])  # its own RoPE attention is discrete-time
