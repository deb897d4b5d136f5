"""ContiFormer kernels: the key/value neural-ODE vector field, the all-pairs solver and the causal query spline.

These are the pieces of ``oscrepro.attention.contiformer`` that do numerics; that module holds the projections,
scoring and the (y, aux) contract. Everything here is pure torch + torchdiffeq.

Vector field (PhysioPro ``ConcatLinearNorm`` with ``actfn: sigmoid``, the ``contiformer_mask_classification``
setting; ``layer_norm=False`` is ``ConcatLinear_v2``, the TPP setting with ``actfn: tanh``):

    f(t, k) = act(LayerNorm(W k + b + w t))         W (D, D), b (D), w (D), LayerNorm eps 1e-6 over D = d_model

The keys and values each get their own field; both are stacked on a leading axis F = 2 and evaluated by one
batched call, so one "evaluation" below means one of each field.

Rescaled time (PhysioPro ``TimeVariableODE``): the trajectory of event i towards time t_j is integrated in a dummy
variable s in [-1, 1], t(s) = t_i + (s + 1) r with r = (t_j - t_i) / 2, so dk/ds = r f(t(s), k). Every pair
(i, j) then shares the same s-grid and one fixed-step solver call advances all T^2 intervals at once; with RK4
at step 0.1 that is 20 steps x 4 stages = 80 evaluations, whatever the interval length (S = 80, osciformer
Sec. 5.4). An interval with t_j = t_i has r = 0 and a constant trajectory; t_j < t_i integrates backwards.

Memory (``recompute``): backpropagating through the 80 evaluations saves ~8 activations of the pair shape per
evaluation, and building that graph also leaves one small, long-lived autograd node per operation in the heap
between the freed per-step temporaries, so glibc cannot reuse them and the resident size tracks every byte
allocated. ``recompute`` runs a block (one chunk of query rows) with no graph at all and re-runs it in backward.

Query spline (PhysioPro ``hermite_cubic_coefficients_with_backward_differences``): on [t_m, t_{m+1}] the cubic
Hermite interpolant with knot slopes d_m = (x_m - x_{m-1}) / (t_m - t_{m-1}) (backward differences; d_0 = d_1).
The piece on [t_m, t_{m+1}] reads x_{m-1}, x_m, x_{m+1} only, so q(tau) for tau <= t_j never reads a token
after j: the spline is causal by construction. ``kind="linear"`` is the piecewise-linear interpolant.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.autograd.function import once_differentiable
from torchdiffeq import odeint, odeint_adjoint

ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "sigmoid": torch.sigmoid, "tanh": torch.tanh, "softplus": F.softplus, "relu": F.relu,
}


class ODEVectorField(nn.Module):
    """F stacked fields f_f(t, y) = act(LN(W_f y + b_f + w_f t)) on (F, ..., D) states; counts its calls (``nfe``)."""

    def __init__(self, d: int, n_fields: int = 2, actfn: str = "sigmoid", layer_norm: bool = True,
                 time_dependent: bool = True) -> None:
        super().__init__()
        if actfn not in ACTIVATIONS:
            raise ValueError(f"actfn={actfn!r}; valid: {', '.join(ACTIVATIONS)}")
        self.act, self.actfn = ACTIVATIONS[actfn], actfn
        self.layer_norm, self.time_dependent = layer_norm, time_dependent
        bound = d ** -0.5  # nn.Linear's default init, U(+-1/sqrt(d)), for W and b (PhysioPro zero_init_ode: False)
        self.weight = nn.Parameter(torch.empty(n_fields, d, d).uniform_(-bound, bound))  # (F, D_out, D_in)
        self.bias = nn.Parameter(torch.empty(n_fields, d).uniform_(-bound, bound))  # (F, D)
        self.time_weight = nn.Parameter(torch.zeros(n_fields, d))  # w, zero-initialised as PhysioPro's hyper-bias
        self.ln_weight = nn.Parameter(torch.ones(n_fields, d))  # LayerNorm affine, per field
        self.ln_bias = nn.Parameter(torch.zeros(n_fields, d))
        self.nfe = 0

    def forward(self, t: Tensor, y: Tensor) -> Tensor:
        """t broadcastable to (F, ..., 1) absolute times; y (F, ..., D) -> dy/dt (F, ..., D)."""
        self.nfe += 1
        shape = (y.shape[0],) + (1,) * (y.dim() - 2) + (y.shape[-1],)  # (F, 1, ..., 1, D)
        h = torch.einsum("f...i,foi->f...o", y, self.weight) + self.bias.view(shape)  # (F, ..., D)
        if self.time_dependent:
            h = h + self.time_weight.view(shape) * t
        if self.layer_norm:
            h = F.layer_norm(h, h.shape[-1:], eps=1e-6) * self.ln_weight.view(shape) + self.ln_bias.view(shape)
        return self.act(h)


class _Rescaled(nn.Module):
    """dy/ds = r f(t_0 + (s + 1) r, y): the pairwise problem on the shared dummy interval s in [-1, 1]."""

    def __init__(self, field: Callable[[Tensor, Tensor], Tensor], t0: Tensor, ratio: Tensor) -> None:
        super().__init__()
        self.field, self.t0, self.ratio = field, t0, ratio

    def forward(self, s: Tensor, y: Tensor) -> Tensor:
        return self.field(self.t0 + (s + 1.0) * self.ratio, y) * self.ratio


def solve_pairs(field: Callable[[Tensor, Tensor], Tensor], y0: Tensor, t0: Tensor, t1: Tensor, nodes: Tensor,
                method: str = "rk4", step_size: float | None = 0.1, rtol: float = 1e-7, atol: float = 1e-9,
                adjoint: bool = False) -> Tensor:
    """Solve dy/dt = field(t, y) from t0 to t1 for every interval at once, reading y at rescaled nodes.

    y0 (..., D) initial states, t0 / t1 (..., 1) interval ends (absolute time), nodes (M,) increasing points of
    [-1, 1] starting at -1. Returns (M, ..., D): y at t0 + (nodes + 1)(t1 - t0)/2. ``step_size`` is the fixed step
    in s (RK4 at 0.1: 80 evaluations); adaptive methods (``dopri5``) use ``rtol``/``atol`` instead. Nodes off the
    fixed grid are read by torchdiffeq's default linear interpolation, as in PhysioPro. ``adjoint`` backpropagates
    with the adjoint ODE (PhysioPro's ``odeint_adjoint``) instead of through the solver's steps.
    """
    func = _Rescaled(field, t0, (t1 - t0) / 2)  # ratio r (..., 1)
    options = {"step_size": step_size} if step_size is not None and method in ("rk4", "euler", "midpoint") else {}
    s = nodes.to(y0)
    if adjoint:
        params = tuple(field.parameters()) if isinstance(field, nn.Module) else ()
        return odeint_adjoint(func, y0, s, method=method, options=options, rtol=rtol, atol=atol,
                              adjoint_params=params)
    return odeint(func, y0, s, method=method, options=options, rtol=rtol, atol=atol)


class _Recompute(torch.autograd.Function):
    """fn(*inputs) run without a graph; backward re-runs fn with grad on and differentiates it (``recompute``)."""

    @staticmethod
    def forward(ctx, fn: Callable[..., tuple[Tensor, ...]], n_inputs: int, *args: Tensor) -> tuple[Tensor, ...]:
        ctx.fn, ctx.params = fn, args[n_inputs:]  # the parameters fn reads by closure (already held by the module)
        ctx.save_for_backward(*args[:n_inputs])  # the block's inputs: O(B T D), not O(B Q T D S)
        return fn(*args[:n_inputs])  # autograd.Function.forward runs with grad off: no graph, no saved stages

    @staticmethod
    @once_differentiable
    def backward(ctx, *grad_out: Tensor) -> tuple[Tensor | None, ...]:
        inputs = [a.detach().requires_grad_(a.requires_grad) for a in ctx.saved_tensors]
        with torch.enable_grad():
            out = ctx.fn(*inputs)  # the block's full graph, alive only until this backward returns
        every = (*inputs, *ctx.params)
        pairs = [(o, g) for o, g in zip(out, grad_out, strict=True) if o.requires_grad]
        wrt = [a for a in every if a.requires_grad]
        grads = iter(torch.autograd.grad([o for o, _ in pairs], wrt, [g for _, g in pairs], allow_unused=True)
                     if pairs and wrt else ())
        return (None, None, *(next(grads) if a.requires_grad else None for a in every))


def recompute(fn: Callable[..., tuple[Tensor, ...]], inputs: Sequence[Tensor], params: Sequence[Tensor]
              ) -> tuple[Tensor, ...]:
    """fn(*inputs) -> tuple of tensors, differentiable in ``inputs`` and in ``params`` (the parameters fn reads by
    closure), storing only those for backward and recomputing fn there.

    Unlike ``torch.utils.checkpoint(use_reentrant=False)``, which still records one autograd node per operation and
    so fragments the CPU heap (module docstring), the forward records one node. Unlike the reentrant checkpoint it
    works with ``torch.autograd.grad``. Peak memory is one block's graph, during that block's backward.
    """
    return _Recompute.apply(fn, len(inputs), *inputs, *params)


def gauss_legendre(n: int, dtype: torch.dtype = torch.float64) -> tuple[Tensor, Tensor]:
    """n-point Gauss-Legendre nodes and weights on [-1, 1] (Golub-Welsch), each (n,); weights sum to 2."""
    k = torch.arange(1, n, dtype=torch.float64)
    off = k / torch.sqrt(4 * k * k - 1)  # Jacobi matrix of the Legendre recurrence
    nodes, vecs = torch.linalg.eigh(torch.diag(off, 1) + torch.diag(off, -1))
    return nodes.to(dtype), (2 * vecs[0] ** 2).to(dtype)


def spline_eval(x: Tensor, t: Tensor, tau: Tensor, kind: str = "cubic") -> Tensor:
    """Interpolant of knots (t, x) evaluated at tau, row by row.

    x (B, T, D) knot values, t (B, T) non-decreasing knot times, tau (B, N) query times -> (B, N, D). Outside
    [t_0, t_{T-1}] the end pieces extrapolate. Tied knots (zero-length pieces, e.g. right padding that repeats the
    last time) get slope 0 and are never selected for tau strictly inside a piece; at a tied time the value is
    that of the first of the tied knots.
    """
    b, n_knots, d = x.shape
    if n_knots == 1:
        return x.expand(b, tau.shape[1], d)
    h = t[:, 1:] - t[:, :-1]  # (B, T-1) piece lengths
    h_safe = torch.where(h > 0, h, torch.ones_like(h))
    slope = torch.where((h > 0)[..., None], (x[:, 1:] - x[:, :-1]) / h_safe[..., None], torch.zeros_like(x[:, 1:]))
    idx = (torch.searchsorted(t.contiguous(), tau.contiguous()) - 1).clamp(0, n_knots - 2)  # (B, N) piece index
    gather = lambda z: z.gather(1, idx[..., None].expand(-1, -1, z.shape[-1]))  # noqa: E731  (B, N, .)
    x0, m, hh = gather(x[:, :-1]), gather(slope), gather(h_safe[..., None])  # (B, N, D), (B, N, D), (B, N, 1)
    u = (tau - t.gather(1, idx))[..., None]  # (B, N, 1) offset into the piece
    if kind == "linear":
        return x0 + m * u
    if kind != "cubic":
        raise ValueError(f"kind={kind!r}; valid: cubic, linear")
    d_prev = torch.cat([slope[:, :1], slope[:, :-1]], dim=1)  # slope at the piece's left knot, d_0 = d_1
    d0, d1 = gather(d_prev), m  # (B, N, D): backward-difference slopes at the left and right knots
    c2 = (3 * m - 2 * d0 - d1) / hh  # Hermite cubic x0 + d0 u + c2 u^2 + c3 u^3
    c3 = (d0 + d1 - 2 * m) / hh ** 2
    return x0 + u * (d0 + u * (c2 + u * c3))


def pair_times(times: Tensor, rows: slice, keys: slice = slice(None)) -> tuple[Tensor, Tensor]:
    """(B, T) times -> (t0, t1), each (B, Q, K, 1): start t_i (key i in keys, last axis), end t_j (query j in rows)."""
    t0 = times[:, None, keys, None].expand(-1, times[:, rows].shape[1], -1, -1)  # (B, Q, K, 1) key event times
    t1 = times[:, rows, None, None].expand_as(t0)  # (B, Q, K, 1) query times
    return t0, t1
