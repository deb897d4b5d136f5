"""Oscillatory Synchronization Network block (ssa paper Sec. III.4, Eqs. 15-16, Algorithm 2).

The OSN block is the pre-LN transformer block with multi-head attention replaced by multi-frequency
synchronization heads (SSA):

    z = x + Dropout(MFSH(LayerNorm(x)))        (Eq. 15)
    y = z + Dropout(FFN(LayerNorm(z)))         (Eq. 16),  FFN = Linear(D, 4D) -> GELU -> Linear(4D, D)

It is literally ``TransformerBlock`` hosting ``SelectiveSynchronizationAttention``, so the OSN-vs-transformer
comparison differs only in the mixer. At D = 512, H = 8 it has 3,152,393 parameters: the softmax block's
3,152,384 plus H bandwidths alpha_h and one coupling K (Sec. IV.2).
"""

from __future__ import annotations

from functools import partial
from typing import Any

from oscrepro.attention.ssa import SelectiveSynchronizationAttention
from oscrepro.models.block import TransformerBlock


class OSNBlock(TransformerBlock):
    """Pre-LN block with SSA as the mixer (Algorithm 2); same (B, N, D) -> (B, N, D) interface as a transformer."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int | None = None, top_k: int | None = None,
                 dropout: float = 0.0, layer_idx: int = 0, **ssa_kwargs: Any) -> None:
        """d_ff defaults to 4 * d_model (the authors' osn_model.py); ssa_kwargs go to the SSA constructor."""
        attention = partial(SelectiveSynchronizationAttention, top_k=top_k, **ssa_kwargs)
        super().__init__(d_model, n_heads, 4 * d_model if d_ff is None else d_ff, attention=attention,
                         layer_idx=layer_idx, dropout=dropout)
