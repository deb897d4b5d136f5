"""The continuous-time backbone: right padding never reaches real outputs, times reach the mechanism, readout
'last' reads the last real observation, the encoder is causal by gradient, the regressor's prediction at tau reads
only observations at times <= tau, and parameter counts match their formula."""

from __future__ import annotations

import math
from functools import partial

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from oscrepro.attention.base import AttentionBase, Aux, causal_mask
from oscrepro.attention.softmax import SoftmaxAttention
from oscrepro.models.continuous_time import (
    ContinuousTimeClassifier,
    ContinuousTimeEncoder,
    ContinuousTimeRegressor,
    ReadoutHead,
    merge_by_time,
)
from oscrepro.tasks.classification import ClassificationTask

B, T, F_IN, D, H, D_FF, C = 3, 6, 2, 8, 2, 16, 4


class TimeDecayAttention(AttentionBase):
    """Test-only continuous-time mechanism: causal softmax whose scores decay with the elapsed time,
    s_ij = q_i k_j / sqrt(d) - rate (t_i - t_j)."""

    continuous_time = True

    def __init__(self, d_model: int, n_heads: int, layer_idx: int = 0, rate: float = 1.0) -> None:
        super().__init__(d_model, n_heads, layer_idx)
        self.rate = rate
        self.qkv = nn.Linear(d_model, 3 * d_model)

    def forward(self, x: Tensor, *, causal: bool = False, pos: Tensor | None = None, times: Tensor | None = None,
                need_weights: bool = False) -> tuple[Tensor, Aux]:
        q, k, v = self.qkv(x).chunk(3, dim=-1)  # (B, T, D) each, one head
        s = q @ k.transpose(-2, -1) / math.sqrt(self.d_model)  # (B, T, T)
        if times is not None:
            s = s - self.rate * (times[:, :, None] - times[:, None, :])  # decay with t_i - t_j
        if causal:
            s = s.masked_fill(~causal_mask(x.shape[1], x.device), float("-inf"))
        w = s.softmax(dim=-1)
        return w @ v, ({"weights": w} if need_weights else {})


MECHANISMS = {"softmax": SoftmaxAttention, "time_decay": TimeDecayAttention}


def _enc_kwargs(mech: str = "time_decay", **kw) -> dict:
    return dict(n_features=F_IN, d_model=D, n_heads=H, n_layers=2, d_ff=D_FF, attention=partial(MECHANISMS[mech]),
                **kw)


def _batch(seed: int = 0, t: int = T) -> tuple[Tensor, Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, t, F_IN, generator=g)  # (B, T, F)
    times = (torch.rand(B, t, generator=g) + 0.1).cumsum(dim=1)  # (B, T) irregular, increasing
    return x, times


def _pad(x: Tensor, times: Tensor, n: int) -> tuple[Tensor, Tensor, Tensor]:
    """Right-pad n positions the way the data modules do (times repeat the last time); pad features are garbage
    on purpose. Returns (x, times, mask)."""
    garbage = 100.0 * torch.randn(x.shape[0], n, x.shape[2], generator=torch.Generator().manual_seed(9))
    xp = torch.cat([x, garbage], dim=1)
    tp = torch.cat([times, times[:, -1:].expand(-1, n)], dim=1)
    mask = torch.arange(x.shape[1] + n) < x.shape[1]
    return xp, tp, mask.expand(x.shape[0], -1)


@pytest.mark.parametrize("mech", list(MECHANISMS))
@pytest.mark.parametrize("readout", ["last", "mean"])
def test_appending_pads_changes_no_real_output(mech: str, readout: str) -> None:
    torch.manual_seed(0)
    model = ContinuousTimeClassifier(C, readout=readout, **_enc_kwargs(mech)).eval()
    x, times = _batch()
    xp, tp, mask = _pad(x, times, 3)
    h, _ = model.encoder(x, times=times)
    hp, _ = model.encoder(xp, times=tp)
    torch.testing.assert_close(hp[:, :T], h, rtol=0, atol=1e-5)
    logits, _ = model(x, times=times)
    logits_p, _ = model(xp, times=tp, mask=mask)
    torch.testing.assert_close(logits_p, logits, rtol=0, atol=1e-5)
    assert (model(xp, times=tp)[0] - logits).abs().max() > 1e-3  # without the mask the pads are read: can fail


def test_readout_last_picks_each_rows_last_real_observation() -> None:
    torch.manual_seed(0)
    model = ContinuousTimeClassifier(C, readout="last", **_enc_kwargs()).eval()
    x, times = _batch()
    lengths = [2, 6, 4]
    mask = torch.arange(T)[None] < torch.tensor(lengths)[:, None]  # (B, T)
    ragged_t = torch.where(mask, times, times.gather(1, (torch.tensor(lengths) - 1)[:, None]))  # pads repeat
    logits, _ = model(x, times=ragged_t, mask=mask)
    for b, n in enumerate(lengths):  # each row alone, unpadded
        alone, _ = model(x[b:b + 1, :n], times=times[b:b + 1, :n])
        torch.testing.assert_close(logits[b:b + 1], alone, rtol=0, atol=1e-5)
    # the head itself: states equal to their index, so the pooled value names the position read
    head = ReadoutHead(1, 1, "last")
    nn.init.ones_(head.linear.weight), nn.init.zeros_(head.linear.bias)
    h = torch.arange(T, dtype=torch.float32).expand(B, T)[..., None]  # (B, T, 1)
    assert head(h, mask).squeeze(-1).tolist() == [n - 1 for n in lengths]
    head.readout = "mean"
    assert head(h, mask).squeeze(-1).tolist() == pytest.approx([(n - 1) / 2 for n in lengths])


def test_times_reach_the_mechanism_and_softmax_ignores_them() -> None:
    x, times = _batch()
    warped = times ** 2  # still increasing, different gaps
    for mech, changes in (("time_decay", True), ("softmax", False)):
        torch.manual_seed(0)
        model = ContinuousTimeClassifier(C, **_enc_kwargs(mech)).eval()
        delta = (model(x, times=times)[0] - model(x, times=warped)[0]).abs().max()
        assert (delta > 1e-3) if changes else (delta == 0)
    torch.manual_seed(0)
    model = ContinuousTimeClassifier(C, **_enc_kwargs("softmax", time_embedding="sinusoidal")).eval()
    assert (model(x, times=times)[0] - model(x, times=warped)[0]).abs().max() > 1e-3  # the embedding reads times


def test_missing_times_mean_index_times() -> None:
    torch.manual_seed(0)
    model = ContinuousTimeClassifier(C, **_enc_kwargs()).eval()
    x, _ = _batch()
    index = torch.arange(T, dtype=torch.float32).expand(B, T)
    torch.testing.assert_close(model(x)[0], model(x, times=index)[0], rtol=0, atol=0)


@pytest.mark.parametrize("mech", list(MECHANISMS))
def test_encoder_is_causal_by_gradient(mech: str) -> None:
    torch.manual_seed(0)
    enc = ContinuousTimeEncoder(**_enc_kwargs(mech))
    x, times = _batch()
    x.requires_grad_(True)
    h, _ = enc(x, times=times)  # (B, T, D)
    # a random read-out: the plain sum of a LayerNorm-ed output is constant (gradient 0 up to rounding)
    w = torch.randn(h.shape[-1])
    for i in range(T):
        (g,) = torch.autograd.grad((h[:, i] * w).sum(), x, retain_graph=True)  # (B, T, F)
        assert torch.all(g[:, i + 1:] == 0)  # nothing from the future
        assert g[:, : i + 1].abs().sum(dim=(0, 2)).min() > 0  # every past observation is read


def test_merge_by_time_sorts_ties_and_pads() -> None:
    times = torch.tensor([[0.0, 1.0, 2.0, 2.0]])  # last observation is a pad (repeats t = 2)
    mask = torch.tensor([[True, True, True, False]])
    targets = torch.tensor([[1.0, 3.0, 3.0]])  # tau = 1 ties an observation; the last target is a pad
    order, merged = merge_by_time(times, mask, targets)
    assert order.tolist() == [[0, 1, 4, 2, 5, 6, 3]]  # obs before query on a tie, padded observation last
    assert merged.tolist() == [[0.0, 1.0, 1.0, 2.0, 3.0, 3.0, 3.0]]  # non-decreasing, pad lifted to 3


@pytest.mark.parametrize("mech", list(MECHANISMS))
def test_regressor_prediction_at_tau_reads_only_observations_up_to_tau(mech: str) -> None:
    torch.manual_seed(0)
    model = ContinuousTimeRegressor(**_enc_kwargs(mech))
    x, times = _batch()
    targets = torch.stack([times[:, 1] + 0.01, times[:, 3], times[:, -1] + 1.0], dim=1)  # (B, 3)
    x.requires_grad_(True)
    pred, _ = model(x, times=times, target_times=targets)
    assert pred.shape == (B, 3, F_IN)  # n_out defaults to n_features
    for k in range(3):
        (g,) = torch.autograd.grad(pred[:, k].sum(), x, retain_graph=True)  # (B, T, F)
        seen = times <= targets[:, k : k + 1]  # (B, T) observations at or before tau_k
        assert torch.all(g.abs().sum(-1)[~seen] == 0)  # later observations: no influence
        assert g.abs().sum(-1)[seen].min() > 0  # earlier ones (including a tie at tau) are read


def test_regressor_ignores_padded_observations_and_targets() -> None:
    torch.manual_seed(0)
    model = ContinuousTimeRegressor(n_out=1, **_enc_kwargs()).eval()
    x, times = _batch()
    targets = times[:, -1:] + torch.tensor([0.5, 1.0])  # (B, 2), after every observation (a forecast)
    pred, _ = model(x, times=times, target_times=targets)
    xp, tp, mask = _pad(x, times, 2)
    padded_targets = torch.cat([targets, targets[:, -1:].expand(-1, 3)], dim=1)  # pads repeat the last target
    pred_p, _ = model(xp, times=tp, mask=mask, target_times=padded_targets)
    torch.testing.assert_close(pred_p[:, :2], pred, rtol=0, atol=1e-5)
    assert (model(xp, times=tp, target_times=targets)[0] - pred).abs().max() > 1e-3  # unmasked pads are read


def test_regressor_weights_come_with_the_merge_order() -> None:
    model = ContinuousTimeRegressor(**_enc_kwargs())
    x, times = _batch()
    _, auxes = model(x, need_weights=True, times=times, target_times=times[:, -1:] + 1.0)
    assert len(auxes) == 2 and all(a["weights"].shape == (B, T + 1, T + 1) for a in auxes)
    assert all(a["merge_order"].shape == (B, T + 1) for a in auxes)
    assert model(x, times=times)[1] == [{}, {}]


def _encoder_params(n_layers: int, d: int, d_ff: int, f: int) -> int:
    """Softmax attention (fused QKV + W_O, biases) + two LayerNorms + FFN per block; projection; final LN."""
    block = (4 * d * d + 4 * d) + 2 * (2 * d) + (d * d_ff + d_ff + d_ff * d + d)
    return (f * d + d) + n_layers * block + 2 * d


def test_parameter_counts_follow_the_formula() -> None:
    kw = _enc_kwargs("softmax")
    n = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    enc = _encoder_params(2, D, D_FF, F_IN)
    assert n(ContinuousTimeEncoder(**kw)) == enc
    assert n(ContinuousTimeClassifier(C, **kw)) == enc + D * C + C
    assert n(ContinuousTimeRegressor(n_out=3, **kw)) == enc + D + D * 3 + 3  # + query embedding + head
    paper = dict(kw, d_model=256, n_heads=8, n_layers=1, d_ff=1024)  # conf/model/continuous_time.yaml sizes
    assert n(ContinuousTimeEncoder(**paper)) == _encoder_params(1, 256, 1024, F_IN) == 791_040


def test_classification_task_hands_times_and_mask_to_the_model() -> None:
    torch.manual_seed(0)
    model = ContinuousTimeClassifier(C, **_enc_kwargs())
    task = ClassificationTask(model, optimizer=partial(torch.optim.AdamW))
    x, times = _batch()
    xp, tp, mask = _pad(x, times, 2)
    y = torch.tensor([0, 1, 3])
    expected = F.cross_entropy(model(x, times=times)[0], y)
    torch.testing.assert_close(task.loss((xp, y, {"times": tp, "mask": mask})), expected, rtol=0, atol=1e-5)
    assert (task.loss((xp, y)) - expected).abs() > 1e-4  # without meta: index times and pads read
