"""Model side of the copy-depth decomposition (fsn §4.3 and App. C; Tables 4 and 5, Figures 1 and 4).

:mod:`oscrepro.papers.fsn.copy_depth` labels tokens and computes margins from per-token cross-entropies; this module
produces those cross-entropies from trained run records:

1. :func:`oscrepro.tables.runs.load_run` rebuilds a run's backbone from ``<run_dir>/config.yaml`` (on the
   reference's data module) and loads the weights of ``checkpoints/last.ckpt``;
2. :func:`eval_slices` takes the validation windows *in loader order* (``eval_chunks``: stride 128, T + 1
   characters each) and selects the App. C standard slice (first ``n_standard`` windows) and deep-copy-enriched
   slice (``n_enriched`` windows chosen from the labels alone, before any model is run);
3. :func:`token_ce` scores every target of those windows (nats, (N, T)), exactly the terms whose mean is the
   task's ``val/loss`` (tested against the validation loader);
4. :func:`copy_depth_battery` forms the paired differences against a reference (Table 4: one reference run;
   Table 5: the per-token mean over several reference runs), bins them and bootstraps window-cluster CIs.

Every evaluated run must share the reference's data configuration (corpus, split, window length, strides,
``max_chars``): "every model is evaluated on identical tokens" (App. C); a mismatch raises.

Choices and known deviations (also in the report):
  * Checkpoint: the paper evaluates each seed at its best-validation epoch; the run records keep only
    ``last.ckpt`` (final epoch), so margins are at the final epoch. The best epoch is read from history.csv and
    reported beside each row so the difference is visible.
  * Reference: ``mode="best"`` picks the reference run with the lowest final ``val/loss`` (Table 4: "the
    converged fifty-epoch transformer baseline", the best of its seeds); ``mode="mean"`` averages per-token CE
    over the reference runs (Table 5: "the mean over the three transformer code seeds").
  * Per-token CE is cached as ``<run_dir>/eval/token_ce_<key>.npy``, keyed by the checkpoint (size, mtime) and the
    exact window contents, so rebuilding a table does not rescore unchanged checkpoints.

Built by the engine: ``python -m oscrepro.table fsn/table4`` (and ``fsn/table5``).
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from omegaconf import DictConfig, OmegaConf
from torch import nn

from oscrepro.data.integrity import instantiate_data
from oscrepro.papers.fsn.copy_depth import (
    DEPTH_BINS,
    BinMargin,
    bin_margins,
    delta_bits,
    evaluation_slices,
)
from oscrepro.runs.record import LOCATION_KEYS, RunRecord
from oscrepro.tables.runs import LoadedRun, load_run

# loader settings and where the copy lives (the run identity's location keys) do not change which tokens are scored;
# the records' data fingerprints (status.json) are compared instead of the location
DATA_KEYS_IGNORED = ("batch_size", "num_workers", *(k.split(".", 1)[1] for k in LOCATION_KEYS if k.startswith("data.")))


def data_key(cfg: DictConfig) -> str:
    """The part of a run's data config that fixes the scored tokens (loader settings dropped), as JSON."""
    data = OmegaConf.to_container(cfg.data, resolve=True)
    return json.dumps({k: v for k, v in data.items() if k not in DATA_KEYS_IGNORED}, sort_keys=True)


@torch.no_grad()
def token_ce(model: nn.Module, chunks: np.ndarray, batch_size: int = 64,
             device: str | torch.device = "cpu") -> np.ndarray:
    """Per-target cross-entropy in nats, (N, T) float32, of (N, T + 1) window chunks (x = c[:-1], y = c[1:])."""
    n, t1 = chunks.shape
    out = np.empty((n, t1 - 1), dtype=np.float32)
    was_training = model.training
    model.eval()
    for s in range(0, n, batch_size):
        c = torch.from_numpy(np.ascontiguousarray(chunks[s : s + batch_size]).astype(np.int64)).to(device)
        logits, _ = model(c[:, :-1])  # (b, T, V)
        ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), c[:, 1:].reshape(-1), reduction="none")
        out[s : s + c.shape[0]] = ce.view(c.shape[0], -1).cpu().numpy()
    model.train(was_training)
    return out


def eval_slices(datamodule: Any, n_standard: int = 1024, n_enriched: int = 192, cap: int = 32) -> dict[str, Any]:
    """App. C slices of the validation windows in loader order: indices, chunks (n, T+1) and labels (n, T)."""
    starts, chunks = datamodule.eval_chunks("val")
    if len(starts) == 0:
        raise ValueError("the validation split has no complete window: raise data.max_chars or lower data.seq_len")
    sl = evaluation_slices(starts, chunks, n_standard=n_standard, n_enriched=n_enriched, cap=cap)
    return {**sl, "chunks_standard": chunks[sl["standard"]], "chunks_enriched": chunks[sl["enriched"]]}


def cached_token_ce(run: LoadedRun, chunks: np.ndarray, batch_size: int = 64,
                    device: str | torch.device = "cpu", cache: bool = True) -> np.ndarray:
    """:func:`token_ce` with the on-disk cache described in the module docstring."""
    ckpt = (run.run_dir / "checkpoints" / "last.ckpt").stat()
    h = hashlib.sha256(f"{ckpt.st_size}:{ckpt.st_mtime_ns}:{chunks.shape}".encode())
    h.update(np.ascontiguousarray(chunks).tobytes())
    path = run.run_dir / "eval" / f"token_ce_{h.hexdigest()[:16]}.npy"
    if cache and path.exists():
        return np.load(path)
    ce = token_ce(run.model.to(device), chunks, batch_size, device)
    if cache:
        path.parent.mkdir(parents=True, exist_ok=True)
        np.save(path, ce)
    return ce


def best_epoch(run_dir: Path, metric: str = "val/loss") -> tuple[int | None, float]:
    """(epoch, value) of the lowest ``metric`` in history.csv, (None, nan) without history."""
    path = Path(run_dir) / "history.csv"
    if not path.exists():
        return None, math.nan
    vals = [(int(r["epoch"]), float(r[metric])) for r in csv.DictReader(open(path)) if r.get(metric)]
    return min(vals, key=lambda e: e[1]) if vals else (None, math.nan)


def final_metric(run_dir: Path, key: str = "val/loss") -> float:
    path = Path(run_dir) / "metrics.json"
    return float(json.loads(path.read_text()).get(key, math.nan)) if path.exists() else math.nan


@dataclass
class Battery:
    """Result of :func:`copy_depth_battery`."""

    families: dict[str, list[list[BinMargin]]]  # family -> per seed -> per bin
    deltas: dict[str, list[dict[str, np.ndarray]]]  # family -> per seed -> {"standard", "enriched"} (n, T) bits
    depth: dict[str, np.ndarray]  # {"standard", "enriched"} labels (n, T)
    runs: dict[str, list[Path]]
    reference: list[Path]
    n_windows: dict[str, int]
    source: str


def copy_depth_battery(ref_dirs: list[Path], families: dict[str, list[Path]], mode: str = "best",
                       n_standard: int = 1024, n_enriched: int = 192, n_resamples: int = 4000, seed: int = 0,
                       cap: int = 32, batch_size: int = 64, device: str = "auto",
                       cache: bool = True) -> Battery:
    """Tables 4/5 over run records: margins of every run of every family against the reference.

    ``mode``: ``best`` (the reference run with the lowest final val/loss) or ``mean`` (per-token mean CE over
    all ``ref_dirs``). Raises if any run was trained on different tokens than the reference.
    """
    if mode not in ("best", "mean"):
        raise ValueError(f"reference mode must be 'best' or 'mean', got {mode!r}")
    if not ref_dirs:
        raise ValueError("no reference run")
    dev = torch.device("cuda" if device == "auto" and torch.cuda.is_available() else
                       ("cpu" if device == "auto" else device))
    refs = [Path(r) for r in ref_dirs]
    if mode == "best":
        refs = [min(refs, key=final_metric)]
    ref0 = OmegaConf.load(refs[0] / "config.yaml")
    key = data_key(ref0)
    family_runs = [Path(p) for runs in families.values() for p in runs]
    prints = {RunRecord(Path(p)).status().get("data_fingerprint") for p in [*ref_dirs, *family_runs]} - {None}
    if len(prints) > 1:
        raise ValueError(f"the runs were trained on data with different fingerprints {sorted(prints)} "
                         "(App. C: every model is evaluated on identical tokens)")
    for path in [*refs, *family_runs]:
        if data_key(OmegaConf.load(Path(path) / "config.yaml")) != key:
            raise ValueError(f"{path} was trained/evaluated on other data than the reference {refs[0]} "
                             "(App. C: every model is evaluated on identical tokens)")
    datamodule = instantiate_data(ref0.data)[0]
    datamodule.setup("fit")
    sl = eval_slices(datamodule, n_standard, n_enriched, cap)
    parts = ("standard", "enriched")

    def score(path: Path) -> dict[str, np.ndarray]:
        run = load_run(path, require_ok=False, datamodule=datamodule)
        return {p: cached_token_ce(run, sl[f"chunks_{p}"], batch_size, dev, cache) for p in parts}

    ref_scores = [score(r) for r in refs]
    ref_ce = {p: np.mean([s[p] for s in ref_scores], axis=0) for p in parts}
    out_fam: dict[str, list[list[BinMargin]]] = {}
    out_delta: dict[str, list[dict[str, np.ndarray]]] = {}
    for name, runs in families.items():
        out_fam[name], out_delta[name] = [], []
        for path in runs:
            ce = score(Path(path))
            d = {p: delta_bits(ce[p], ref_ce[p]) for p in parts}
            out_delta[name].append(d)
            with warnings.catch_warnings():  # bins without tokens give nan margins (rendered as such)
                warnings.simplefilter("ignore", RuntimeWarning)
                out_fam[name].append(bin_margins(d["standard"], sl["depth_standard"], d["enriched"],
                                                 sl["depth_enriched"], DEPTH_BINS, n_resamples=n_resamples,
                                                 seed=seed))
    return Battery(out_fam, out_delta, {p: sl[f"depth_{p}"] for p in parts},
                   {k: [Path(p) for p in v] for k, v in families.items()}, refs,
                   {p: int(sl[p].size) for p in parts}, datamodule.source)

