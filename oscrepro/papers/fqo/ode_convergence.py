"""ODE-convergence verification of fixed-query oscillator attention (fqo paper, Sec. 4.4,
Table 6, Figure 7, Appendix B).

Given the aux tensors of the fqo mechanism (``coupling`` w_ij (B,H,T,T), ``anchors`` r_j
(B,H,T,d)), every (sequence, head, position) is one free oscillator with fixed h_i = sum_j w_ij r_j.
Eq. (3) is integrated from z(0) to T_max and compared with the analytic fixed point
z*_i = h_i/||h_i|| (Eq. 4): err_i = ||z(T_max) - z*_i||_2. Per (token, initialisation):

* degenerate            ||h_i|| < 0.01          (Prop. 3 failure mode; small driving force)
* converged             err < 0.01 and not degenerate      ("Frac < 0.01")
* apparent antipodal    err > 0.1  and not degenerate      (Prop. 4 failure mode)
* intermediate          the rest (0.01 <= err <= 0.1, not degenerate)

Choices where the paper is ambiguous:
* The categories are made mutually exclusive, degenerate first (Table 6's d=2 row sums to 100.0 %).
  ``frac_err_lt_conv_all`` / ``frac_err_gt_antipodal_all`` give err < 0.01 / err > 0.1 over all
  tokens including degenerate ones (the overlapping reading).
* Fractions are over (token, init) pairs; ``nfev_per_token`` is the mean nfev of ONE solve
  (one token, one initialisation); Table 6 may sum over the 5 inits (paper does not say).
* Sequential init starts token i from the *analytic* fixed point z*_{i-1} of the previous position
  in the same (sequence, head) ("previous token's fixed point", Sec. 4.4); position 0 is random.
* err uses the raw integrated state (no re-normalisation), like scipy's output.
* Methods: "scipy" (reference, one solve_ivp per row), "batched" (torch replica of scipy's RK45 run
  in the invariant plane, :func:`dopri5_plane`: same steps, verdicts and nfev), "batched_rd" (the
  same replica on the full R^d state, :func:`dopri5_batched`), "closed_form" (exact flow; no nfev).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from oscrepro.analysis.figures import save_figure
from oscrepro.papers.fqo.lohe_ode import dopri5_batched, dopri5_plane, lohe_closed_form, solve_scipy

METHODS = ("batched", "batched_rd", "scipy", "closed_form")


def sample_sphere(
    shape: tuple[int, ...], d: int, generator: torch.Generator, dtype: torch.dtype = torch.float64
) -> Tensor:
    """Uniform samples on S^{d-1}: z ~ N(0, I)/||z||.  Returns (*shape, d)."""
    g = torch.randn(*shape, d, generator=generator, dtype=dtype)
    return g / torch.linalg.vector_norm(g, dim=-1, keepdim=True)


def random_problem(
    batch: int = 4,
    n_heads: int = 2,
    seq_len: int = 32,
    d_osc: int = 2,
    coupling_scale: float = 1.0,
    causal: bool = False,
    seed: int = 0,
    coupling_seed: int | None = None,
) -> tuple[Tensor, Tensor]:
    """Random fqo aux tensors: w = scale * softplus(N(0,1) scores) (Eq. 2), anchors uniform on S^{d-1}.

    ``coupling_seed`` (default ``seed``) lets several d_osc share the same couplings.
    Returns coupling (B,H,T,T) (zero above the diagonal if causal) and anchors (B,H,T,d), float64.
    """
    gw = torch.Generator().manual_seed(seed if coupling_seed is None else coupling_seed)
    scores = torch.randn(batch, n_heads, seq_len, seq_len, generator=gw, dtype=torch.float64)
    coupling = coupling_scale * F.softplus(scores)  # (B, H, T, T)
    if causal:
        coupling = coupling.tril()
    ga = torch.Generator().manual_seed(seed + 7919 * d_osc)
    anchors = sample_sphere((batch, n_heads, seq_len), d_osc, ga)  # (B, H, T, d)
    return coupling, anchors


def _initial_states(h: Tensor, z_star: Tensor, n_inits: int, init: str, seed: int) -> Tensor:
    """z(0) for every init: (n_inits, B, H, T, d)."""
    gen = torch.Generator().manual_seed(seed)
    z0 = sample_sphere((n_inits, *h.shape[:-1]), h.shape[-1], gen, h.dtype)
    if init == "sequential":
        prev = z_star[..., :-1, :].expand(n_inits, *z_star[..., :-1, :].shape)
        z0 = torch.cat([z0[..., :1, :], prev], dim=-2)
    elif init != "random":
        raise ValueError(f"unknown init {init!r}; expected 'random' or 'sequential'")
    return z0


def integrate_rows(
    h: Tensor, z0: Tensor, t_max: float, method: str, rtol: float = 1e-6, atol: float = 1e-6
) -> tuple[Tensor, Tensor | None]:
    """Integrate Eq. (3) for M rows (h, z0: (M, d), float64) -> (z_T (M, d), nfev (M,) or None)."""
    if method == "closed_form":
        return lohe_closed_form(h, z0, t_max), None
    if method in ("batched", "batched_rd"):
        solver = dopri5_plane if method == "batched" else dopri5_batched
        z_t, nfev, ok = solver(h, z0, t_max, rtol, atol)
        if not bool(ok.all()):
            raise RuntimeError(f"{int((~ok).sum())} rows hit scipy's step-size underflow")
        return z_t, nfev
    if method == "scipy":
        hn, zn = h.cpu().numpy(), z0.cpu().numpy()
        out = [solve_scipy(hn[i], zn[i], t_max, rtol, atol) for i in range(hn.shape[0])]
        z_t = torch.from_numpy(np.stack([o[0] for o in out])) if out else torch.empty_like(h)
        return z_t, torch.tensor([o[1] for o in out], dtype=torch.int64)
    raise ValueError(f"unknown method {method!r}; expected one of {METHODS}")


def classify(
    err: Tensor,
    h_norm: Tensor,
    conv_threshold: float = 0.01,
    antipodal_threshold: float = 0.1,
    degenerate_threshold: float = 0.01,
) -> dict[str, Tensor]:
    """Mutually exclusive verdict masks (see module docstring); all inputs/outputs have equal shape."""
    degenerate = h_norm < degenerate_threshold
    converged = ~degenerate & (err < conv_threshold)
    antipodal = ~degenerate & (err > antipodal_threshold)
    return {
        "converged": converged,
        "apparent_antipodal": antipodal,
        "degenerate": degenerate,
        "intermediate": ~(degenerate | converged | antipodal),
    }


def convergence_table(
    coupling: Tensor,
    anchors: Tensor,
    n_inits: int = 5,
    t_max: float = 30.0,
    seed: int = 0,
    method: str = "batched",
    init: str = "random",
    rtol: float = 1e-6,
    atol: float = 1e-6,
    token_mask: Tensor | None = None,
    conv_threshold: float = 0.01,
    antipodal_threshold: float = 0.1,
    degenerate_threshold: float = 0.01,
    return_arrays: bool = False,
) -> dict[str, Any]:
    """One row of Table 6 from fqo aux tensors.

    Args:
        coupling: (B, H, T, T) w_ij >= 0.  anchors: (B, H, T, d) unit r_j.
        n_inits: random z(0) per token (Appendix B: 5).  init: "random" | "sequential".
        token_mask: optional (B, T) bool, True for real (non-padding) tokens.
    Returns a dict of fractions (over token x init pairs), mean/max err, nfev per solve, timing;
    with ``return_arrays`` also the per-row ``err``, ``h_norm``, ``nfev`` and verdict masks.
    """
    c64, a64 = coupling.detach().to(torch.float64).cpu(), anchors.detach().to(torch.float64).cpu()
    h = c64 @ a64  # (B, H, T, d)
    z_star = F.normalize(h, dim=-1, eps=1e-8)  # Eq. (4), with the model's eps (App. B)
    z0 = _initial_states(h, z_star, n_inits, init, seed)  # (I, B, H, T, d)
    d = h.shape[-1]
    sel = (
        torch.ones(h.shape[:-1], dtype=torch.bool)
        if token_mask is None
        else token_mask.cpu().bool()[:, None, :].expand(h.shape[:-1])
    )  # (B, H, T)
    h_rows = h[sel]  # (M, d)
    zs_rows = z_star[sel]
    z0_rows = z0[:, sel]  # (I, M, d)
    n_tok = h_rows.shape[0]
    h_all = h_rows.expand(n_inits, n_tok, d).reshape(-1, d)
    start = time.perf_counter()
    z_t, nfev = integrate_rows(h_all, z0_rows.reshape(-1, d), t_max, method, rtol, atol)
    wall = time.perf_counter() - start
    err = torch.linalg.vector_norm(z_t - zs_rows.expand(n_inits, n_tok, d).reshape(-1, d), dim=-1)
    h_norm = torch.linalg.vector_norm(h_all, dim=-1)
    v = classify(err, h_norm, conv_threshold, antipodal_threshold, degenerate_threshold)
    out: dict[str, Any] = {
        "method": method,
        "init": init,
        "t_max": float(t_max),
        "d_osc": d,
        "n_tokens": n_tok,
        "n_inits": n_inits,
        "n_solves": int(err.numel()),
        **{f"frac_{k}": float(m.double().mean()) for k, m in v.items()},
        "frac_err_lt_conv_all": float((err < conv_threshold).double().mean()),
        "frac_err_gt_antipodal_all": float((err > antipodal_threshold).double().mean()),
        "mean_err": float(err.mean()),
        "max_err": float(err.max()),
        "nfev_per_token": float(nfev.double().mean()) if nfev is not None else float("nan"),
        "wall_s": wall,
    }
    if return_arrays:
        out.update(err=err, h_norm=h_norm, nfev=nfev, **v)
    return out


def tmax_sweep(
    coupling: Tensor, anchors: Tensor, t_maxes: Iterable[float] = (30, 100, 300, 1000, 5000), **kwargs: Any
) -> list[dict[str, Any]]:
    """Figure 7(a): one :func:`convergence_table` per T_max with identical z(0) (same seed)."""
    return [convergence_table(coupling, anchors, t_max=float(t), **kwargs) for t in t_maxes]


def failure_vs_dosc(problems: Mapping[int, tuple[Tensor, Tensor]], **kwargs: Any) -> list[dict[str, Any]]:
    """Figure 7(b): {d_osc: (coupling, anchors)} -> one :func:`convergence_table` per d_osc."""
    return [convergence_table(c, a, **kwargs) for _, (c, a) in sorted(problems.items())]


def plot_figure7(sweep_rows: list[dict[str, Any]], dosc_rows: list[dict[str, Any]], path: str | Path,
                 paper_sweep: list[float] | None = None, paper_rows: list[dict[str, Any]] | None = None,
                 caption: str | None = None) -> Path:
    """Two-panel PNG: (a) % converged vs T_max (log x); (b) failure rates vs d_osc at fixed T_max. The paper's values
    (reference data: ``paper_sweep`` % converged per T_max, ``paper_rows`` ``{antipodal, degenerate}`` % per d_osc
    row) are hollow diamonds / dotted lines beside ours."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import NullFormatter

    from oscrepro.analysis.figures import PAPER, paper_label

    fig = Figure(figsize=(10.0, 4.0))
    ax_a, ax_b = fig.subplots(1, 2)
    ts = [r["t_max"] for r in sweep_rows]
    ax_a.plot(ts, [100 * r["frac_converged"] for r in sweep_rows], "o-", label="converged (ours)")
    if paper_sweep and any(p == p for p in paper_sweep):
        ax_a.plot(ts[:len(paper_sweep)], paper_sweep[:len(ts)], **{**PAPER, "ls": ":", "color": "black"},
                  label=paper_label("Figure 7(a)"))
    ax_a.set(
        xscale="log",
        xlabel=r"$T_{\max}$",
        ylabel="converged (err < 0.01) [%]",
        title=f"(a) $d_{{osc}}$={sweep_rows[0]['d_osc']}" if sweep_rows else "(a)",
    )
    ax_a.legend(fontsize=7)
    ds = [r["d_osc"] for r in dosc_rows]
    for n, (key, pkey, label) in enumerate((("frac_apparent_antipodal", "antipodal", "apparent antipodal"),
                                            ("frac_degenerate", "degenerate", "degenerate"))):
        vals = [max(100 * r[key], 1e-3) for r in dosc_rows]  # floor so zeros show on the log axis
        ax_b.plot(ds, vals, "o-", color=f"C{n}", label=f"{label} (ours)")
        if paper_rows and all(p.get(pkey) is not None for p in paper_rows):  # rows may give only some values
            ax_b.plot(ds, [max(float(p[pkey]), 1e-3) for p in paper_rows], **{**PAPER, "mec": f"C{n}", "ls": ":",
                                                                             "color": f"C{n}"},
                      label=paper_label(f"{label} (Table 6)"))
    ax_b.set(
        xscale="log",
        yscale="log",
        xlabel=r"$d_{osc}$",
        ylabel="failure rate [%] (0 drawn at 1e-3)",
        title=f"(b) $T_{{\\max}}$={dosc_rows[0]['t_max']:g}" if dosc_rows else "(b)",
    )
    ax_b.set_xticks(ds, [str(x) for x in ds])
    ax_b.xaxis.set_minor_formatter(NullFormatter())
    ax_b.legend(fontsize=7)
    return save_figure(fig, path, caption=caption)

