"""ContiFormer attention: the ODE solver, the spline, the bilinear estimate, the evaluation count, fast vs reference.

Float64 throughout. The tolerances are stated per test; each is about 10x the error measured when it was written.
"""

from __future__ import annotations

import pytest
import torch

from oscrepro.attention.contiformer import ContiFormerAttention
from oscrepro.attention.contiformer_ode import ODEVectorField, gauss_legendre, solve_pairs, spline_eval
from oscrepro.attention.contiformer_reference import contiformer_reference

D64 = torch.float64
ENDS = torch.tensor([-1.0, 1.0], dtype=D64)


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _times(b: int, t: int, seed: int = 0) -> torch.Tensor:
    """(B, T) strictly increasing irregular times, gaps in [0.05, 2.05)."""
    return (torch.rand(b, t, generator=_gen(seed), dtype=D64) * 2 + 0.05).cumsum(1)


def _mech(seed: int = 0, d_model: int = 8, n_heads: int = 2, **kw) -> ContiFormerAttention:
    torch.manual_seed(seed)
    mech = ContiFormerAttention(d_model, n_heads, **kw).double()
    with torch.no_grad():  # w t is zero-initialised; switch it on so the tests see the time term
        mech.field.time_weight.normal_(0, 0.3, generator=_gen(seed + 100))
    return mech


def _intervals(shape: tuple[int, ...], seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Random (t0, t1) pairs of shape (*shape, 1), forward, backward and one zero-length interval."""
    t0 = torch.rand(*shape, 1, generator=_gen(seed), dtype=D64) * 3
    t1 = torch.rand(*shape, 1, generator=_gen(seed + 1), dtype=D64) * 3
    t1.view(-1)[0] = t0.view(-1)[0]
    return t0, t1


def test_rk4_step_01_matches_tight_dopri5():
    """RK4 at step 0.1 on [-1, 1] vs dopri5 at rtol = atol = 1e-11, same field: max error < 1e-7 (measured 6e-9)."""
    torch.manual_seed(0)
    field = ODEVectorField(8).double()
    with torch.no_grad():
        field.time_weight.normal_(0, 0.3, generator=_gen(3))
    y0 = torch.randn(2, 3, 4, 8, generator=_gen(1), dtype=D64)  # (F, pairs..., D)
    t0, t1 = _intervals((3, 4), seed=2)
    rk4 = solve_pairs(field, y0, t0, t1, ENDS)
    exact = solve_pairs(field, y0, t0, t1, ENDS, method="dopri5", step_size=None, rtol=1e-11, atol=1e-11)
    assert (rk4[0] == y0).all()  # the s = -1 node is the initial state
    err = (rk4 - exact).abs().max()
    assert 0 < err < 1e-7, err


def test_linear_field_matches_matrix_exponential():
    """With f(t, y) = A y (test-only), k(t_j) = expm(A (t_j - t_i)) K_i. RK4 at step 0.1: max error < 3e-5 (measured
    4.5e-6), and halving the step divides it by ~2^4 (fourth order, so the rescaling feeds the solver correctly)."""
    a = torch.randn(6, 6, generator=_gen(4), dtype=D64) / 6**0.5  # spectral radius ~1
    y0 = torch.randn(5, 6, generator=_gen(5), dtype=D64)  # (pairs, D)
    t0, t1 = _intervals((5,), seed=6)
    rk4 = solve_pairs(lambda t, y: y @ a.T, y0, t0, t1, ENDS)[-1]  # (pairs, D) at t1
    exact = torch.stack([torch.linalg.matrix_exp(a * (t1[p] - t0[p])) @ y0[p] for p in range(5)])
    assert (rk4[0] == y0[0]).all()  # the zero-length interval stays put
    err = (rk4 - exact).abs().max()
    assert err < 3e-5, err
    half = solve_pairs(lambda t, y: y @ a.T, y0, t0, t1, ENDS, step_size=0.05)[-1]
    assert 12 < err / (half - exact).abs().max() < 20


def test_bilinear_endpoint_estimate_two_tokens():
    """2 tokens, 1 head, constant fields k_i(t) = K_i + a (t - t_i), v_i(t) = V_i + g (t - t_i) (W = b = w = 0,
    a = sigmoid(LN bias)): alpha_ji = (<Q_i, K_i> + <Q_j, k_i(t_j)>) / (4 sqrt(d)),
    y_j = W_O sum_i softmax_i(alpha_ji) (v_i(t_i) + v_i(t_j)) / 2."""
    d = 4
    mech = _mech(d_model=d, n_heads=1)
    with torch.no_grad():
        for p in (mech.field.weight, mech.field.bias, mech.field.time_weight):
            p.zero_()
        mech.field.ln_bias.normal_(generator=_gen(7))
    x = torch.randn(1, 2, d, generator=_gen(8), dtype=D64)
    tm = torch.tensor([[0.3, 1.7]], dtype=D64)
    a, g = torch.sigmoid(mech.field.ln_bias).detach()  # (D,) each: the constant key and value fields
    q, k, v = mech.qkv(x)[0].detach().chunk(3, dim=-1)  # (2, D)
    with torch.no_grad():
        for causal in (False, True):
            rows = []
            for j in range(2):
                keys = range(j + 1) if causal else range(2)
                dt = [tm[0, j] - tm[0, i] for i in keys]
                alpha = torch.stack([(q[i] @ k[i] + q[j] @ (k[i] + a * dt[n])) / (4 * d**0.5)
                                     for n, i in enumerate(keys)])
                vbar = torch.stack([v[i] + g * dt[n] / 2 for n, i in enumerate(keys)])
                rows.append(alpha.softmax(0) @ vbar)
            hand = mech.out(torch.stack(rows))
            y = mech(x, causal=causal, times=tm)[0][0]
            assert torch.allclose(y, hand, atol=1e-13, rtol=0), (y - hand).abs().max()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["fp32", "fp64"])
def test_eighty_field_evaluations_per_interval(dtype):
    """One forward = 80 calls of the (stacked K/V) field covering every interval at once; chunks multiply it."""
    x = torch.randn(2, 5, 8, generator=_gen(9), dtype=D64).to(dtype)
    for chunk, n_chunks in ((None, 1), (2, 3)):
        mech = _mech(chunk_size=chunk).to(dtype)
        with torch.no_grad():
            mech(x, times=_times(2, 5).to(dtype))
        assert mech.field.nfe == 80 * n_chunks
    single = ODEVectorField(3).to(dtype)  # one interval alone, long or short: still 80
    for length in (1e-3, 7.0):
        single.nfe = 0
        t0 = torch.zeros(1, 1, dtype=dtype)
        solve_pairs(single, torch.zeros(2, 1, 3, dtype=dtype), t0, t0 + length, ENDS)
        assert single.nfe == 80


@pytest.mark.parametrize("kw", [{}, {"approximation": "gauss", "n_nodes": 2}, {"actfn": "tanh", "layer_norm": False},
                                {"chunk_size": 2}], ids=["bilinear", "gauss", "tpp_field", "chunked"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_fast_matches_reference(kw, causal):
    """Fast path vs the per-pair loop on the same RK4 grid: outputs and gradients to 1e-10 (measured ~1e-15)."""
    mech = _mech(**kw)
    x = torch.randn(2, 3, 8, generator=_gen(10), dtype=D64, requires_grad=True)
    tm = _times(2, 3, seed=1)
    y = mech(x, causal=causal, times=tm)[0]
    y_ref = contiformer_reference(mech, x, tm, causal=causal, method="rk4")
    assert (y - y_ref).abs().max() < 1e-10
    params = [x, *mech.parameters()]
    cot = torch.randn_like(y)
    grads = torch.autograd.grad((y * cot).sum(), params, allow_unused=True)  # LN affine unused without LN
    grads_ref = torch.autograd.grad((y_ref * cot).sum(), params, allow_unused=True)
    for g, g_ref in zip(grads, grads_ref, strict=True):
        assert (g is None and g_ref is None) or (g - g_ref).abs().max() < 1e-10


def test_fast_matches_tight_dopri5_reference():
    """Against the per-pair dopri5 solution in real (unrescaled) time: only the RK4 error is left, outputs < 1e-7
    (measured 2e-9) and input gradients < 1e-6 (measured 5e-8)."""
    mech = _mech()
    x = torch.randn(1, 4, 8, generator=_gen(11), dtype=D64, requires_grad=True)
    tm = _times(1, 4, seed=2)
    y = mech(x, times=tm)[0]
    y_ref = contiformer_reference(mech, x, tm, method="dopri5", rtol=1e-10)
    assert (y - y_ref).abs().max() < 1e-7
    (g,) = torch.autograd.grad(y.square().sum(), x)
    (g_ref,) = torch.autograd.grad(y_ref.square().sum(), x)
    assert (g - g_ref).abs().max() < 1e-6


def test_causal_and_attend_future_flag():
    """causal=True: output j has zero gradient from tokens > j. attend_future=True (PhysioPro's TPP path, mask=None)
    ignores causal, so output 0 does read the later tokens."""
    x = torch.randn(1, 4, 8, generator=_gen(12), dtype=D64, requires_grad=True)
    tm = _times(1, 4, seed=3)
    for approximation in ("bilinear", "gauss"):
        for attend_future in (False, True):
            mech = _mech(approximation=approximation, attend_future=attend_future)
            y = mech(x, causal=True, times=tm)[0]
            for j in range(3):
                (g,) = torch.autograd.grad(y[:, j].sum(), x, retain_graph=True)
                future = g[:, j + 1:].abs().max()
                assert (future > 1e-6) if attend_future else (future == 0)


def test_spline_interpolates_is_exact_on_lines_and_causal():
    """The backward-difference Hermite cubic passes through its knots, reproduces a linear function exactly, and its
    value on [t_0, t_j] has zero gradient from knots after j."""
    tm = _times(2, 5, seed=4)
    x = torch.randn(2, 5, 3, generator=_gen(13), dtype=D64, requires_grad=True)
    for kind in ("cubic", "linear"):
        assert torch.allclose(spline_eval(x, tm, tm, kind), x, atol=1e-12)
        line = 0.7 - 1.3 * tm[..., None].expand(-1, -1, 3)  # (B, T, 3)
        tau = tm[:, :1] + torch.rand(2, 9, generator=_gen(14), dtype=D64) * (tm[:, -1:] - tm[:, :1])
        assert torch.allclose(spline_eval(line, tm, tau, kind), 0.7 - 1.3 * tau[..., None].expand(-1, -1, 3))
        for j in range(1, 4):
            tau_j = tm[:, :1] + torch.linspace(0, 1, 7, dtype=D64) * (tm[:, j:j + 1] - tm[:, :1])  # (B, 7), <= t_j
            (g,) = torch.autograd.grad(spline_eval(x, tm, tau_j, kind).sum(), x)
            assert (g[:, j + 1:] == 0).all() and g[:, j].abs().max() > 0


def test_gauss_legendre_rule():
    """n-point Gauss-Legendre integrates polynomials of degree 2n - 1 exactly on [-1, 1]."""
    for n in (1, 2, 3, 5):
        s, w = gauss_legendre(n)
        for p in range(2 * n):
            assert abs((w * s**p).sum() - (1 - (-1) ** (p + 1)) / (p + 1)) < 1e-12


def test_adjoint_gradients_close_to_direct():
    """adjoint=True (PhysioPro's odeint_adjoint): same output; parameter gradients within the RK4 error of the adjoint
    solve, < 1e-6 (measured 1e-7)."""
    x = torch.randn(1, 3, 8, generator=_gen(15), dtype=D64)
    tm = _times(1, 3, seed=5)
    direct, adjoint = _mech(), _mech(adjoint=True)
    y_d, y_a = direct(x, times=tm)[0], adjoint(x, times=tm)[0]
    assert (y_d - y_a).abs().max() < 1e-12
    g_d = torch.autograd.grad(y_d.square().sum(), list(direct.parameters()))
    g_a = torch.autograd.grad(y_a.square().sum(), list(adjoint.parameters()))
    assert max((a - b).abs().max() for a, b in zip(g_d, g_a, strict=True)) < 1e-6


@pytest.mark.parametrize("approximation", ["bilinear", "gauss"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_chunked_equals_unchunked(approximation, causal):
    """chunk_size=3 on T=7 (uneven last chunk; causal chunks solve only keys <= their last row) vs one block: outputs,
    attention weights and every gradient to 1e-12 (measured ~1e-16)."""
    x = torch.randn(2, 7, 8, generator=_gen(16), dtype=D64, requires_grad=True)
    tm = _times(2, 7, seed=6)
    runs = []
    for chunk in (None, 3):
        mech = _mech(approximation=approximation, n_nodes=2, chunk_size=chunk)
        y, aux = mech(x, causal=causal, times=tm, need_weights=True)
        loss = (y * torch.randn(y.shape, generator=_gen(17), dtype=D64)).sum() + aux["weights"][..., 0].sum()
        runs.append((y, aux["weights"], torch.autograd.grad(loss, [x, *mech.parameters()], allow_unused=True)))
    (y0, w0, g0), (y1, w1, g1) = runs
    assert (y0 - y1).abs().max() < 1e-12 and (w0 - w1).abs().max() < 1e-12
    for a, b in zip(g0, g1, strict=True):
        assert (a is None and b is None) or (a - b).abs().max() < 1e-12


def _graph_size(fn) -> int:
    """Number of autograd nodes reachable from ``fn``."""
    seen, stack = set(), [fn]
    while stack:
        node = stack.pop()
        if node is not None and node not in seen:
            seen.add(node)
            stack.extend(n for n, _ in node.next_functions)
    return len(seen)


def test_chunked_memory_scales_with_chunk():
    """Deterministic proxies for peak RSS at B=2, T=16, d=16, chunk 2 (RSS itself is glibc-fragmentation noise):
    the chunked forward records a handful of autograd nodes, not one per operation (those small long-lived nodes
    pinned the freed per-step temporaries under ``torch.utils.checkpoint``, so chunking saved no RSS); it saves only
    its inputs (< 1 % of the unchunked graph's bytes, saved_tensors_hooks); its backward holds one chunk's recomputed
    graph at a time (< 1.5 / n_chunks of the unchunked graph; bucketed by field call, 80 per solve)."""
    b, t, d, chunk = 2, 16, 16, 2
    x = torch.randn(b, t, d, generator=_gen(18), dtype=D64, requires_grad=True)

    def run(chunk_size: int | None) -> dict[str, float]:
        mech = _mech(d_model=d, n_heads=2, chunk_size=chunk_size)
        phase, buckets = ["fwd"], {}

        def pack(z: torch.Tensor) -> torch.Tensor:
            key = (phase[0], mech.field.nfe // 80)  # which solve (chunk) is running
            buckets[key] = buckets.get(key, 0) + z.numel() * z.element_size()
            return z

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda z: z):
            y = mech(x, times=_times(b, t, seed=7))[0]
            nodes = _graph_size(y.grad_fn)
            phase[0] = "bwd"
            y.square().sum().backward()
        fwd = sum(v for (p, _), v in buckets.items() if p == "fwd")
        return {"fwd": fwd, "bwd_peak": max((v for (p, _), v in buckets.items() if p == "bwd"), default=0),
                "nodes": nodes}

    saved = {c: run(c) for c in (None, chunk)}
    full = saved[None]["fwd"]
    assert full > 80 * 2 * b * t * t * d * 8  # at least one pair-shaped tensor per field call
    assert saved[None]["nodes"] > 80 * 10 and saved[chunk]["nodes"] < 20 * (t // chunk)
    assert saved[chunk]["fwd"] < 0.01 * full
    assert 0 < saved[chunk]["bwd_peak"] < 1.5 * full / (t // chunk)
