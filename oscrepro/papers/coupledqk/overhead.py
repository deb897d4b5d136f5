"""coupledqk Table 10 (App. C; Sec. 3.5 "Overhead"): throughput and peak memory of the whole 60M GPT per attention
variant, relative to Standard.

Adapter of ``conf/table/coupledqk/table10.yaml``. Each row's model is composed as its training runs are
(``experiment=coupledqk/lm`` + the row's overrides, at ``compose_budget``: ``paper`` gives the 60M Small model,
``smoke`` the d-16 pipeline check) and built at the GPT-2 vocabulary. The input is random token ids (B, T + 1):
the model reads ``[:, :-1]``, the loss is the LM cross-entropy against ``[:, 1:]``; T tokens per sequence count
towards tok/s. Two passes, each as in ``oscrepro.bench.harness`` and with its helpers:

* forward: ``model(ids)`` under ``no_grad`` in eval mode (logits, no loss);
* forward + backward: the cross-entropy loss and its backward to every parameter (gradients set to ``None``
  first, so their buffers are allocated inside the pass), in train mode. No optimizer step.

All models are timed in alternation, trial by trial, in one process (``measure_alternating``), after warm-up; tok/s
is B T over the median wall time. ``Rel`` is the variant's tok/s over Standard's, **one ratio per timed trial**
(Standard's time in that trial over the variant's: the two were timed back to back, so load that drifts over the
build cancels), reported as mean ± std over the trials with n = the trials (``SeedStat``). The trials are the
repeated measurements the claims judge (issue 32: "repeated measurements (the bench's repeats) for costs"); they
estimate this machine's ratio, not a spread over machines. On a CPU the same ratio of process-CPU times is reported
too (steadier on a shared machine with one thread). Peak memory (``peak_memory_mb``) is taken per model with that
model alone on the device: on CUDA ``max_memory_allocated``, on a CPU torch's allocator under ``torch.profiler``;
both count the model's parameters and the ids as live. The paper does not say which pass its "Peak MB" is, so ours
is the forward + backward pass (the training pass, without optimizer state); the forward-only peak is listed beside
it.

The paper ran fp16 mixed precision (App. B); ``amp_dtype`` applies ``torch.autocast`` with that dtype on CUDA only
(on a CPU every budget runs fp32).
"""

from __future__ import annotations

import contextlib
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from hydra.utils import instantiate
from torch import Tensor, nn

from oscrepro.bench.harness import measure_alternating, paired_ratios, peak_memory_mb
from oscrepro.runs.compose import compose_run
from oscrepro.tables.values import SeedStat

Table = tuple[list[str], list[dict[str, Any]], list[str]]
Pass = Callable[[nn.Module, Tensor], None]


def lm_passes(amp_dtype: torch.dtype | None = None) -> tuple[Pass, Pass]:
    """(forward, forward + backward) of an LM ``model(tokens) -> (logits, aux)`` on ids (B, T + 1)."""

    def amp(ids: Tensor) -> contextlib.AbstractContextManager:
        on = amp_dtype is not None and ids.device.type == "cuda"
        return torch.autocast("cuda", dtype=amp_dtype) if on else contextlib.nullcontext()

    def forward(model: nn.Module, ids: Tensor) -> None:
        with torch.no_grad(), amp(ids):
            model(ids[:, :-1])  # (B, T, V)

    def forward_backward(model: nn.Module, ids: Tensor) -> None:
        for p in model.parameters():
            p.grad = None  # zero_grad(set_to_none=True): gradient buffers are allocated inside the pass
        with amp(ids):
            logits, _ = model(ids[:, :-1])  # (B, T, V)
        loss = F.cross_entropy(logits.flatten(0, 1).float(), ids[:, 1:].flatten())  # (B T, V) vs (B T,)
        loss.backward()

    return forward, forward_backward


def measure_models(models: dict[str, nn.Module], ids: Tensor, warmup: int, trials: int,
                   amp_dtype: torch.dtype | None = None) -> dict[str, dict[str, Any]]:
    """Per model: median wall and process-CPU seconds of both passes (alternated), the per-trial times
    (``<pass>_walls``, ``<pass>_cpus``: lists in trial order, trial i of every model timed in the same round) and
    the peak memory (MB).

    Models and ids must be on the same device. Peak memory is measured with one model at a time on the device
    (the others wait on the CPU), so a model's peak does not include the other models' parameters.
    """
    forward, forward_backward = lm_passes(amp_dtype)
    out: dict[str, dict[str, Any]] = {name: {} for name in models}
    for key, fn, train in (("fwd", forward, False), ("fwdbwd", forward_backward, True)):
        for m in models.values():
            m.train(train)
        times = measure_alternating(models, ids, fn, warmup, trials)
        for name, (wall, cpu) in times.items():
            out[name][f"{key}_wall"] = statistics.median(wall)
            out[name][f"{key}_cpu"] = statistics.median(cpu)
            out[name][f"{key}_walls"], out[name][f"{key}_cpus"] = list(wall), list(cpu)
    for m in models.values():  # drop the gradients of the timed passes before measuring memory
        m.zero_grad(set_to_none=True)
    device = ids.device
    if device.type == "cuda":
        for m in models.values():
            m.to("cpu")
    for name, m in models.items():
        m.to(device)
        for key, fn, train in (("fwd", forward, False), ("fwdbwd", forward_backward, True)):
            m.train(train)
            out[name][f"{key}_mb"] = peak_memory_mb(fn, m, ids)
        m.zero_grad(set_to_none=True)
        if device.type == "cuda":
            m.to("cpu")
    return out


def build_model(experiment: str, overrides: list[str], compose_budget: str, vocab: int) -> nn.Module:
    """The run's model: ``experiment`` + ``overrides`` composed at ``compose_budget``, at vocabulary ``vocab``."""
    cfg = compose_run([f"experiment={experiment}", f"budget={compose_budget}", *overrides])
    return instantiate(cfg.model, vocab_size=int(vocab))


def trial_ratios(base: list[float], value: list[float]) -> SeedStat:
    """Rel per timed trial: Standard's time over the variant's in the same alternation round (ratio of times =
    ratio of tok/s, variant over Standard), as mean ± std over the trials."""
    return SeedStat.of(paired_ratios(base, value), 3, show_n=True)


def coupledqk_table10(out_dir: Path, budget: str, results_dir: Path, experiment: str, rows: list[dict[str, Any]],
                      baseline: str, vocab: int, batch: int, seq: int, warmup: int, trials: int,
                      compose_budget: str = "paper", device: str = "auto", amp_dtype: str | None = None,
                      threads: int | None = None, seed: int = 0, paper_setting: str = "") -> Table:
    """One row per ``rows`` entry (``label``, ``overrides``, optional ``paper: {fwd_tok_s, fwd_rel,
    fwdbwd_tok_s, fwdbwd_rel, peak_mb}``); ratios are relative to the row labelled ``baseline``.

    ``device`` ``auto`` picks CUDA when visible; ``threads`` sets torch's intra-op threads for the build only;
    ``amp_dtype`` (e.g. ``float16``) is the CUDA autocast dtype. ``out_dir`` and ``results_dir`` are unused.
    """
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    labels = [r["label"] for r in rows]
    if baseline not in labels:
        raise ValueError(f"baseline {baseline!r} is not a row label; rows: {labels}")
    dtype = getattr(torch, amp_dtype) if amp_dtype else None
    threads_before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        models = {}
        for r in rows:
            torch.manual_seed(seed)
            models[r["label"]] = build_model(experiment, list(r.get("overrides", [])), compose_budget,
                                             vocab).to(device)
        n_params = {k: sum(p.numel() for p in m.parameters()) for k, m in models.items()}
        ids = torch.randint(0, int(vocab), (batch, seq + 1), generator=torch.Generator().manual_seed(seed))
        res = measure_models(models, ids.to(device), warmup, trials, dtype)  # ids: (B, T + 1)
        used_threads = torch.get_num_threads()
    finally:
        torch.set_num_threads(threads_before)
    del models
    cpu_times = device == "cpu"  # process-CPU time means nothing for asynchronous CUDA kernels
    base, n_tok = res[baseline], batch * seq
    base_paper = next(r.get("paper") or {} for r in rows if r["label"] == baseline)
    table = []
    for r in rows:
        m, p = res[r["label"]], r.get("paper") or {}
        table.append({
            "Attention": r["label"], "Params": n_params[r["label"]],
            "Fwd tok/s": round(n_tok / m["fwd_wall"]), "Fwd Rel": trial_ratios(base["fwd_walls"], m["fwd_walls"]),
            "Fwd Rel (CPU time)": trial_ratios(base["fwd_cpus"], m["fwd_cpus"]) if cpu_times else None,
            "Fwd tok/s (paper)": p.get("fwd_tok_s"), "Fwd Rel (paper)": p.get("fwd_rel"),
            "Fwd+Bwd tok/s": round(n_tok / m["fwdbwd_wall"]),
            "Fwd+Bwd Rel": trial_ratios(base["fwdbwd_walls"], m["fwdbwd_walls"]),
            "Fwd+Bwd Rel (CPU time)": trial_ratios(base["fwdbwd_cpus"], m["fwdbwd_cpus"]) if cpu_times else None,
            "Fwd+Bwd tok/s (paper)": p.get("fwdbwd_tok_s"), "Fwd+Bwd Rel (paper)": p.get("fwdbwd_rel"),
            "Peak MB": round(m["fwdbwd_mb"]), "Peak ×": round(m["fwdbwd_mb"] / base["fwdbwd_mb"], 4),
            "Peak MB (paper)": p.get("peak_mb"),
            "Peak × (paper)": (round(p["peak_mb"] / base_paper["peak_mb"], 4)
                               if "peak_mb" in p and "peak_mb" in base_paper else None),
            "Fwd peak MB": round(m["fwd_mb"]),
        })
    amp_text = f"autocast {amp_dtype}" if dtype is not None and device == "cuda" else "fp32"
    notes = [f"**Protocol:** the whole GPT (`experiment={experiment}` composed at budget={compose_budget}, "
             f"vocabulary {int(vocab):,}), batch {batch} x sequence {seq} of random ids; device `{device}`, "
             f"{used_threads} torch thread(s), {amp_text}; {warmup} warm-up and {trials} timed passes per model "
             f"and pass, the {len(rows)} models alternated trial by trial in one process; tok/s from the median. "
             f"Paper: {paper_setting}.",
             "**Rel** = the variant's tok/s / Standard's: Standard's wall time over the variant's in the same "
             f"trial, mean ± std over the {trials} timed trials (n = trials: repeated measurements on this machine, "
             "not seeds); `(CPU time)`: the same of process-CPU times, the steadier one on a shared CPU. "
             "**Fwd+Bwd** = LM cross-entropy forward and backward to every parameter, no optimizer step. "
             "**Peak MB** = peak of the forward+backward pass "
             "with the model alone on the device (parameters, ids, activations, gradients; no optimizer state); "
             "the paper does not say what its peak covers. `Peak ×` = ours / Standard's."]
    for r in (r for r in table if r["Attention"] != baseline):
        notes.append(f"**{r['Attention']}:** fwd Rel {r['Fwd Rel'].mean:.2f} (paper {_opt(r['Fwd Rel (paper)'])}), "
                     f"fwd+bwd Rel {r['Fwd+Bwd Rel'].mean:.2f} (paper {_opt(r['Fwd+Bwd Rel (paper)'])}), peak memory "
                     f"{r['Peak ×']:.2f}x Standard (paper {_opt(r['Peak × (paper)'])}x)")
    return list(table[0]), table, notes


def _opt(x: float | None) -> str:
    return "—" if x is None else f"{x:.2f}"
