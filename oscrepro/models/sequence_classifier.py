"""A pretrained causal LM + linear head for GLUE fine-tuning (coupledqk Sec. 3.4, Table 7).

"Each pretrained checkpoint is fine-tuned with a linear classification head": the head reads the backbone's
final-norm hidden state at the last real token of each row, position ``lengths - 1``. The backbone is causal, so
that state has seen the whole input and none of the right padding after it (the paper is silent on pooling; a
causal LM has no [CLS], and its last token is the only position that sees everything).

Which LM is fine-tuned is part of the config: ``model.pretrained_run`` names the run directory of a finished LM
run (``<runs_dir>/<experiment>/<run-id>``), rebuilt from that run's own ``config.yaml`` and checkpoint by
:func:`pretrained_backbone`. ``pretrained_run: null`` builds ``backbone`` from scratch instead (random init, for
tests and as a no-pretraining control); :attr:`SequenceClassifier.init_from` says which.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf
from torch import Tensor, nn

from oscrepro.attention.base import VECTOR
from oscrepro.data.base import model_dims
from oscrepro.data.integrity import instantiate_data
from oscrepro.runs.compose import RunNotUsableError
from oscrepro.runs.lookup import model_state_dict
from oscrepro.runs.record import RunRecord, load_record_config

CHECKPOINTS = ("last", "best")


def pretrained_checkpoint(run_dir: str | Path, checkpoint: str = "last") -> Path:
    """The checkpoint file of a run directory: ``checkpoints/last.ckpt``, or for ``"best"`` the file Lightning's
    ModelCheckpoint recorded as best in it (``train.py`` monitors nothing, so there it is the newest epoch)."""
    if checkpoint not in CHECKPOINTS:
        raise ValueError(f"checkpoint must be one of {CHECKPOINTS}, got {checkpoint!r}")
    rdir = Path(run_dir).expanduser()
    if not rdir.is_dir():
        raise RunNotUsableError(f"pretrained run directory {rdir} does not exist: model.pretrained_run must be the "
                                "run dir of a finished LM run (<runs_dir>/<experiment>/<run-id>), or null")
    if not (rdir / "config.yaml").exists():
        raise RunNotUsableError(f"{rdir} is not a run record (no config.yaml)")
    last = rdir / "checkpoints" / "last.ckpt"
    if not last.exists():
        raise RunNotUsableError(f"run {rdir} has no checkpoints/last.ckpt: is it a finished run?")
    if checkpoint == "last":
        return last
    ckpt = torch.load(last, map_location="cpu", weights_only=True, mmap=True)  # tensors stay on disk
    for state in (ckpt.get("callbacks") or {}).values():
        if isinstance(state, dict) and state.get("best_model_path"):
            best = rdir / "checkpoints" / Path(state["best_model_path"]).name  # recorded absolute: the run may move
            if not best.exists():
                raise RunNotUsableError(f"run {rdir}: best checkpoint {best.name} is gone")
            return best
    raise RunNotUsableError(f"run {rdir}: last.ckpt records no best checkpoint (no ModelCheckpoint state)")


def pretrained_backbone(run_dir: str | Path, *, checkpoint: str = "last", vocab_size: int | None = None,
                        require_ok: bool = True, map_location: str | torch.device = "cpu") -> nn.Module:
    """Rebuild the LM of a finished run (its ``config.yaml`` model) and load its weights strictly, safely
    (``weights_only=True``).

    ``vocab_size``: the fine-tuning data's vocabulary (GPT-2 BPE, 50,257); a checkpoint trained with another one
    fails to load. ``None`` sets up the run's own data module for its dims instead, as ``load_run`` does.
    ``require_ok``: refuse runs whose status is not ``ok`` (running, failed, or diverged before the checkpoint).
    """
    ckpt = pretrained_checkpoint(run_dir, checkpoint)
    rdir = Path(run_dir).expanduser()
    status = RunRecord(rdir).status().get("status", "missing")
    if require_ok and status != "ok":
        raise RunNotUsableError(f"pretrained run {rdir} has status {status!r}, not 'ok'")
    cfg = load_record_config(rdir)
    if vocab_size is None:
        dm = instantiate_data(cfg.data)[0]
        dm.setup("fit")
        dims = model_dims(dm)
    else:
        dims = {"vocab_size": int(vocab_size)}
    model = instantiate(cfg.model, **dims)
    try:
        model.load_state_dict(model_state_dict(ckpt, map_location))
    except RuntimeError as e:
        raise RunNotUsableError(f"{ckpt} does not fit the run's model built with {dims} (an LM trained with another "
                                f"tokenizer?):\n{e}") from e
    if not (hasattr(model, "forward_hidden") and hasattr(model, "d_model")):
        raise RunNotUsableError(f"{type(model).__name__} (run {rdir}) has no forward_hidden / d_model: not a "
                                "backbone a classification head can sit on")
    return model.to(map_location)


def _check_attention(rdir: Path, attention: Callable[..., nn.Module] | None) -> None:
    """The config's ``attention`` (it labels the run) must be the mechanism the pretrained run was trained with."""
    if attention is None:
        return
    want = OmegaConf.select(OmegaConf.load(rdir / "config.yaml"), "model.attention._target_")
    if want is None:  # a backbone with its own attention (no attention group)
        return
    func = getattr(attention, "func", attention)
    got = f"{func.__module__}.{func.__qualname__}"
    if got != want:
        raise ValueError(f"attention is {got} but pretrained run {rdir} was trained with {want}: set attention= to "
                         "the run's mechanism, so the fine-tuning run is labelled with what it fine-tunes")


class SequenceClassifier(nn.Module):
    """Causal backbone + dropout + linear head on the hidden state at position ``lengths - 1``."""

    attention_contract: ClassVar[str | None] = VECTOR  # builds each layer's mechanism (oscrepro.attention.base)
    # the mechanism's shapes: those of the random-init backbone it is passed to (a pretrained run brings its own)
    attention_shape: ClassVar[dict[str, str]] = {"d_model": "backbone.d_model", "n_heads": "backbone.n_heads"}

    def __init__(self, n_classes: int, vocab_size: int | None = None, pretrained_run: str | Path | None = None,
                 checkpoint: str = "last", backbone: Callable[..., nn.Module] | None = None,
                 attention: Callable[..., nn.Module] | None = None, dropout: float = 0.0) -> None:
        super().__init__()
        if pretrained_run is not None:
            ckpt = pretrained_checkpoint(pretrained_run, checkpoint)  # a missing run fails here, clearly
            _check_attention(Path(pretrained_run).expanduser(), attention)
            self.backbone = pretrained_backbone(pretrained_run, checkpoint=checkpoint, vocab_size=vocab_size)
            self.init_from = f"pretrained: {ckpt}"
        elif backbone is not None:
            extra = {} if attention is None else {"attention": attention}
            self.backbone = backbone(vocab_size=vocab_size, **extra)
            self.init_from = "random init (pretrained_run=null)"
        else:
            raise ValueError("give pretrained_run (a finished LM run dir) or backbone (random init)")
        self.drop = nn.Dropout(dropout)
        self.head = nn.Linear(self.backbone.d_model, n_classes)
        nn.init.normal_(self.head.weight, std=0.02)  # BERT's classifier init
        nn.init.zeros_(self.head.bias)

    def forward(self, x: Tensor, lengths: Tensor | None = None, need_weights: bool = False, *,
                times: Tensor | None = None) -> tuple[Tensor, list[dict[str, Tensor]]]:
        """x (B, T) right-padded ids, lengths (B,) in 1..T (None: every row is T long) -> (logits (B, C), auxes)."""
        h, auxes = self.backbone.forward_hidden(x, need_weights, times=times)  # (B, T, D), final norm applied
        last = torch.full_like(x[:, 0], x.shape[1] - 1) if lengths is None else lengths - 1  # (B,)
        pooled = h[torch.arange(x.shape[0], device=h.device), last]  # (B, D)
        return self.head(self.drop(pooled)), auxes  # (B, C)
