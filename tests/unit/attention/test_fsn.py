"""FSN paper mechanisms: fast paths vs plain references (outputs and gradients), special cases, Proposition 1,
causality by gradient, initialisation per App. A, finiteness, determinism, configs."""

from __future__ import annotations

import functools
import math
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from oscrepro.attention.fsn import FSNAttention, fsn_reference
from oscrepro.attention.kuramoto import (
    KuramotoAttention,
    PhaseGates,
    attend,
    kuramoto_reference,
    phasors,
    strict_backward,
    strict_forward,
)
from oscrepro.models.rope_transformer import RopeTransformerLM
from oscrepro.papers.fsn.fsn_mf import CollectiveModeFFN, WindingRegisterFFN, collective_reference
from oscrepro.papers.fsn.torus_lm import SwiGLUPhaseFFN, TorusLM, bounded_update

CONF = Path(__file__).resolve().parents[3] / "conf"
K, T, B = 12, 9, 2


def random_gates(k: int = K, seed: int = 0) -> PhaseGates:
    """Gates away from their uniform init, so that the tests exercise non-trivial g^q, g^k, g^v and tau."""
    torch.manual_seed(seed)
    g = PhaseGates(k).double()
    with torch.no_grad():
        g.proj.weight.normal_(0.0, 0.5)
        g.proj.bias.normal_(0.0, 0.5)
        g.log_tau.fill_(math.log(0.7 * math.sqrt(k)))
    return g


def grads(out: torch.Tensor, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    torch.manual_seed(123)
    return list(torch.autograd.grad((out * torch.randn_like(out)).sum(), inputs, retain_graph=True))


def assert_same(fast: torch.Tensor, ref: torch.Tensor, inputs: list[torch.Tensor]) -> None:
    torch.testing.assert_close(fast, ref, rtol=1e-9, atol=1e-10)
    for gf, gr in zip(grads(fast, inputs), grads(ref, inputs), strict=True):
        torch.testing.assert_close(gf, gr, rtol=1e-8, atol=1e-10)


def phases(b: int = B, t: int = T, k: int = K, seed: int = 1) -> torch.Tensor:
    torch.manual_seed(seed)
    return (torch.randn(b, t, k, dtype=torch.float64) * 3.0).requires_grad_()


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("n_heads", [1, 3])
def test_kuramoto_fast_matches_reference(causal: bool, n_heads: int) -> None:
    gates = random_gates()
    attn = KuramotoAttention(K, n_heads, gates=gates).double()
    theta = phases()
    inputs = [theta, gates.proj.weight, gates.log_tau]
    fast, _ = attn(theta, causal=causal)
    assert_same(fast, kuramoto_reference(attn, theta, causal), inputs)
    weighted, aux = attn(theta, causal=causal, need_weights=True)  # explicit-softmax path
    assert_same(weighted, fast, inputs)
    assert aux["weights"].shape == (B, n_heads, T, T)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("n_heads,chunk", [(1, None), (1, 4), (2, 5)])
@pytest.mark.parametrize("static_phases,delay", [(True, True), (False, True), (True, False)])
def test_fsn_fast_matches_reference(causal: bool, n_heads: int, chunk: int | None, static_phases: bool,
                                    delay: bool) -> None:
    gates = random_gates()
    torch.manual_seed(2)
    attn = FSNAttention(K, n_heads, gates=gates, chunk_size=chunk, static_phases=static_phases, delay=delay).double()
    with torch.no_grad():  # move the kernel away from its init so every coefficient matters
        attn.w_re.normal_()
        if attn.w_im is not None:
            attn.w_im.normal_()
    theta = phases()
    inputs = [theta, attn.w_re, gates.proj.weight, gates.log_tau] + ([attn.w_im] if static_phases else [])
    ref = fsn_reference(attn, theta, causal)
    fast, _ = attn(theta, causal=causal)  # fused kernel, hand-written backward
    assert_same(fast, ref, inputs)
    weighted, aux = attn(theta, causal=causal, need_weights=True)  # plain autograd path
    assert_same(weighted, ref, inputs)
    a = aux["weights"]  # the full score map A (B, H, T, T), diagonal included
    torch.testing.assert_close(a.sum(-1), torch.ones_like(a.sum(-1)))
    if causal:
        assert torch.all(a.triu(1) == 0)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("chunk", [3, 4, 9, 64])
def test_strict_aggregation_matches_autograd_reference(causal: bool, chunk: int) -> None:
    """Hand-written strict softmax aggregation (outputs, A_tt and its backward) vs autograd through attend()."""
    torch.manual_seed(0)
    b, h, t, e, f = 2, 3, 9, 5, 7
    q, k, v = (torch.randn(b, h, t, d, dtype=torch.float64, requires_grad=True) for d in (e, e, f))
    out_ref, diag_ref, w = attend(q, k, v, causal=causal, strict=True, chunk_size=chunk, need_weights=True)
    flat = [x.detach().reshape(b * h, t, -1) for x in (q, k, v)]
    out, diag, probs = strict_forward(*flat, causal, chunk)
    torch.testing.assert_close(out.view(b, h, t, f), out_ref)
    torch.testing.assert_close(diag.view(b, h, t), diag_ref)
    assert torch.all(torch.diagonal(w, dim1=-2, dim2=-1) == 0)  # the value sum excludes u = t
    dout, ddiag = torch.randn_like(out_ref), torch.randn_like(diag_ref)
    ref_grads = torch.autograd.grad((out_ref, diag_ref), (q, k, v), (dout, ddiag))
    grads_ = strict_backward(*flat, probs, diag, dout.reshape(b * h, t, f), ddiag.reshape(b * h, t), causal, chunk)
    for g_fast, g_ref in zip(grads_, ref_grads, strict=True):
        torch.testing.assert_close(g_fast.view(g_ref.shape), g_ref)


@pytest.mark.parametrize("causal", [True, False])
def test_kuramoto_is_fsn_with_n1_w0_1_w1_0(causal: bool) -> None:
    gates = random_gates()
    kur = KuramotoAttention(K, 1, gates=gates).double()
    fsn = FSNAttention(K, 1, gates=gates, n_harmonics=1, chunk_size=4).double()
    theta = phases()
    default_fsn, _ = fsn(theta, causal=causal)
    with torch.no_grad():
        fsn.w_re.zero_()
        fsn.w_re[0, 0] = 1.0  # w0 = 1
        fsn.w_im.zero_()  # w1 = 0 (and real w0)
    y_kur, _ = kur(theta, causal=causal)
    y_fsn, _ = fsn(theta, causal=causal)
    torch.testing.assert_close(y_fsn, y_kur, rtol=1e-9, atol=1e-12)
    assert (default_fsn - y_kur).abs().max() > 1e-2  # the App. A init is a different coupling law


def test_proposition1_delay_is_data_frustrated_sakaguchi() -> None:
    """w0 = 0, w1^(n) = rho_n e^{i phi_n}: the update equals sum_{u<t} A_tu sum_n rho_n sin(n(theta_u - theta_t +
    delta_u) + phi_n), delta_u = theta_{u+1} - theta_u (Prop. 1 with the static angles of Eq. 3)."""
    gates = random_gates()
    fsn = FSNAttention(K, 1, gates=gates, chunk_size=4).double()
    torch.manual_seed(5)
    rho, phi = torch.rand(3, K, dtype=torch.float64) + 0.5, torch.randn(3, K, dtype=torch.float64)
    with torch.no_grad():
        fsn.w_re.zero_()
        fsn.w_im.zero_()
        fsn.w_re[1], fsn.w_im[1] = rho * torch.cos(phi), rho * torch.sin(phi)
    theta = phases().detach()
    y, aux = fsn(theta, causal=True, need_weights=True)
    a, gv = aux["weights"][:, 0].tril(-1), aux["gate_v"]  # (B, T, T), strictly earlier u < t only
    delta = theta[:, 1:] - theta[:, :-1]  # (B, T-1, k): transition at u
    gap = theta[:, None, :-1, :] - theta[:, :, None, :]  # (B, T_t, T_u-1, k): theta_u - theta_t
    n = torch.arange(1, 4, dtype=torch.float64)[:, None, None, None, None]
    sak = (rho[:, None, None, None, :] * torch.sin(n * (gap + delta[:, None]) + phi[:, None, None, None, :])).sum(0)
    expected = gv * (a[:, :, :-1, None] * sak).sum(dim=2)
    torch.testing.assert_close(y, expected, rtol=1e-9, atol=1e-12)


def test_fsn_init_follows_appendix_a() -> None:
    torch.manual_seed(0)
    fsn = FSNAttention(176, 1)
    share = 1.0 / (1.0 + math.exp(-1.5))
    assert torch.allclose(fsn.w_re[1, 0], torch.full((176,), share))  # successor field, harmonic 1
    assert torch.allclose(fsn.w_re[0, 0], torch.full((176,), 1.0 - share))  # present field, harmonic 1
    assert torch.all(fsn.w_re[:, 1:] == 0)
    w_im = fsn.w_im.detach()  # 2 * 3 * 176 = 1056 draws of N(0, 0.05^2)
    assert 0.045 < float(w_im.std()) < 0.055 and abs(float(w_im.mean())) < 0.01
    assert FSNAttention(176, 1, static_phases=False).w_im is None
    g = fsn.phase_gates  # zero weights, unit bias: uniform gates for any state
    gq, gk, gv = g.gates(phasors(torch.randn(2, 5, 176)))
    for gate in (gq, gk, gv):
        assert torch.allclose(gate, torch.ones_like(gate))


def test_gates_are_nonnegative_mean_one() -> None:
    g = random_gates()
    theta = phases().detach()
    gq, gk, gv = g.gates(phasors(theta))
    for gate in (gq, gk):
        assert torch.all(gate >= 0)
        torch.testing.assert_close(gate.mean(-1), torch.ones_like(gate.mean(-1)))
    assert torch.any(gv < 0)  # value gate is signed


def test_bounded_update_matches_tanh_reference_norm() -> None:
    torch.manual_seed(0)
    x = torch.randn(3, 4, 16, dtype=torch.float64) * torch.tensor([0.01, 1.0, 30.0])[:, None, None]
    alpha = torch.tensor(2 * math.pi, dtype=torch.float64)
    y = bounded_update(x, alpha)
    torch.testing.assert_close(y.norm(dim=-1), (alpha * torch.tanh(x)).norm(dim=-1))
    cos = torch.nn.functional.cosine_similarity(x, y, dim=-1)
    torch.testing.assert_close(cos, torch.ones_like(cos))  # direction kept
    assert float(y.norm(dim=-1).max()) <= 2 * math.pi * 4.0 + 1e-9  # alpha * sqrt(k)
    zero = torch.zeros(1, 1, 16, requires_grad=True)
    out = bounded_update(zero, alpha.float())
    out.sum().backward()
    assert torch.all(out == 0) and torch.isfinite(zero.grad).all()


def tiny_lm(attention, ffn=SwiGLUPhaseFFN, vocab: int = 11, k: int = 16, seed: int = 0) -> TorusLM:
    torch.manual_seed(seed)
    return TorusLM(vocab, attention, functools.partial(ffn), k=k, n_layers=2, n_heads=2, dropout=0.1).eval()


COUPLINGS = {
    "fsn": functools.partial(FSNAttention, chunk_size=4),
    "fsn_nophase": functools.partial(FSNAttention, chunk_size=3, static_phases=False),
    "kuramoto": functools.partial(KuramotoAttention),
}


@pytest.mark.parametrize("name", sorted(COUPLINGS))
@pytest.mark.parametrize("ffn", [SwiGLUPhaseFFN, CollectiveModeFFN, WindingRegisterFFN])
def test_causality_by_gradient(name: str, ffn: type) -> None:
    """d logits_t / d theta0_u = 0 exactly for u > t (theta0 = embedding output), nonzero for u <= t."""
    model = tiny_lm(COUPLINGS[name], ffn)
    tokens = torch.randint(0, 11, (2, 10), generator=torch.Generator().manual_seed(3))
    theta0 = model.embed(tokens).detach().requires_grad_()
    logits, _ = model.forward_phases(theta0)
    for t in (0, 3, 4, 9):
        (g,) = torch.autograd.grad(logits[:, t].sum(), theta0, retain_graph=True)
        per_pos = g.abs().sum(dim=(0, 2))  # (T,)
        assert torch.all(per_pos[t + 1:] == 0), f"future leak at t={t}: {per_pos}"
        assert torch.all(per_pos[: t + 1] > 0), f"dead past at t={t}: {per_pos}"


@pytest.mark.parametrize("name", sorted(COUPLINGS))
def test_finite_gradients_reach_every_parameter(name: str) -> None:
    model = tiny_lm(COUPLINGS[name]).train()
    tokens = torch.randint(0, 11, (2, 12), generator=torch.Generator().manual_seed(4))
    logits, _ = model(tokens)
    torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, 11), tokens[:, 1:].reshape(-1)).backward()
    for pname, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), pname
        assert p.grad.abs().sum() > 0, f"no gradient reaches {pname}"


def test_full_size_fsn_step_is_finite() -> None:
    torch.manual_seed(0)
    model = TorusLM(205, functools.partial(FSNAttention), functools.partial(SwiGLUPhaseFFN))
    tokens = torch.randint(0, 205, (2, 32))
    logits, _ = model(tokens)
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 205), tokens.roll(-1, 1).reshape(-1))
    loss.backward()
    assert torch.isfinite(loss) and 4.0 < loss.item() < 7.0  # near log(205) = 5.32 at init
    assert all(torch.isfinite(p.grad).all() for p in model.parameters())


def test_determinism_for_a_seed() -> None:
    tokens = torch.randint(0, 11, (2, 8), generator=torch.Generator().manual_seed(0))
    out = [tiny_lm(COUPLINGS["fsn"], seed=s)(tokens)[0] for s in (7, 7, 8)]
    assert torch.equal(out[0], out[1])
    assert not torch.allclose(out[0], out[2])


@pytest.mark.parametrize("cls", [CollectiveModeFFN, WindingRegisterFFN])
def test_collective_modes_match_complex_reference(cls: type) -> None:
    torch.manual_seed(0)
    ffn = cls(K, n_modes=5).double()
    theta = phases()
    fast = ffn(theta)
    ref = collective_reference(ffn, theta)
    if cls is WindingRegisterFFN:
        gate, val = ffn.reg_in(theta).chunk(2, dim=-1)
        ref = ref + ffn.reg_out(torch.nn.functional.silu(gate + ffn.reg_bias) * val)
    assert_same(fast, ref, [theta, ffn.c_g, ffn.c_v, ffn.d])


def test_only_the_winding_register_sees_the_lift() -> None:
    """Eq. 4 is periodic in theta; the winding register and the SwiGLU read the unwrapped lift (fsn §2.4)."""
    torch.manual_seed(0)
    theta = torch.randn(2, 5, K, dtype=torch.float64)
    wound = theta + 2 * math.pi * (torch.arange(K, dtype=torch.float64) % 3)  # whole turns
    mf, wr, sw = CollectiveModeFFN(K).double(), WindingRegisterFFN(K, n_register=4).double(), SwiGLUPhaseFFN(K).double()
    torch.testing.assert_close(mf(wound), mf(theta))
    assert (wr(wound) - wr(theta)).abs().max() > 1e-3
    assert (sw(wound) - sw(theta)).abs().max() > 1e-3


def test_rope_transformer_fast_path_matches_weights_path_and_is_causal() -> None:
    torch.manual_seed(0)
    model = RopeTransformerLM(13, d_model=16, n_layers=2, n_heads=2).double().eval()
    emb = model.embed.weight
    tokens = torch.randint(0, 13, (2, 9))
    fast, _ = model(tokens)
    slow, aux = model(tokens, need_weights=True)
    assert_same(fast, slow, [emb] + [b.attn.qkv.weight for b in model.blocks])
    assert aux[0]["weights"].shape == (2, 2, 9, 9)
    g = torch.autograd.grad(fast[:, 4].sum(), emb)[0]
    later = torch.unique(tokens[:, 5:])
    earlier = torch.unique(tokens[:, :5])
    only_later = [v for v in later.tolist() if v not in earlier.tolist()]
    assert all(float(g[v].abs().sum()) == 0 for v in only_later)
    assert all(float(g[v].abs().sum()) > 0 for v in earlier.tolist())


def compose_model(*overrides: str) -> DictConfig:
    """``cfg.model`` as ``python -m oscrepro.train`` composes it (model group defaults included), paper budget."""
    with initialize_config_dir(str(CONF), version_base="1.3"):
        return compose("train", overrides=["budget=paper", *overrides]).model


@pytest.mark.parametrize("attn", ["fsn", "fsn_nophase", "kuramoto"])
def test_configs_build_the_paper_models(attn: str) -> None:
    model = instantiate(compose_model("model=torus_lm", f"attention={attn}"), vocab_size=205)
    assert isinstance(model, TorusLM) and model.k == 176 and len(model.layers) == 4
    assert isinstance(model.layers[0].ffn, SwiGLUPhaseFFN)  # the model/ffn group default (Table 3)
    logits, _ = model(torch.randint(0, 205, (1, 6)))
    assert logits.shape == (1, 6, 205)
    xf = instantiate(OmegaConf.load(CONF / "model" / "rope_transformer.yaml"), vocab_size=97)
    assert xf.d_model == 124
    with pytest.raises(Exception, match="own RoPE"):  # hydra wraps the ValueError
        instantiate(OmegaConf.load(CONF / "model" / "rope_transformer.yaml"), vocab_size=97, attention=object())
