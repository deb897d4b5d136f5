"""fsn training-step time per token: FSN torus LM vs the paper's RoPE transformer baseline (App. B "Efficiency").

Adapter of ``conf/table/fsn/step_time.yaml``. Both ~1M-parameter models are built as in Table 3 (FSN k = 176,
4 layers, N = 3; transformer width from the automated search) and trained with the paper's step: AdamW (lr 1e-3,
weight decay 0.01), global-norm clip 1.0, fp32, no compilation. Steps alternate between the two models, so load
drift on a shared machine hits both alike; after warm-up steps the median over trials is reported.

The GEMM FLOPs of one step (``torch.utils.flop_counter``) are reported as well, and on a CPU the split of one
profiled step into GEMM time (matrix multiplies and the fused SDPA kernels) and everything else. The GEMM-FLOP ratio
is not a floor for the step-time ratio: the transformer has elementwise work of its own (dropout, softmax, norms,
the optimizer), so the step ratio falls below the FLOP ratio once the FSN's non-GEMM time is smaller, relative to
its GEMMs, than the transformer's. On a machine shared with other jobs, run one thread and read the
process-CPU-time ratio (wall time then mostly measures the other jobs).
"""

from __future__ import annotations

import functools
import math
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from oscrepro.attention.fsn import FSNAttention
from oscrepro.models.rope_transformer import RopeTransformerLM
from oscrepro.papers.fsn.torus_lm import SwiGLUPhaseFFN, TorusLM

MODELS = ("fsn", "transformer")
Table = tuple[list[str], list[dict[str, Any]], list[str]]


def build_model(name: str, vocab: int, chunk: int | None) -> nn.Module:
    """The Table 3 model ``fsn`` (TorusLM with FSN coupling, query chunk ``chunk``) or ``transformer``."""
    if name == "fsn":
        return TorusLM(vocab, functools.partial(FSNAttention, chunk_size=chunk), functools.partial(SwiGLUPhaseFFN))
    return RopeTransformerLM(vocab)


def step_flops(model: nn.Module, tokens: Tensor, targets: Tensor) -> dict[str, int]:
    """Matrix-multiply FLOPs of one forward + backward (``torch.utils.flop_counter``), total and by operator.

    The counter sees every GEMM: FSN's chunked causal aggregation as executed (diagonal chunks are computed in
    full, so about 5/8 of T^2 at chunk 64 and T 256), and the transformer's SDPA, whose CPU kernels torch's
    counter does not know, by torch's SDPA formula halved for ``is_causal`` (the kernel skips masked blocks).
    Elementwise work is not counted.
    """
    from torch.utils.flop_counter import FlopCounterMode, sdpa_backward_flop_count, sdpa_flop_count

    def share(is_causal: bool) -> float:
        return 0.5 if is_causal else 1.0

    def sdpa_fwd(q, k, v, dropout_p=0.0, is_causal=False, *args, **kwargs) -> int:
        return int(sdpa_flop_count(q, k, v) * share(kwargs.get("is_causal", is_causal)))

    def sdpa_bwd(dout, q, k, v, out, lse, dropout_p=0.0, is_causal=False, *args, **kwargs) -> int:
        return int(sdpa_backward_flop_count(dout, q, k, v) * share(kwargs.get("is_causal", is_causal)))

    def inplace_mm(self_shape, a_shape, b_shape, *args, **kwargs) -> int:  # addmm_ / baddbmm_: 2 (b) m k n
        return 2 * math.prod(a_shape) * b_shape[-1]

    aten = torch.ops.aten
    counter = FlopCounterMode(display=False, custom_mapping={
        aten._scaled_dot_product_flash_attention_for_cpu: sdpa_fwd,
        aten._scaled_dot_product_flash_attention_for_cpu_backward: sdpa_bwd,
        aten.addmm_: inplace_mm, aten.baddbmm_: inplace_mm})  # torch's counter skips in-place GEMMs
    with counter, torch.compiler.set_stance("force_eager"):  # the same GEMMs; a compile under the counter's
        logits, _ = model(tokens)                         # dispatch mode would leave the kernels eager for good
        F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1)).backward()
    model.zero_grad(set_to_none=True)
    by_op = {str(op).split(".")[-1]: n for op, n in counter.get_flop_counts()["Global"].items()}
    return {"total": counter.get_total_flops(), **by_op}


GEMM_OPS = frozenset({"mm", "bmm", "addmm", "addmm_", "baddbmm", "baddbmm_",
                      "_scaled_dot_product_flash_attention_for_cpu",
                      "_scaled_dot_product_flash_attention_for_cpu_backward"})


def gemm_split(step: Callable[[], tuple[float, float]]) -> tuple[float, float]:
    """(GEMM ms, other ms) of one profiled CPU step: the self CPU time of :data:`GEMM_OPS` and of every other op
    (elementwise, reductions, compiled elementwise graphs, the optimizer). The profiler's own per-op overhead is
    included in "other"."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], acc_events=True) as prof:  # (the default warns)
        step()
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events)
    gemm = sum(e.self_cpu_time_total for e in events if e.key.removeprefix("aten::") in GEMM_OPS)
    return gemm / 1e3, (total - gemm) / 1e3


def make_step(model: nn.Module, tokens: Tensor, targets: Tensor) -> Callable[[], tuple[float, float]]:
    """One training step of the paper's recipe; the returned callable gives (wall s, process CPU s)."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    model.train()
    sync = torch.cuda.synchronize if tokens.is_cuda else (lambda: None)

    def step() -> tuple[float, float]:
        sync()
        w0, c0 = time.perf_counter(), time.process_time()
        opt.zero_grad(set_to_none=True)
        logits, _ = model(tokens)  # (B, T, V)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sync()
        return time.perf_counter() - w0, time.process_time() - c0

    return step


def _measure(batch: int, seq: int, vocab: int, chunk: int | None, warmup: int, trials: int, device: str,
             seed: int) -> dict[str, dict[str, Any]]:
    """Per model: parameter count, step FLOPs and the wall / CPU seconds of every timed step."""
    torch.manual_seed(seed)
    tokens = torch.randint(0, vocab, (batch, seq + 1)).to(device)  # (B, T + 1)
    x, y = tokens[:, :-1], tokens[:, 1:]
    res: dict[str, dict[str, Any]] = {}
    for name in MODELS:
        model = build_model(name, vocab, chunk).to(device)
        res[name] = {"params": sum(p.numel() for p in model.parameters()), "flops": step_flops(model, x, y),
                     "step": make_step(model, x, y), "wall": [], "cpu": []}
    for _ in range(warmup):
        for name in MODELS:
            res[name]["step"]()
    for _ in range(trials):  # alternate the models step by step
        for name in MODELS:
            w, c = res[name]["step"]()
            res[name]["wall"].append(w)
            res[name]["cpu"].append(c)
    for name in MODELS:
        res[name]["split"] = gemm_split(res[name]["step"]) if device == "cpu" else (math.nan, math.nan)
    return res


def fsn_step_time(out_dir: Path, budget: str, results_dir: Path, paper: dict[str, Any], batch: int, seq: int,
                  vocab: int, chunk: int | None, warmup: int, trials: int, threads: int | None = None,
                  device: str = "cpu", seed: int = 0) -> Table:
    """Rows: FSN, transformer, and their ratio (FSN's value / the transformer's, column by column).

    ``paper``: ``{tokens_s: {fsn, transformer}, ratio, setting}`` from App. B. ``threads`` sets torch's intra-op
    threads for the build only; ``device`` ``auto`` picks CUDA when visible. ``results_dir`` is unused.
    """
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    threads_before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        res = _measure(batch, seq, vocab, chunk, warmup, trials, device, seed)
        used_threads = torch.get_num_threads()
    finally:
        torch.set_num_threads(threads_before)
    n_tok = batch * seq
    rows = []
    for name in MODELS:
        r = res[name]
        wall, cpu = statistics.median(r["wall"]), statistics.median(r["cpu"])
        rows.append({"model": name, "params": r["params"], "wall median ms": 1e3 * wall,
                     "wall min ms": 1e3 * min(r["wall"]), "wall max ms": 1e3 * max(r["wall"]),
                     "us/token": 1e6 * wall / n_tok, "tokens/s (ours)": n_tok / wall,
                     "tokens/s (paper)": paper["tokens_s"][name], "CPU median ms": 1e3 * cpu,
                     "GFLOP/step": r["flops"]["total"] / 1e9, "GFLOP per CPU-s": r["flops"]["total"] / cpu / 1e9,
                     "profiled GEMM ms": r["split"][0], "profiled other ms": r["split"][1]})
    fsn, tf = rows
    rows.append({"model": "ratio FSN / transformer",
                 **{k: fsn[k] / tf[k] for k in fsn if k != "model"}})
    ratio = rows[-1]
    ops = {name: ", ".join(f"{op} {n / 1e9:.2f}" for op, n in sorted(res[name]["flops"].items()) if op != "total")
           for name in MODELS}
    notes = [f"**Protocol:** batch {batch} x sequence {seq}, vocabulary {vocab}, FSN query chunk {chunk}; device "
             f"`{device}`, {used_threads} torch thread(s); {warmup} warm-up and {trials} timed training steps per "
             f"model, alternated; medians. Paper (App. B): {paper['setting']}.",
             f"**Step time:** FSN / transformer = {ratio['wall median ms']:.2f}x wall, "
             f"{ratio['CPU median ms']:.2f}x process CPU (paper: {paper['ratio']}x, "
             f"{paper['tokens_s']['transformer']:,} vs {paper['tokens_s']['fsn']:,} tokens/s).",
             f"**GEMM work:** {ratio['GFLOP/step']:.2f}x (FSN: {ops['fsn']}; transformer: {ops['transformer']} "
             "GFLOP/step). Not a floor: the transformer has elementwise work too (module docstring).",
             *([] if device != "cpu" else [
                 f"**Where the time goes** (one profiled step each): FSN {fsn['profiled GEMM ms']:.0f} ms GEMM + "
                 f"{fsn['profiled other ms']:.0f} ms other; transformer {tf['profiled GEMM ms']:.0f} + "
                 f"{tf['profiled other ms']:.0f} ms. Ratios: GEMM time {ratio['profiled GEMM ms']:.2f}x, other "
                 f"{ratio['profiled other ms']:.2f}x."]),
             "**Ratio row:** every column is FSN's value / the transformer's (tokens/s: below 1 = FSN slower)."]
    return list(rows[0]), rows, notes
