"""Load a finished run record back into memory: its config, data module and trained model (eval mode).

A run record (``results/runs/<experiment>/<run-id>/``, written by ``python -m oscrepro.train``) holds the resolved
``config.yaml``, ``status.json``, ``metrics.json`` and the Lightning checkpoint ``checkpoints/last.ckpt`` of the
task (e.g. :class:`~oscrepro.tasks.language_modeling.LanguageModelTask`), whose ``model`` attribute is the backbone.
The task does not save hyperparameters, so the model is rebuilt from ``config.yaml`` exactly as ``train`` builds
it (data module first, for ``vocab_size`` / ``n_features`` / ``n_classes``) and the ``model.*`` entries of the
checkpoint's ``state_dict`` are loaded strictly. Analyses (ODE convergence, ODE inference) start from here.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lightning as L
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from torch import Tensor, nn

CKPT_NAME = "last.ckpt"
MODEL_PREFIX = "model."  # BaseTask stores the backbone as ``self.model``


class RunNotUsableError(RuntimeError):
    """The run record has no checkpoint, or did not finish with status ``ok``."""


def resolve_run(path: str | Path) -> tuple[Path, Path]:
    """Accept a run directory or a checkpoint file; return ``(run_dir, ckpt_path)``.

    A checkpoint inside ``<run>/checkpoints/`` belongs to ``<run>``; any other checkpoint file must sit next to a
    ``config.yaml``.
    """
    p = Path(path).expanduser()
    if p.is_dir():
        run_dir, ckpt = p, p / "checkpoints" / CKPT_NAME
    elif p.is_file():
        ckpt = p
        run_dir = p.parent.parent if p.parent.name == "checkpoints" else p.parent
    else:
        raise RunNotUsableError(f"no run directory or checkpoint at {p}")
    if not (run_dir / "config.yaml").exists():
        raise RunNotUsableError(f"{run_dir} is not a run record (no config.yaml)")
    if not ckpt.exists():
        raise RunNotUsableError(f"run {run_dir} has no checkpoint {ckpt.relative_to(run_dir)}")
    return run_dir, ckpt


def model_state_dict(ckpt_path: Path, map_location: str | torch.device = "cpu") -> dict[str, Tensor]:
    """The backbone's parameters from a Lightning task checkpoint (``model.`` prefix stripped)."""
    ckpt = torch.load(ckpt_path, map_location=map_location, weights_only=True)
    state = ckpt.get("state_dict", ckpt)
    out = {k[len(MODEL_PREFIX) :]: v for k, v in state.items() if k.startswith(MODEL_PREFIX)}
    if not out:
        raise RunNotUsableError(f"{ckpt_path}: no '{MODEL_PREFIX}*' entries in the checkpoint's state_dict")
    return out


@contextmanager
def num_threads(n: int | None) -> Iterator[None]:
    """Run the block with ``torch.set_num_threads(n)`` (``None``: unchanged); restores the previous count.

    Analyses of a run use the run's own ``torch_threads`` (1 by default): the batched ODE integrators issue many
    small ops, which run several times slower with more threads on a shared 2-core CPU.
    """
    before = torch.get_num_threads()
    if n is not None:
        torch.set_num_threads(int(n))
    try:
        yield
    finally:
        torch.set_num_threads(before)


def attention_modules(model: nn.Module) -> list[nn.Module]:
    """The attention module of every block (``block.attn``, TransformerBlock convention), in layer order."""
    return [m.attn for m in model.modules() if isinstance(getattr(m, "attn", None), nn.Module)]


@dataclass
class LoadedRun:
    """A run record in memory. ``model`` is in eval mode; ``datamodule`` has been ``setup``."""

    run_dir: Path
    ckpt_path: Path
    cfg: DictConfig
    datamodule: L.LightningDataModule
    model: nn.Module
    status: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)

    def attention_modules(self) -> list[nn.Module]:
        """The per-layer attention modules, in layer order."""
        return attention_modules(self.model)

    def val_batches(self, max_batches: int | None = None) -> Iterator[tuple[Tensor, ...]]:
        """The validation batches in loader order (no shuffling), at most ``max_batches``."""
        for i, batch in enumerate(self.datamodule.val_dataloader()):
            if max_batches is not None and i >= max_batches:
                return
            yield batch


def first_val_inputs(run: LoadedRun, n: int) -> Tensor:
    """The inputs ``x`` of the first ``n`` validation examples (fewer if the split is smaller): (n, T, ...)."""
    xs, have = [], 0
    for batch in run.val_batches():
        xs.append(batch[0][: n - have])
        have += xs[-1].shape[0]
        if have >= n:
            break
    if not xs:
        raise RunNotUsableError(f"{run.run_dir}: empty validation split")
    return torch.cat(xs)


def load_run(
    path: str | Path,
    *,
    require_ok: bool = True,
    data_overrides: Mapping[str, Any] | None = None,
    map_location: str | torch.device = "cpu",
) -> LoadedRun:
    """Rebuild a run's data module and model from its record and load the trained weights.

    Args:
        path: run directory or checkpoint path.
        require_ok: refuse runs whose ``status.json`` is not ``ok`` (a diverged run's checkpoint is pre-divergence).
        data_overrides: entries of the run's ``data`` config to replace (e.g. ``{"batch_size": 16}``); they change
            the loaders only, never the vocabulary (built from the full train file).
        map_location: where the weights go (the model is moved there too).
    """
    run_dir, ckpt = resolve_run(path)
    status_path, metrics_path = run_dir / "status.json", run_dir / "metrics.json"
    status = json.loads(status_path.read_text()) if status_path.exists() else {}
    if require_ok and status.get("status") != "ok":
        raise RunNotUsableError(f"run {run_dir} has status {status.get('status', 'missing')!r}, not 'ok'")
    cfg = OmegaConf.load(run_dir / "config.yaml")
    data_cfg = OmegaConf.merge(cfg.data, dict(data_overrides or {}))
    datamodule = instantiate(data_cfg)
    datamodule.setup("validate")
    dims = {k: getattr(datamodule, k, None) for k in ("vocab_size", "n_features", "n_classes")}
    model = instantiate(cfg.model, **{k: v for k, v in dims.items() if v is not None})
    model.load_state_dict(model_state_dict(ckpt, map_location))
    model.to(map_location).eval()
    metrics = json.loads(metrics_path.read_text()) if metrics_path.exists() else {}
    return LoadedRun(run_dir, ckpt, cfg, datamodule, model, status, metrics)
