"""CUDA parity of every attention mechanism: its device kernels agree with the float64 CPU reference.

    python scripts/cuda_parity.py --out $OUT/cuda_parity.md          # on a GPU machine (under 3 minutes)
    python scripts/cuda_parity.py --device cpu --only softmax fqo     # dry run

The tests run on CPU in float64; training runs on GPUs in float32 or bf16-mixed, through other kernels (SDPA's
fused paths, cuBLAS, the device's topk / scatter). This checks, per ``conf/attention/*.yaml``, built as the
contract test builds it (Hydra ``_partial_`` factory called with ``d_model``, ``n_heads``, ``layer_idx=0``):

1. float32 on the device vs float64 on CPU (same state_dict, same input, causal): max |dev - ref| / max |ref| of
   the output, and of the input and parameter gradients of a fixed scalar loss (max over tensors);
2. causality on the device: d y_t / d x_s for s > t must be exactly zero (max abs leak);
3. bf16 autocast on the device: output and gradients finite; output rel. error vs the float64 reference;
4. run-to-run determinism: two forward+backward passes give bit-identical output and gradients (reported only).

float32 forward <= 1e-4 and gradients <= 1e-3 (or, where float32 itself is worse on the CPU plain path on the same
input, <= FLOOR_FACTOR x that error), bf16 <= 5e-2 are "ok", else MISMATCH. A mechanism that raises is
recorded with its error and the rest run. Exit code 1 on any MISMATCH, causality leak or error. The reference runs the
plain path (:data:`PLAIN` switches the fast paths off); the device model keeps the config's own switches, so at
training sizes (``--seq 1536``: B H T^2 past fqo's tiled and SSA's compile thresholds) its fast paths are what is
checked; at the default small size (batch 2, seq 32, d_model 32) they stay off. Above 64 positions causality is
checked at :data:`CAUSAL_POSITIONS` output positions spread over the sequence.
"""

from __future__ import annotations

import argparse
import functools
import inspect
import math
import os
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import torch
from omegaconf import OmegaConf
from torch import Tensor, nn

from oscrepro.bench.harness import attention_factory, emit

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf" / "attention"
TOL_FWD, TOL_GRAD, TOL_BF16 = 1e-4, 1e-3, 5e-2
#: float32 on the device may be this many times float32's own error on the CPU plain path, on the same input (a
#: long SSA sequence near its locking boundary conditions its gradient: that is float32, not the device's kernel)
FLOOR_FACTOR = 10.0
#: Constructor switches of the fast paths, set on the float64 reference so it runs the plain path.
PLAIN = {"tiled": False, "compile_min_elems": None, "compiled": False}
#: Input scale per mechanism class where unit-scale inputs leave its arithmetic unexercised: at unit scale SSA's
#: randomly initialised frequencies lock about one key per query row (its weights are then one-hot and its top-k
#: selects nothing); at 0.1 every visible key locks, so the synchronization sums and the top-k path are compared.
INPUT_SCALE = {"SelectiveSynchronizationAttention": 0.1}
CAUSAL_POSITIONS = 8  # above 64 positions, the causality check differentiates this many output positions, spread out
GRAD_FLOOR = 1e-3  # gradient error scale floor, relative to the largest gradient (grad_err)
COLUMNS = ["config", "target", "fwd rel err", "grad rel err", "causal leak", "bf16 rel err", "deterministic", "status"]


def rel_err(out: Tensor, ref: Tensor, floor: float = 0.0) -> float:
    """max |out - ref| / max(max |ref|, floor), in float64 on CPU (the absolute error where both are zero)."""
    out, ref = out.detach().double().cpu(), ref.detach().double().cpu()
    scale = max(ref.abs().max().item() if ref.numel() else 0.0, floor)
    err = (out - ref).abs().max().item() if ref.numel() else 0.0
    return err / scale if scale > 0 else err


def verdict(err: float, tol: float) -> str:
    """The status of one error: "ok" when finite and within ``tol``, else "MISMATCH" (NaN is a mismatch)."""
    return "ok" if err <= tol else "MISMATCH"


def build(path: Path, d_model: int, n_heads: int, seed: int, plain: bool = False, seq: int = 0) -> nn.Module:
    """The mechanism of ``path`` as the contract test builds it (float32, CPU); ``seed`` fixes its init. ``plain``:
    with its fast-path switches off where its constructor has them (:data:`PLAIN`: fqo's tiled kernel, the
    torch.compile of fqo / SSA / FSN), the plain path the reference is computed on; the parameters are the same."""
    factory = attention_factory(path.stem)
    params = inspect.signature(factory.func if isinstance(factory, functools.partial) else factory).parameters
    off = {k: v for k, v in PLAIN.items() if k in params} if plain else {}
    if "max_len" in params and seq > (params["max_len"].default or 0):  # a table of positions (fqo_gain's β)
        off["max_len"] = seq  # the same parameters for the reference and the device model
    torch.manual_seed(seed)
    return factory(d_model=d_model, n_heads=n_heads, layer_idx=0, **off)


def seq_len(path: Path, seq: int) -> int:
    """``seq``, or longer where the mechanism's sparse path needs it (top_k < T; else SSA's top-k is dense)."""
    top_k = OmegaConf.load(path).get("top_k")
    return max(seq, int(top_k) + 32) if top_k is not None else seq


def forward_backward(mech: nn.Module, x: Tensor, w: Tensor, bf16: bool = False) -> dict[str, Tensor | None]:
    """Causal output and the gradients of (out * w).sum() w.r.t. x and every parameter (by name); grads cleared."""
    mech.zero_grad(set_to_none=True)
    x = x.detach().clone().requires_grad_(True)
    with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=bf16):
        out, _ = mech(x, causal=True)
    (out.to(w.dtype) * w).sum().backward()
    res: dict[str, Tensor | None] = {"out": out.detach(), "x": x.grad}
    res.update({n: None if p.grad is None else p.grad.detach().clone() for n, p in mech.named_parameters()})
    return res


def grad_err(dev: dict[str, Tensor | None], ref: dict[str, Tensor | None]) -> tuple[float, str]:
    """Max rel. error over the input and parameter gradients, and the tensor where it is largest. Each is scaled by
    its own max |ref|, floored at GRAD_FLOOR x the largest |ref| of all: a gradient that is zero analytically (SSA's
    omega / theta biases: its scores are shift-invariant) is ~1e-17 in float64, and float32 rounding noise over it
    says nothing about the kernel."""
    grads = {k: v for k, v in ref.items() if k != "out" and not (v is None and dev[k] is None)}
    top = max((v.abs().max().item() for v in grads.values() if v is not None and v.numel()), default=0.0)
    worst, where = 0.0, ""
    for name, r in grads.items():
        err = float("inf") if r is None or dev[name] is None else rel_err(dev[name], r, GRAD_FLOOR * top)
        if err > worst or (math.isnan(err) and not math.isnan(worst)):  # NaN is the worst, kept once found
            worst, where = err, name
    return worst, where


def causal_leak(mech: nn.Module, x: Tensor) -> float:
    """max |d y_t / d x_s| over s > t on the device (exactly 0 for a causal mechanism)."""
    x = x.detach().clone().requires_grad_(True)
    out, _ = mech(x, causal=True)
    leak, n = 0.0, x.shape[1]
    positions = range(n - 1) if n <= 64 else sorted({round(i * (n - 2) / (CAUSAL_POSITIONS - 1))
                                                     for i in range(CAUSAL_POSITIONS)})
    for t in positions:
        (g,) = torch.autograd.grad(out[:, t].sum(), x, retain_graph=True)
        here = g[:, t + 1 :].abs().max().item()
        if math.isnan(here):
            return here
        leak = max(leak, here)
    return leak


def all_finite(res: dict[str, Tensor | None]) -> bool:
    return all(bool(torch.isfinite(v).all()) for v in res.values() if v is not None)


def same(a: dict[str, Tensor | None], b: dict[str, Tensor | None]) -> bool:
    """Bit-identical output and gradients (None where the other is None)."""
    return all((v is None and b[k] is None) or (v is not None and b[k] is not None and torch.equal(v, b[k]))
               for k, v in a.items())


def check(path: Path, device: torch.device, d_model: int, n_heads: int, seq: int, seed: int = 0) -> dict:
    """One table row for the mechanism of ``path`` (module docstring); errors are recorded, not raised."""
    row = {c: "" for c in COLUMNS} | {"config": path.stem, "target": OmegaConf.load(path)["_target_"].split(".")[-1]}
    failed, stage = [], "build"
    try:
        t = seq_len(path, seq)
        ref = build(path, d_model, n_heads, seed, plain=True, seq=t).double()
        dev = build(path, d_model, n_heads, seed, seq=t).to(device=device, dtype=torch.float32)
        dev.load_state_dict(ref.state_dict())
        gen = torch.Generator().manual_seed(seed + 1)
        row["config"] += f" (T={t})" * (t != seq)
        x = torch.randn(2, t, d_model, generator=gen, dtype=torch.float64) * INPUT_SCALE.get(row["target"], 1.0)
        w = torch.randn(x.shape, generator=gen, dtype=torch.float64)
        xd, wd = x.to(device, torch.float32), w.to(device, torch.float32)
        stage = "float64 reference"
        want = forward_backward(ref, x, w)
        stage = "CPU float32 floor"  # float32's own error on this input, on the plain CPU path
        cpu32 = build(path, d_model, n_heads, seed, plain=True, seq=t)
        cpu32.load_state_dict(ref.state_dict())
        floor = forward_backward(cpu32, x.float(), w.float())
        fwd_floor, (grad_floor, _) = rel_err(floor["out"], want["out"]), grad_err(floor, want)
        tol_fwd, tol_grad = max(TOL_FWD, FLOOR_FACTOR * fwd_floor), max(TOL_GRAD, FLOOR_FACTOR * grad_floor)
        stage = "float32"
        got = forward_backward(dev, xd, wd)
        fwd, (grad, where) = rel_err(got["out"], want["out"]), grad_err(got, want)
        row["fwd rel err"] = f"{fwd:.2e} (CPU f32 {fwd_floor:.1e})"
        row["grad rel err"] = f"{grad:.2e} (CPU f32 {grad_floor:.1e})" + f" ({where})" * (grad > tol_grad)
        failed += ["fwd"] * (verdict(fwd, tol_fwd) != "ok") + ["grad"] * (verdict(grad, tol_grad) != "ok")
        stage = "causality"
        leak = causal_leak(dev, xd)
        row["causal leak"] = f"{leak:.1e}" if leak else "0"
        failed += ["causal leak"] * (leak != 0)
        stage = "bf16"
        half = forward_backward(dev, xd, wd, bf16=True)
        bf = rel_err(half["out"], want["out"]) if all_finite(half) else float("nan")
        row["bf16 rel err"] = f"{bf:.2e}" if all_finite(half) else "non-finite"
        failed += ["bf16"] * (verdict(bf, TOL_BF16) != "ok")
        stage = "determinism"
        row["deterministic"] = "yes" if same(forward_backward(dev, xd, wd), forward_backward(dev, xd, wd)) else "no"
        row["status"] = "MISMATCH: " + ", ".join(failed) if failed else "ok"
    except Exception as err:  # noqa: BLE001 -- recorded in the row; the next mechanism runs
        msg = (str(err).strip().splitlines() or [""])[0][:200].replace("|", "/")
        row["status"] = "MISMATCH: " + ", ".join(failed) + "; " if failed else ""  # found before the error: kept
        row["status"] += f"error ({stage}): {type(err).__name__}: {msg}"
    return row


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    import platform

    return f"CPU ({platform.processor() or platform.machine()})"


def git_commit() -> str:
    """HEAD's short hash; ``CUDA_PARITY_COMMIT`` when set (a device machine's copy of the tree can keep a stale HEAD:
    the caller names the commit it sent)."""
    if os.environ.get("CUDA_PARITY_COMMIT"):
        return os.environ["CUDA_PARITY_COMMIT"]
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True, timeout=10).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def render(rows: list[dict], device: torch.device, seconds: float, shape: str) -> str:
    """The markdown report: header lines, then one table row per mechanism config."""
    head = [
        "# CUDA parity of the attention mechanisms (scripts/cuda_parity.py)",
        "",
        f"- device: {device_name(device)} (`{device}`)",
        f"- torch {torch.__version__}, commit {git_commit()}, {datetime.now(UTC):%Y-%m-%d %H:%M:%S} UTC, "
        f"{seconds:.1f} s total, float32 matmul precision {torch.get_float32_matmul_precision()}",
        f"- input {shape}, causal; tolerances: float32 fwd {TOL_FWD:g}, grads {TOL_GRAD:g} (or {FLOOR_FACTOR:g} x "
        f"the CPU float32 error on the plain path, in brackets, where that is larger), bf16 fwd {TOL_BF16:g} "
        "(rel. to max |float64 ref|)",
        "",
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
    ]
    return "\n".join(head + ["| " + " | ".join(str(r[c]) for c in COLUMNS) + " |" for r in rows]) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="+", metavar="NAME", help="config names (conf/attention/NAME.yaml)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--d-model", type=int, default=32)
    ap.add_argument("--n-heads", type=int, default=4)
    ap.add_argument("--seq", type=int, default=32)
    args = ap.parse_args(argv)
    paths = sorted(CONF.glob("*.yaml"))
    if args.only:
        unknown = set(args.only) - {p.stem for p in paths}
        if unknown:
            ap.error(f"unknown config(s): {', '.join(sorted(unknown))}")
        paths = [p for p in paths if p.stem in args.only]
    device, t0 = torch.device(args.device), time.perf_counter()
    if device.type == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda, but torch sees no CUDA device (--device cpu for a dry run)")
    rows = []
    for path in paths:
        rows.append(check(path, device, args.d_model, args.n_heads, args.seq))
        print(f"{path.stem}: {rows[-1]['status']}", file=sys.stderr, flush=True)
    report = render(rows, device, time.perf_counter() - t0, f"(2, {args.seq}, {args.d_model}), {args.n_heads} heads")
    emit(report, args.out)
    return int(any(r["status"] != "ok" for r in rows))  # a mismatch, a leak, or a path that raises on the device


if __name__ == "__main__":
    sys.exit(main())
