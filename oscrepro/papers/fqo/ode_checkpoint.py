"""ODE analyses of *trained* fqo checkpoints (fqo paper Sec. 4.4, Table 6, Figure 7, App. B "ODE inference").

Two questions, both about replacing the closed-form fixed point z* = h/||h|| (Eq. 4) by the Lohe flow (Eq. 3):

1. **Convergence (Table 6, Fig. 7).** :func:`collect_problem` runs a model on validation sequences with
   ``need_weights=True`` and pools every layer's oscillators; :func:`convergence_row` integrates all of them
   (the batched scipy-RK45 replica or the closed form, :mod:`oscrepro.papers.fqo.ode_convergence`) and
   :func:`scipy_agreement` re-solves a random subset with ``scipy.integrate.solve_ivp`` itself (App. B protocol),
   for the nfev column and to check that the fast path gives the same errors and verdicts.
2. **ODE inference (Sec. 4.4, last paragraph).** :func:`ode_inference` is a context manager that makes every fqo
   attention module of a model use z(T_max) from the integrator instead of Eq. (4) (random z(0) with a seed, or
   sequential: z(0) of token i = the analytic fixed point of token i−1); :func:`perplexity` evaluates a model.

Choices where the paper is silent (also in the closing report):
- All layers and heads are pooled into one Table 6 row (the paper says "the trained TinyStories models").
- The "100 validation sequences" are the first 100 windows of the validation split (loader order).
- ODE inference uses the raw integrated state z(T_max) in the readout (no re-normalisation), like the convergence
  error; sequential init uses the previous position's *analytic* fixed point (same reading as
  :mod:`oscrepro.papers.fqo.ode_convergence`); position 0 starts at random.
- The swap replaces the ``fixed_point(h)`` hook (Eq. 4) that :class:`FixedQueryOscillatorAttention` and its App. C
  variants share, so the module's own forward runs unchanged around it; :func:`fqo_forward` with the analytic
  fixed point is tested to reproduce the module's forward bit for bit.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from oscrepro.attention.base import Aux
from oscrepro.attention.fqo import NORM_EPS, FixedQueryOscillatorAttention
from oscrepro.papers.fqo.lohe_ode import integrate_fixed_points
from oscrepro.papers.fqo.ode_convergence import convergence_table, sample_sphere
from oscrepro.tables.run_helpers import attention_modules

FixedPointFn = Callable[[Tensor], Tensor]  # h (B, H, T, N) -> z (B, H, T, N)
# Keyword arguments of convergence_table that the Table 6 spec (conf/table/fqo/table6.yaml) sets.
ODE_KEYS = ("n_inits", "t_max", "seed", "method", "rtol", "atol", "conv_threshold", "antipodal_threshold",
            "degenerate_threshold")


def analytic_fixed_point(h: Tensor) -> Tensor:
    """Eq. (4) with the model's normalisation guard (App. B): z* = h / max(||h||, 1e-8)."""
    return F.normalize(h, dim=-1, eps=NORM_EPS)


# ----------------------------------------------------------------------------------------------- convergence


@dataclass
class OscillatorProblem:
    """Pooled oscillators of a model: ``h = coupling @ anchors`` gives every (sequence·layer, head, position)."""

    coupling: Tensor  # (L*B, H, T, T)
    anchors: Tensor  # (L*B, H, T, N)
    n_layers: int
    n_seqs: int

    @property
    def d_osc(self) -> int:
        return int(self.anchors.shape[-1])


@torch.no_grad()
def collect_problem(model: nn.Module, x: Tensor) -> OscillatorProblem:
    """Run ``model(x, need_weights=True)`` and stack the fqo oscillators of every layer along the batch axis.

    Base fqo layers contribute (coupling w, anchors r) from their aux; layers whose h is not ``w @ r`` (the App. C
    relative-position variant) contribute (identity, h), which gives the same h in :func:`convergence_table`.
    """
    modules = attention_modules(model)
    _, auxes = model(x, need_weights=True)
    couplings, anchors = [], []
    for mod, aux in zip(modules, auxes, strict=True):
        if not isinstance(mod, FixedQueryOscillatorAttention) or "coupling" not in aux:
            raise ValueError(f"layer {mod.layer_idx}: {type(mod).__name__} has no oscillator fixed point")
        if type(mod) is FixedQueryOscillatorAttention:
            couplings.append(aux["coupling"].float())
            anchors.append(aux["anchors"].float())
        else:
            h = aux["h"].float()  # (B, H, T, N)
            eye = torch.eye(h.shape[2], device=h.device).expand(*h.shape[:2], -1, -1)  # (B, H, T, T)
            couplings.append(eye)
            anchors.append(h)
    return OscillatorProblem(torch.cat(couplings).cpu(), torch.cat(anchors).cpu(), len(modules), int(x.shape[0]))


def convergence_row(problem: OscillatorProblem, *, sequential: bool = True, **ode: Any) -> dict[str, Any]:
    """One Table 6 row: :func:`convergence_table` with random z(0), plus the mean error under sequential init.

    ``ode``: n_inits, t_max, seed, method, rtol, atol and the three thresholds of :func:`convergence_table`.
    """
    row = convergence_table(problem.coupling, problem.anchors, init="random", **ode)
    row.update(n_layers=problem.n_layers, n_seqs=problem.n_seqs)
    if sequential:
        seq = convergence_table(problem.coupling, problem.anchors, init="sequential", **ode)
        row.update(mean_err_sequential=seq["mean_err"], frac_converged_sequential=seq["frac_converged"],
                   sequential_gain=row["mean_err"] / seq["mean_err"] if seq["mean_err"] > 0 else math.inf)
    return row


def scipy_agreement(problem: OscillatorProblem, n_solves: int, *, fast_method: str = "batched",
                    **ode: Any) -> dict[str, Any]:
    """Re-solve ~``n_solves`` random (token, init) pairs with scipy's solve_ivp and with ``fast_method``.

    Tokens are drawn at random (all heads and inits of a drawn token are kept); both solvers see identical h and
    z(0) (same seed, same mask). Returns scipy's nfev per solve and the agreement of errors, verdicts and nfev.
    """
    b, h, t = problem.anchors.shape[:3]
    n_inits = int(ode.get("n_inits", 5))
    n_tok = min(b * t, max(1, math.ceil(n_solves / (h * n_inits))))
    gen = torch.Generator().manual_seed(int(ode.get("seed", 0)) + 1)
    mask = torch.zeros(b * t, dtype=torch.bool)
    mask[torch.randperm(b * t, generator=gen)[:n_tok]] = True
    kw = {k: v for k, v in ode.items() if k != "method"}
    ref = convergence_table(problem.coupling, problem.anchors, method="scipy", token_mask=mask.view(b, t),
                            return_arrays=True, **kw)
    fast = convergence_table(problem.coupling, problem.anchors, method=fast_method, token_mask=mask.view(b, t),
                             return_arrays=True, **kw)
    verdicts = ("converged", "apparent_antipodal", "degenerate", "intermediate")
    same = torch.stack([ref[v] == fast[v] for v in verdicts]).all(0)
    out = {"scipy_n_solves": ref["n_solves"], "scipy_nfev_per_token": ref["nfev_per_token"],
           "scipy_frac_converged": ref["frac_converged"], "scipy_wall_s": ref["wall_s"],
           "agree_max_abs_err_diff": float((ref["err"] - fast["err"]).abs().max()),
           "agree_verdict_frac": float(same.double().mean())}
    if fast["nfev"] is not None:
        out["agree_nfev_frac"] = float((ref["nfev"] == fast["nfev"]).double().mean())
    return out


# --------------------------------------------------------------------------------------------- ODE inference


def fqo_forward(mod: FixedQueryOscillatorAttention, x: Tensor, fixed_point: FixedPointFn, *, causal: bool = False,
                need_weights: bool = False) -> tuple[Tensor, Aux]:
    """``mod.forward`` (mode fixed_point, Eqs. 2-6) with Eq. (4) replaced by ``fixed_point`` for this one call."""
    with _swap_fixed_point([mod], fixed_point):
        return mod(x, causal=causal, need_weights=need_weights)


@contextmanager
def _swap_fixed_point(modules: Iterable[nn.Module], fixed_point: FixedPointFn) -> Iterator[list[nn.Module]]:
    """Give every fqo module an instance-level ``fixed_point`` (the hook of Eq. 4); removed again on exit."""
    patched: list[nn.Module] = []
    try:
        for mod in modules:
            if isinstance(mod, FixedQueryOscillatorAttention):
                if mod.mode != "fixed_point":
                    raise ValueError(f"layer {mod.layer_idx}: mode={mod.mode!r} has no fixed point to integrate")
                mod.fixed_point = fixed_point
                patched.append(mod)
        yield patched
    finally:
        for mod in patched:
            mod.__dict__.pop("fixed_point", None)


class IntegratedFixedPoint:
    """h -> z(T_max) of Eq. (3); z(0) uniform on the sphere (``init="random"``, a seeded stream of draws) or the
    previous position's analytic fixed point (``init="sequential"``, position 0 random)."""

    def __init__(self, t_max: float = 30.0, method: str = "rk45", init: str = "random", seed: int = 0,
                 rtol: float = 1e-6, atol: float = 1e-6) -> None:
        if init not in ("random", "sequential"):
            raise ValueError(f"init={init!r}; valid: random, sequential")
        self.t_max, self.method, self.init, self.rtol, self.atol = t_max, method, init, rtol, atol
        self.generator = torch.Generator().manual_seed(seed)
        self.n_calls = 0

    def __call__(self, h: Tensor) -> Tensor:
        z0 = sample_sphere(tuple(h.shape[:-1]), h.shape[-1], self.generator).to(h.device)  # (B, H, T, N) float64
        if self.init == "sequential":
            z0[..., 1:, :] = analytic_fixed_point(h[..., :-1, :].double())
        self.n_calls += 1
        return integrate_fixed_points(h, z0, self.t_max, self.method, self.rtol, self.atol)


@contextmanager
def ode_inference(model: nn.Module, fixed_point: FixedPointFn) -> Iterator[list[nn.Module]]:
    """Inside the block, every fqo attention module of ``model`` computes z with ``fixed_point`` instead of Eq. (4).

    Each module's ``fixed_point`` method (the Eq. 4 hook of :class:`FixedQueryOscillatorAttention`, inherited by the
    App. C variants) is replaced on the instance. Everything is restored on exit. Yields the patched modules.
    """
    with _swap_fixed_point(attention_modules(model), fixed_point) as patched:
        if not patched:
            raise ValueError("the model has no fqo attention module to run with the ODE")
        yield patched


@torch.no_grad()
def perplexity(model: nn.Module, batches: Iterable[tuple[Tensor, ...]]) -> tuple[float, int]:
    """Token-mean next-token cross-entropy of a causal LM over ``batches`` -> (perplexity, number of tokens)."""
    total, n = 0.0, 0
    for batch in batches:
        x, y = batch[0], batch[1]
        logits, _ = model(x)  # (B, T, V)
        total += float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), reduction="sum"))
        n += y.numel()
    if n == 0:
        raise ValueError("no batches to evaluate")
    return math.exp(total / n), n


def ode_inference_ppl(model: nn.Module, batches: list[tuple[Tensor, ...]], *, t_max: float, method: str = "rk45",
                      seeds: Iterable[int] = (0, 1, 2, 3, 4), sequential: bool = True, rtol: float = 1e-6,
                      atol: float = 1e-6) -> list[dict[str, Any]]:
    """Perplexity with the analytic fixed point, then with z(T_max) per random-init seed and with sequential init.

    Returns one dict per condition: ``condition``, ``init``, ``seed``, ``ppl``, ``delta`` (vs analytic), ``wall_s``.
    """
    def run(fp: FixedPointFn | None) -> tuple[float, float]:
        t0 = time.perf_counter()
        if fp is None:
            ppl, _ = perplexity(model, batches)
        else:
            with ode_inference(model, fp):
                ppl, _ = perplexity(model, batches)
        return ppl, time.perf_counter() - t0

    base, wall = run(None)
    rows = [{"condition": "analytic", "init": "-", "seed": None, "ppl": base, "delta": 0.0, "wall_s": wall}]
    conditions = [("random", s) for s in seeds] + ([("sequential", 0)] if sequential else [])
    for init, seed in conditions:
        ppl, wall = run(IntegratedFixedPoint(t_max, method, init, seed, rtol, atol))
        rows.append({"condition": f"ode_{init}", "init": init, "seed": seed, "ppl": ppl, "delta": ppl - base,
                     "wall_s": wall})
    return rows
