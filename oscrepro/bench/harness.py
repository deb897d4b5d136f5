"""Single-block benchmark: any ``conf/attention`` mechanism vs softmax, both inside ``TransformerBlock``.

Protocol of the ssa paper (Sec. IV.1): one block, D = 512, H = 8, d_ff = 4D, random inputs, warm-up
iterations then timed trials (paper: 10 / 50), forward throughput (K tokens/s), forward latency (ms) and
peak memory (MB). We add forward+backward (loss = sum of outputs, parameter gradients) because training
cost is what matters for a mechanism meant to replace attention. The baseline and the candidate are timed
in alternation within one process, so background load hits both equally; ratios use the median trial,
of wall time and of process CPU time (with one thread on a shared machine, CPU time is the steadier one).

Peak memory:
  * CUDA: ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats`` (includes parameters and input).
  * CPU: torch has no CPU allocator statistics, so one extra (untimed) pass runs under ``torch.profiler`` with
    ``profile_memory=True``; every CPU allocation/free made through torch's allocator is then reported with
    the running total of live bytes (``total_allocated``). Peak = max running total minus the total before
    the pass, plus the bytes of the parameters and the input that were live before it (as CUDA counts them).
    Memory that bypasses torch's allocator (MKL/oneDNN scratch, the Python heap) is not counted, for either model.
"""

from __future__ import annotations

import statistics
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import hydra
import torch
from omegaconf import OmegaConf
from torch import Tensor, nn

from oscrepro.attention.softmax import SoftmaxAttention
from oscrepro.models.block import TransformerBlock

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"
PAPER_BATCH = ((512, 8), (1024, 4), (2048, 2), (4096, 1))  # ssa paper Sec. IV.1: (max N, batch)


def paper_batch(seq_len: int) -> int:
    """Batch size the ssa paper used at sequence length N (B = 8 for N <= 512, then 4, 2, 1)."""
    for max_len, batch in PAPER_BATCH:
        if seq_len <= max_len:
            return batch
    return 1


def attention_factory(name: str, overrides: dict[str, Any] | None = None) -> Callable[..., nn.Module]:
    """Partial constructor from ``conf/attention/<name>.yaml`` (plus overrides), as the backbones receive it."""
    cfg = OmegaConf.load(CONF_DIR / "attention" / f"{name}.yaml")
    if overrides:
        cfg = OmegaConf.merge(cfg, overrides)
    return hydra.utils.instantiate(cfg)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _fwd(block: nn.Module, x: Tensor) -> None:
    with torch.no_grad():
        block(x)


def _fwd_bwd(block: nn.Module, x: Tensor) -> None:
    for p in block.parameters():
        p.grad = None  # zero_grad(set_to_none=True): gradient buffers are allocated inside the step
    y, _ = block(x)
    y.sum().backward()


def _timed(fn: Callable[[nn.Module, Tensor], None], block: nn.Module, x: Tensor) -> tuple[float, float]:
    """(wall seconds, process CPU seconds) of one call."""
    _sync(x.device)
    t0, c0 = time.perf_counter(), time.process_time()
    fn(block, x)
    _sync(x.device)
    return time.perf_counter() - t0, time.process_time() - c0


def peak_memory_mb(fn: Callable[[nn.Module, Tensor], None], block: nn.Module, x: Tensor) -> float:
    """Peak memory (MB) of one call ``fn(block, x)``; method per device in the module docstring.

    ``block`` is any module (one block here, a whole LM in ``oscrepro.papers.coupledqk.overhead``) and ``x`` its
    input (activations or token ids): both count as live before the call.
    """
    if x.device.type == "cuda":
        _sync(x.device)
        torch.cuda.reset_peak_memory_stats(x.device)
        fn(block, x)
        _sync(x.device)
        return torch.cuda.max_memory_allocated(x.device) / 2**20
    from torch._C._profiler import _EventType
    from torch.profiler import ProfilerActivity, profile

    static = sum(p.numel() * p.element_size() for p in block.parameters()) + x.numel() * x.element_size()
    for p in block.parameters():  # an earlier pass's gradients are freed before the profiled pass, not inside it:
        p.grad = None  # the profiler cannot size a block allocated before it started (c10 warns "unknown size")
    with warnings.catch_warnings():  # the profiler warns that it keeps only the last cycle: that is all we use
        warnings.simplefilter("ignore", UserWarning)
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            fn(block, x)
    events, stack = [], list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:  # flatten the event tree, keep allocation events
        node = stack.pop()
        stack.extend(node.children)
        if node.tag == _EventType.Allocation and node.extra_fields.device.type == "cpu":
            events.append((node.start_time_ns, node.extra_fields.alloc_size, node.extra_fields.total_allocated))
    if not events:
        return static / 2**20
    events.sort()
    before = events[0][2] - events[0][1]  # live tracked bytes just before the first event of the pass
    return (static + max(total for _, _, total in events) - before) / 2**20


def paired_ratios(numerator: list[float], denominator: list[float], what: str = "trial") -> list[float]:
    """``numerator[i] / denominator[i]`` per round ``i`` of :func:`measure_alternating` (the two timed back to back
    in the same round), so load that drifts over a build cancels in each ratio. Unequal counts raise ValueError
    ("<what> counts differ"): a ratio of unpaired times would not cancel anything."""
    if len(numerator) != len(denominator):
        raise ValueError(f"{what} counts differ: {len(numerator)} vs {len(denominator)}")
    return [a / b for a, b in zip(numerator, denominator, strict=True)]


def measure_alternating(blocks: dict[str, nn.Module], x: Tensor, fn: Callable[[nn.Module, Tensor], None],
                        warmup: int, trials: int) -> dict[str, tuple[list[float], list[float]]]:
    """Alternate the modules trial by trial so background load affects all of them equally.

    ``blocks`` maps names to modules (blocks here; whole LMs in ``oscrepro.papers.coupledqk.overhead``), each
    called as ``fn(module, x)``. Returns per module (wall seconds, process CPU seconds) per trial. On a shared
    machine with one thread the CPU time excludes the time this process waited for the core, so its ratio is the
    steadier one.
    """
    for block in blocks.values():
        for _ in range(warmup):
            fn(block, x)
    times: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in blocks}
    for _ in range(trials):
        for name, block in blocks.items():
            wall, cpu = _timed(fn, block, x)
            times[name][0].append(wall)
            times[name][1].append(cpu)
    return times


def run_bench(attention_cfg_name: str, seq_lens: list[int], batch: int, d_model: int, n_heads: int, warmup: int,
              trials: int, device: str, *, use_paper_batch: bool = False, overrides: dict[str, Any] | None = None,
              backward: bool = True, seed: int = 0, keep_trials: bool = False) -> list[dict[str, Any]]:
    """Benchmark ``conf/attention/<attention_cfg_name>.yaml`` in a TransformerBlock against the softmax block.

    One row per sequence length with, for ``base`` (softmax) and ``cand`` (the named mechanism): forward
    K tokens/s (mean time, as the paper), forward latency mean/std/median (ms), forward+backward ms and
    K tokens/s, median process CPU times, peak memory (MB) for forward and forward+backward, parameter
    counts, and the ratios cand/base of median wall times, of median CPU times and of peak memories
    (time ratio > 1: the candidate is slower).
    ``keep_trials`` adds ``trial_times`` to each row: ``{"fwd": ..., "fwdbwd": ...}``, each pass as
    :func:`measure_alternating` returns it (per model, wall and process-CPU seconds in trial order; trial i of
    ``base`` and of ``cand`` were timed back to back in alternation round i), for callers that pair the trials.
    Inductor's on-disk FX-graph cache is bypassed: a cached CPU kernel keeps the OpenMP thread count of the
    process that compiled it, which would falsify a ``threads=1`` measurement.
    """
    with torch._inductor.config.patch(fx_graph_cache=False):
        return _run_bench(attention_cfg_name, seq_lens, batch, d_model, n_heads, warmup, trials, device,
                          use_paper_batch, overrides, backward, seed, keep_trials)


def _run_bench(attention_cfg_name: str, seq_lens: list[int], batch: int, d_model: int, n_heads: int, warmup: int,
               trials: int, device: str, use_paper_batch: bool, overrides: dict[str, Any] | None, backward: bool,
               seed: int, keep_trials: bool = False) -> list[dict[str, Any]]:
    dev = torch.device(device)
    factory = attention_factory(attention_cfg_name, overrides)
    rows = []
    for n in seq_lens:
        b = paper_batch(n) if use_paper_batch else batch
        torch.manual_seed(seed)
        blocks = {"base": TransformerBlock(d_model, n_heads, 4 * d_model, attention=SoftmaxAttention).to(dev),
                  "cand": TransformerBlock(d_model, n_heads, 4 * d_model, attention=factory).to(dev)}
        x = torch.randn(b, n, d_model, generator=torch.Generator().manual_seed(seed)).to(dev)  # (B, N, D)
        row: dict[str, Any] = {"attention": attention_cfg_name, "seq_len": n, "batch": b, "d_model": d_model,
                               "n_heads": n_heads, "device": device, "warmup": warmup, "trials": trials}
        for name, block in blocks.items():
            row[f"params_{name}"] = sum(p.numel() for p in block.parameters())
            block.eval()
        fwd = measure_alternating(blocks, x, _fwd, warmup, trials)
        for name in blocks:
            wall, cpu = fwd[name]
            row[f"fwd_ktok_s_{name}"] = b * n / statistics.fmean(wall) / 1e3
            row[f"fwd_ms_{name}"] = 1e3 * statistics.fmean(wall)
            row[f"fwd_ms_std_{name}"] = 1e3 * statistics.pstdev(wall)
            row[f"fwd_ms_median_{name}"] = 1e3 * statistics.median(wall)
            row[f"fwd_cpu_ms_median_{name}"] = 1e3 * statistics.median(cpu)
            row[f"mem_fwd_mb_{name}"] = peak_memory_mb(_fwd, blocks[name], x)
        row["ratio_fwd_time"] = row["fwd_ms_median_cand"] / row["fwd_ms_median_base"]
        row["ratio_fwd_cpu_time"] = row["fwd_cpu_ms_median_cand"] / row["fwd_cpu_ms_median_base"]
        row["ratio_mem_fwd"] = row["mem_fwd_mb_cand"] / row["mem_fwd_mb_base"]
        if backward:
            for block in blocks.values():
                block.train()
            fb = measure_alternating(blocks, x, _fwd_bwd, warmup, trials)
            for name in blocks:
                wall, cpu = fb[name]
                row[f"fwdbwd_ms_median_{name}"] = 1e3 * statistics.median(wall)
                row[f"fwdbwd_cpu_ms_median_{name}"] = 1e3 * statistics.median(cpu)
                row[f"fwdbwd_ktok_s_{name}"] = b * n / statistics.fmean(wall) / 1e3
                row[f"mem_fwdbwd_mb_{name}"] = peak_memory_mb(_fwd_bwd, blocks[name], x)
            row["ratio_fwdbwd_time"] = row["fwdbwd_ms_median_cand"] / row["fwdbwd_ms_median_base"]
            row["ratio_fwdbwd_cpu_time"] = row["fwdbwd_cpu_ms_median_cand"] / row["fwdbwd_cpu_ms_median_base"]
            row["ratio_mem_fwdbwd"] = row["mem_fwdbwd_mb_cand"] / row["mem_fwdbwd_mb_base"]
        if keep_trials:
            row["trial_times"] = {"fwd": fwd, **({"fwdbwd": fb} if backward else {})}
        rows.append(row)
        del blocks, x
    return rows


MD_COLUMNS = (  # (csv field, markdown header)
    ("seq_len", "N"), ("batch", "B"),
    ("fwd_ktok_s_base", "softmax fwd Ktok/s"), ("fwd_ktok_s_cand", "cand fwd Ktok/s"), ("ratio_fwd_time", "fwd time ×"),
    ("ratio_fwd_cpu_time", "fwd CPU-time ×"),
    ("fwdbwd_ms_median_base", "softmax f+b ms"), ("fwdbwd_ms_median_cand", "cand f+b ms"),
    ("ratio_fwdbwd_time", "f+b time ×"), ("ratio_fwdbwd_cpu_time", "f+b CPU-time ×"),
    ("mem_fwd_mb_base", "softmax fwd MB"), ("mem_fwd_mb_cand", "cand fwd MB"), ("ratio_mem_fwd", "fwd mem ×"),
    ("mem_fwdbwd_mb_base", "softmax f+b MB"), ("mem_fwdbwd_mb_cand", "cand f+b MB"), ("ratio_mem_fwdbwd", "f+b mem ×"),
)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.2f}" if abs(value) < 100 else f"{value:.0f}"
    return "—" if value is None else str(value)


def render_markdown(rows: list[dict[str, Any]], header: list[str]) -> str:
    """Markdown table of ``run_bench`` rows under ``header`` lines (each rendered as a '> ' quote line)."""
    cols = [(k, h) for k, h in MD_COLUMNS if any(k in r for r in rows)]
    lines = [f"> {h}" for h in header] + ["", "| " + " | ".join(h for _, h in cols) + " |",
                                          "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(_fmt(r.get(k)) for k, _ in cols) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def device_line() -> str:
    """The provenance line every benchmark report carries: device, commit, date, torch."""
    from oscrepro.utils.provenance import provenance

    prov = provenance()
    return (f"- **Device:** {prov['device']}; **commit** `{prov['git_commit']}`; **date** {prov['date']}; "
            f"torch {prov['torch']}")


def emit(text: str, out: Path | None) -> None:
    """Print a benchmark report and, with ``out``, write it there (creating the folder)."""
    print(text)
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)


def write_csv(rows: list[dict[str, Any]], path: Path, header: list[str]) -> None:
    """CSV of every field of every row, preceded by ``# ``-commented header lines."""
    import csv

    fields = list(dict.fromkeys(k for r in rows for k in r))
    with path.open("w", newline="") as fh:
        fh.writelines(f"# {h}\n" for h in header)
        writer = csv.DictWriter(fh, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
