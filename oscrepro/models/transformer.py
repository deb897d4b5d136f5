"""Token/feature transformer backbones: a bidirectional encoder classifier and a causal LM.

The attention mechanism arrives as a Hydra ``_partial_`` factory (``conf/attention/*.yaml``) and is built once
per layer inside :class:`~oscrepro.models.block.TransformerBlock`; nothing here depends on which mechanism it is.
Every ``forward`` takes optional irregular timestamps ``times`` (B, T) and hands them to the mechanism, which
reads them if it is continuous-time and ignores them otherwise (``oscrepro.attention.base``).
"""

from __future__ import annotations

import math
from typing import ClassVar

import torch
from torch import Tensor, nn

from oscrepro.attention.base import VECTOR, Aux
from oscrepro.models.block import AttentionFactory, TransformerBlock

POSITIONAL = ("sinusoidal", "none")
READOUTS = ("last", "mean")


def sinusoidal_positions(t: int, d: int, device: torch.device | None = None) -> Tensor:
    """Vaswani et al. (2017) sinusoidal encoding, (T, D)."""
    pos = torch.arange(t, device=device, dtype=torch.float32)[:, None]  # (T, 1)
    freq = torch.exp(torch.arange(0, d, 2, device=device, dtype=torch.float32) * (-math.log(10000.0) / d))
    pe = torch.zeros(t, d, device=device)
    pe[:, 0::2] = torch.sin(pos * freq)
    pe[:, 1::2] = torch.cos(pos * freq[: d // 2])
    return pe


class Encoder(nn.Module):
    """Input embedding (token ids or real features) + optional sinusoidal positions + pre-LN blocks + final LN."""

    def __init__(self, d_model: int, n_heads: int, n_layers: int, d_ff: int, attention: AttentionFactory,
                 vocab_size: int | None = None, n_features: int | None = None, positional: str = "sinusoidal",
                 dropout: float = 0.0) -> None:
        super().__init__()
        if (vocab_size is None) == (n_features is None):
            raise ValueError("give exactly one of vocab_size (token input) or n_features (feature input)")
        if positional not in POSITIONAL:
            raise ValueError(f"positional={positional!r}; valid: {', '.join(POSITIONAL)}")
        self.embed = nn.Embedding(vocab_size, d_model) if vocab_size else nn.Linear(n_features, d_model)
        self.positional = positional
        self.blocks = nn.ModuleList(
            TransformerBlock(d_model, n_heads, d_ff, attention, layer_idx=i, dropout=dropout) for i in range(n_layers)
        )
        self.norm = nn.LayerNorm(d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: Tensor, *, causal: bool, times: Tensor | None = None,
                need_weights: bool = False) -> tuple[Tensor, list[Aux]]:
        """x: (B, T) ids or (B, T, F) features; ``times`` (B, T) timestamps go to every layer's mechanism."""
        h = self.embed(x)  # (B, T, D)
        if self.positional == "sinusoidal":
            h = h + sinusoidal_positions(h.shape[1], h.shape[2], h.device)
        h = self.drop(h)
        auxes: list[Aux] = []
        for block in self.blocks:
            h, aux = block(h, causal=causal, times=times, need_weights=need_weights)
            auxes.append(aux)
        return self.norm(h), auxes  # (B, T, D), one aux per layer


class EncoderClassifier(nn.Module):
    """Bidirectional encoder + linear head. ``readout='last'`` reads the last position (SVA's <verb>),
    ``'mean'`` mean-pools over time (KWS)."""

    attention_contract: ClassVar[str | None] = VECTOR  # builds each layer's mechanism (oscrepro.attention.base)

    kwargs_to: ClassVar[str] = "Encoder"  # where **encoder_kwargs go (config keys checked against it)

    def __init__(self, n_classes: int, readout: str = "mean", **encoder_kwargs) -> None:
        super().__init__()
        if readout not in READOUTS:
            raise ValueError(f"readout={readout!r}; valid: {', '.join(READOUTS)}")
        self.encoder = Encoder(**encoder_kwargs)
        self.readout = readout
        self.head = nn.Linear(self.encoder.norm.normalized_shape[0], n_classes)

    def forward(self, x: Tensor, need_weights: bool = False, *, times: Tensor | None = None
                ) -> tuple[Tensor, list[Aux]]:
        h, auxes = self.encoder(x, causal=False, times=times, need_weights=need_weights)  # (B, T, D)
        pooled = h[:, -1] if self.readout == "last" else h.mean(dim=1)  # (B, D)
        return self.head(pooled), auxes  # (B, C)


class CausalLM(nn.Module):
    """Causal transformer language model: token embedding -> causal blocks -> vocabulary logits."""

    attention_contract: ClassVar[str | None] = VECTOR  # builds each layer's mechanism (oscrepro.attention.base)

    kwargs_to: ClassVar[str] = "Encoder"  # where **encoder_kwargs go (config keys checked against it)

    def __init__(self, vocab_size: int, **encoder_kwargs) -> None:
        super().__init__()
        self.encoder = Encoder(vocab_size=vocab_size, **encoder_kwargs)
        self.head = nn.Linear(self.encoder.norm.normalized_shape[0], vocab_size)

    def forward(self, x: Tensor, need_weights: bool = False, *, times: Tensor | None = None
                ) -> tuple[Tensor, list[Aux]]:
        h, auxes = self.encoder(x, causal=True, times=times, need_weights=need_weights)  # (B, T, D)
        return self.head(h), auxes  # (B, T, V)
