"""Exact parameter counts of the FSN paper's Table 3 and the matching rules of §2.4-2.5 / App. A.

Derivation (documented in the model modules):

FSN (k = 176, 4 layers, vocab V). The two corpora differ by 1,011,834 - 973,818 = 38,016 = 108 * 352 = (205 - 97) * 2k,
so every vocabulary item owns exactly 2k parameters: its torus embedding (k) and its readout prototype phases (k), no
per-symbol bias. The remaining 939,674 are
    shared gates  3 * (2k * k + k)                       = 186,384  (q, k gate pair + value gate, App. A)
    per layer     SwiGLU 3 * k * 2k                      = 185,856  (hidden 2.0 k, no biases)
                  LayerNorm before the SwiGLU, 2k        =     352
                  kernel 4Nk, N = 3                      =   2,112  (§2.5 "4Nk real parameters per layer")
                  alpha_attn, alpha_ffn                  =       2
                  -> x 4 layers                          = 753,288
    scalars       tau (shared) + readout temperature     =       2
    total 186,384 + 753,288 + 2 = 939,674.
Transformer (d, V): 4 (16 d^2 + 8 d) + 2 V d + V: (120, 205) -> 974,845, (124, 97) -> 1,012,185.
"""

from __future__ import annotations

import functools

import pytest

from oscrepro.attention.fsn import FSNAttention
from oscrepro.attention.kuramoto import KuramotoAttention
from oscrepro.models.rope_transformer import RopeTransformerLM, rope_transformer_params, search_width
from oscrepro.papers.fsn.fsn_mf import (
    CollectiveModeFFN,
    WindingRegisterFFN,
    collective_params,
    match_modes,
    swiglu_block_params,
)
from oscrepro.papers.fsn.torus_lm import SwiGLUPhaseFFN, TorusLM

K, L, N = 176, 4, 3


def n_params(model) -> int:
    return sum(p.numel() for p in model.parameters())


def torus(vocab: int, attention=FSNAttention, ffn=SwiGLUPhaseFFN, **attn_kwargs) -> TorusLM:
    return TorusLM(vocab, functools.partial(attention, **attn_kwargs), functools.partial(ffn))


@pytest.mark.parametrize("vocab,expected", [(205, 1_011_834), (97, 973_818)])
def test_fsn_counts_match_table3(vocab: int, expected: int) -> None:
    model = torus(vocab)
    assert n_params(model) == expected
    inventory = (2 * K * vocab + 3 * (2 * K * K + K) + L * (3 * K * 2 * K + 2 * K + 4 * N * K + 2) + 2)
    assert inventory == expected


@pytest.mark.parametrize("vocab,width,expected", [(205, 120, 974_845), (97, 124, 1_012_185)])
def test_transformer_width_search_and_counts_match_table3(vocab: int, width: int, expected: int) -> None:
    assert search_width(1_000_000, vocab) == width
    model = RopeTransformerLM(vocab)  # d_model=None: automated search
    assert model.d_model == width
    assert n_params(model) == expected
    for other in (width - 4, width + 4):  # the neighbours on the step-4 grid are farther from the target
        assert abs(rope_transformer_params(other, vocab) - 1_000_000) > abs(expected - 1_000_000)


@pytest.mark.parametrize("d,vocab,final_norm", [(16, 13, False), (64, 205, False), (36, 97, True)])
def test_transformer_closed_form_equals_instantiated(d: int, vocab: int, final_norm: bool) -> None:
    model = RopeTransformerLM(vocab, d_model=d, final_norm=final_norm)
    assert n_params(model) == rope_transformer_params(d, vocab, final_norm=final_norm)


def test_kernel_adds_4nk_per_layer_over_the_base_layer() -> None:
    base, fsn = n_params(torus(205, KuramotoAttention)), n_params(torus(205))
    assert fsn - base == L * 4 * N * K  # §2.5: 2 x N x k complex coefficients per layer
    assert fsn - n_params(torus(205, static_phases=False)) == L * 2 * N * K  # no-phase: real halves only
    assert (fsn - base) / fsn < 0.01  # "below one percent of the total"


@pytest.mark.parametrize("vocab", [205, 97])
@pytest.mark.parametrize("ffn", [CollectiveModeFFN, WindingRegisterFFN])
def test_mean_field_variants_match_within_a_tenth_of_a_percent(vocab: int, ffn: type) -> None:
    fsn = n_params(torus(vocab))
    mf_model = torus(vocab, ffn=ffn)
    assert abs(n_params(mf_model) - fsn) / fsn < 1e-3
    block = n_params(mf_model.layers[0].ffn)
    swiglu = swiglu_block_params(K)
    assert swiglu == n_params(torus(vocab).layers[0].ffn) == 186_208
    assert abs(block - swiglu) / swiglu < 1e-3  # §2.4: the block it replaces, within 0.1 %


def test_mode_matching_picks_the_nearest_integer() -> None:
    m = match_modes(K, swiglu_block_params(K))
    assert m == 176 and collective_params(K, m) == 186_032
    target = swiglu_block_params(K)
    gaps = [abs(collective_params(K, c) - target) for c in (m - 1, m, m + 1)]
    assert gaps[1] == min(gaps)
    assert WindingRegisterFFN(K).n_modes == 168  # 16 register modes rebalance 176 -> 168 complex modes
