"""Pre-LN transformer block that hosts any attention mechanism.

The block owns the residual stream, LayerNorms and the feed-forward network; the mechanism is a
``functools.partial`` (from ``conf/attention/*.yaml``) called once per layer with the shapes the block
owns. The block never branches on the mechanism's name.
"""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor, nn

from oscrepro.attention.base import AttentionBase, Aux

AttentionFactory = Callable[..., AttentionBase]


class FeedForward(nn.Module):
    """Position-wise FFN: Linear(d_model, d_ff) -> GELU -> Linear(d_ff, d_model)."""

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.GELU(), nn.Dropout(dropout), nn.Linear(d_ff, d_model)
        )

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)


class TransformerBlock(nn.Module):
    """x + Attn(LN(x)), then x + FFN(LN(x)) (pre-LN, Xiong et al. 2020)."""

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int,
        attention: AttentionFactory,
        layer_idx: int = 0,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = attention(d_model=d_model, n_heads=n_heads, layer_idx=layer_idx)
        self.ln2 = nn.LayerNorm(d_model)
        self.ffn = FeedForward(d_model, d_ff, dropout)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: Tensor, *, causal: bool = False, times: Tensor | None = None,
                need_weights: bool = False) -> tuple[Tensor, Aux]:
        """(B, T, D) -> ((B, T, D), aux); ``times`` (B, T) goes to the mechanism (continuous-time ones read it)."""
        a, aux = self.attn(self.ln1(x), causal=causal, times=times, need_weights=need_weights)  # (B, T, D)
        x = x + self.drop(a)
        x = x + self.drop(self.ffn(self.ln2(x)))
        return x, aux
