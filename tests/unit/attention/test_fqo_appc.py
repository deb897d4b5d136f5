"""fqo App. C variants: relative-position anchor rotation δ(i−j) (L3) and coupling gain β_{h,i} (L4); appc spec."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from oscrepro.attention.fqo import FixedQueryOscillatorAttention
from oscrepro.attention.fqo_gain import CouplingGainOscillatorAttention, gain_summary
from oscrepro.attention.fqo_relpos import RelPosAnchorOscillatorAttention, relative_offsets
from oscrepro.tables.plan import plan
from oscrepro.tables.spec import load_spec

D, H, T = 16, 2, 7


def _pair(cls, seed: int = 0, **kw):
    """(variant, base) with identical shared weights, float64."""
    torch.manual_seed(seed)
    var = cls(d_model=D, n_heads=H, **kw).double()
    base = FixedQueryOscillatorAttention(d_model=D, n_heads=H, d_osc=kw.get("d_osc", 2), p=kw.get("p", 1.0)).double()
    base.load_state_dict({k: v for k, v in var.state_dict().items() if k in base.state_dict()})
    return var, base


def _x(b: int = 2, t: int = T, seed: int = 1) -> torch.Tensor:
    return torch.randn(b, t, D, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


def _relpos_loop_reference(mod: RelPosAnchorOscillatorAttention, x: torch.Tensor, causal: bool) -> torch.Tensor:
    """Plain per-(head, i, j) loops with explicit block-rotation matrices: Eqs. (2)-(6) on rotated anchors."""
    b, t, _ = x.shape
    n, nh, dh = mod.d_osc, mod.n_heads, mod.d_head
    f = mod.f_proj(x).view(b, t, nh, dh)
    g = mod.g_proj(x).view(b, t, nh, dh)
    v = mod.v_proj(x).view(b, t, nh, dh)
    r = F.normalize(mod.anchor_proj(x).view(b, t, nh, n), dim=-1, eps=1e-8)
    out = torch.zeros(b, t, nh, dh, dtype=x.dtype)
    for bi in range(b):
        for hh in range(nh):
            for i in range(t):
                js = range(i + 1) if causal else range(t)
                rot_r, ws = [], []
                for j in js:
                    k = max(-mod.max_rel_dist, min(mod.max_rel_dist, i - j)) + mod.max_rel_dist
                    rot = torch.eye(n, dtype=x.dtype)
                    for m in range(n // 2):
                        c, s = torch.cos(mod.rel_angle[hh, k, m]), torch.sin(mod.rel_angle[hh, k, m])
                        blk = torch.stack([torch.stack([c, -s]), torch.stack([s, c])])
                        rot = rot.index_put((torch.arange(2 * m, 2 * m + 2)[:, None], torch.arange(2 * m, 2 * m + 2)),
                                            blk)
                    rot_r.append(rot @ r[bi, j, hh])
                    ws.append(F.softplus(f[bi, i, hh] @ g[bi, j, hh] / math.sqrt(dh)))
                h = sum(w * rr for w, rr in zip(ws, rot_r, strict=True))
                z = h / h.norm().clamp_min(1e-8)
                num = torch.stack([(1 + (z @ rr).clamp(-1, 1)) ** mod.p for rr in rot_r])
                a = num / num.sum()
                out[bi, i, hh] = sum(aj * v[bi, j, hh] for aj, j in zip(a, js, strict=True))
    return mod.out(out.reshape(b, t, nh * dh))


def test_relative_offsets_clip_and_index():
    idx = relative_offsets(5, 2)
    assert idx[0, 0] == 2 and idx[4, 0] == 4 and idx[0, 4] == 0 and idx[3, 2] == 3
    assert idx.min() == 0 and idx.max() == 4


@pytest.mark.parametrize("d_osc", [2, 3, 4])
@pytest.mark.parametrize("causal", [False, True])
def test_relpos_matches_loop_reference_outputs_and_gradients(d_osc, causal):
    mod, _ = _pair(RelPosAnchorOscillatorAttention, d_osc=d_osc, p=2.0, max_rel_dist=3)
    with torch.no_grad():
        mod.rel_angle.normal_(0.0, 1.0, generator=torch.Generator().manual_seed(d_osc))
    x = _x(b=1, t=5)
    y, _ = mod(x, causal=causal)
    y_ref = _relpos_loop_reference(mod, x, causal)
    torch.testing.assert_close(y, y_ref, atol=1e-10, rtol=1e-10)
    g = torch.autograd.grad(y.square().sum(), mod.rel_angle)[0]
    g_ref = torch.autograd.grad(y_ref.square().sum(), mod.rel_angle)[0]
    torch.testing.assert_close(g, g_ref, atol=1e-10, rtol=1e-9)
    assert g.abs().sum() > 0
    if causal:  # negative offsets (j > i) are masked: no gradient reaches their angles
        assert torch.all(g[:, : mod.max_rel_dist] == 0)


def test_relpos_with_zero_angles_is_the_base_mechanism():
    mod, base = _pair(RelPosAnchorOscillatorAttention, d_osc=4)
    x = _x()
    for causal in (False, True):
        (y, aux), (y0, aux0) = mod(x, causal=causal, need_weights=True), base(x, causal=causal, need_weights=True)
        torch.testing.assert_close(y, y0, atol=1e-12, rtol=1e-12)
        torch.testing.assert_close(aux["h"], aux0["h"], atol=1e-12, rtol=1e-12)


def test_relpos_offset_independent_rotation_leaves_output_unchanged_but_offsets_matter():
    """A rotation shared by all offsets rotates h, z* and every anchor alike (cosines unchanged): same output.
    Offset-dependent angles change it."""
    mod, base = _pair(RelPosAnchorOscillatorAttention, d_osc=4, max_rel_dist=8)
    x = _x()
    with torch.no_grad():
        mod.rel_angle.copy_(torch.tensor([0.7, -1.9], dtype=torch.float64).expand_as(mod.rel_angle))
    y, aux = mod(x, causal=True, need_weights=True)
    y0, aux0 = base(x, causal=True, need_weights=True)
    torch.testing.assert_close(y, y0, atol=1e-12, rtol=1e-10)
    assert not torch.allclose(aux["h"], aux0["h"])  # h itself did rotate
    with torch.no_grad():
        mod.rel_angle.add_(torch.linspace(0, 3, mod.rel_angle.shape[1], dtype=torch.float64)[None, :, None])
    assert (mod(x, causal=True)[0] - y0).abs().max() > 1e-4


def test_gain_at_one_is_the_base_mechanism_for_both_placements():
    x = _x()
    for placement in ("score", "magnitude"):
        mod, base = _pair(CouplingGainOscillatorAttention, placement=placement, max_len=16)
        torch.testing.assert_close(mod(x, causal=True)[0], base(x, causal=True)[0], atol=1e-12, rtol=1e-12)


def test_gain_score_placement_changes_attention_and_learns():
    mod, base = _pair(CouplingGainOscillatorAttention, placement="score", max_len=16)
    x = _x()
    with torch.no_grad():
        mod.gain.uniform_(0.1, 2.7, generator=torch.Generator().manual_seed(0))
    y, aux = mod(x, causal=True, need_weights=True)
    assert (y - base(x, causal=True)[0]).abs().max() > 1e-4
    assert (aux["coupling"][..., ~torch.ones(T, T, dtype=torch.bool).tril()] == 0).all()
    assert (aux["coupling"][..., torch.ones(T, T, dtype=torch.bool).tril()] > 0).all()  # w > 0 (Theorem 2)
    (g,) = torch.autograd.grad(y.square().sum(), mod.gain)
    # one β per used (head, query position); causal position 0 sees one anchor, so z*_0 = r_0 whatever β is
    assert g[:, 1:T].abs().min() > 0 and torch.all(g[:, 0] == 0) and torch.all(g[:, T:] == 0)


def test_gain_magnitude_placement_leaves_the_analytic_fixed_point_invariant():
    """z* = h/||h|| ignores a positive per-row scale: under the literal reading β cannot change the output."""
    mod, base = _pair(CouplingGainOscillatorAttention, placement="magnitude", max_len=16)
    x = _x()
    with torch.no_grad():
        mod.gain.uniform_(0.1, 2.7, generator=torch.Generator().manual_seed(0))
    y, aux = mod(x, causal=True, need_weights=True)
    torch.testing.assert_close(y, base(x, causal=True)[0], atol=1e-10, rtol=1e-10)
    assert not torch.allclose(aux["h"], base(x, causal=True, need_weights=True)[1]["h"])
    (g,) = torch.autograd.grad(y.square().sum(), mod.gain)
    assert g.abs().max() < 1e-8


def test_gain_guards_and_summary():
    with pytest.raises(ValueError, match="placement"):
        CouplingGainOscillatorAttention(D, H, placement="both")
    mod = CouplingGainOscillatorAttention(D, H, max_len=4).double()
    with pytest.raises(ValueError, match="max_len"):
        mod(_x(t=5))
    with torch.no_grad():
        mod.gain.copy_(torch.tensor([[0.5, 1.5, 9.0, 9.0], [1.0, 2.0, 9.0, 9.0]]))
    s = gain_summary([mod], seq_len=2)
    assert s["n"] == 4 and s["beta_min"] == 0.5 and s["beta_max"] == 2.0 and s["beta_mean"] == pytest.approx(1.25)


def test_appc_spec_plans_variants_and_shares_runs_with_table4():
    spec = load_spec("fqo/appc")
    cells = plan(spec, "smoke")
    targets = [cells[(i, "oscillator")][0].cfg.model.attention._target_.rsplit(".", 1)[1] for i in range(5)]
    assert targets == ["FixedQueryOscillatorAttention", "RelPosAnchorOscillatorAttention",
                       "CouplingGainOscillatorAttention", "FixedQueryOscillatorAttention",
                       "FixedQueryOscillatorAttention"]
    softmax = [cells[(i, "softmax")][0].cfg.model for i in range(5)]
    shapes = [(m.n_heads, m.d_model) for m in softmax]
    assert shapes == [(4, 128), (4, 128), (4, 128), (8, 128), (8, 256)]
    assert all(cells[(i, "oscillator")][0].cfg.model.attention.d_osc == 2 for i in range(5))
    # the baseline row is Table 4's WikiText-2 d_osc=2 cell: same run records
    t4 = plan(load_spec("fqo/table4"), "smoke")
    assert cells[(0, "oscillator")][0].run_dir == t4[(0, "oscillator")][0].run_dir
    assert cells[(1, "baseline")][0].run_dir == t4[(0, "oscillator")][0].run_dir
