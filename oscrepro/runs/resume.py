"""Exact resume: what a checkpoint must carry, beyond weights and optimizer, for a resumed run to equal the
uninterrupted one bit for bit (CPU).

A run is checkpointed at each epoch end (after that epoch's validation); killed anywhere in the next epoch, it
resumes from there and replays the epoch. Lightning restores weights, optimizer, scheduler and loop counters, but
two things decided the replayed epoch differently (issue: fqo Table 2 resumed to 95.69 % where the uninterrupted
run reached 96.23 %):

* **the global RNG streams** (torch, numpy, python): dropout masks and torch's ``RandomSampler`` seed draw from
  them. A resumed process starts from ``seed_everything``'s state, not the one the uninterrupted run had reached.
  :class:`RngStateCheckpoint` stores the three states in every checkpoint (as tensors and plain lists, so that
  ``weights_only=True`` loads them) and restores them when Lightning restores callbacks, before the epoch's
  iterator draws anything. Between an epoch-end save and the next epoch's first draw nothing else draws (no
  sanity validation; validation precedes the save), so the restored stream is the one the uninterrupted run had.
* **batch samplers that count their own epochs** (:class:`~oscrepro.data.sva_module.LengthBucketSampler` shuffled
  from ``(seed, epoch)``, epoch = how often it had been iterated, which restarts at 0 in a resumed process). It now
  reads the trainer's epoch from its data module when it is iterated. (Lightning's ``set_epoch`` calls reach a
  loader's sampler, not its batch sampler, and ``on_train_epoch_start`` is skipped for the epoch a run resumes
  into, so neither could tell it.)

With both, a resumed run equals the uninterrupted run (tests/integration/test_exact_resume.py), and the
uninterrupted run itself is unchanged: same draws, same epoch numbers as before. (The intra-op thread count can
change the last bits of a reduction: a resumed run trains at the count its first attempt started with, recorded
in status.json as ``torch_threads``; oscrepro.train.resume_threads.)

A checkpoint also carries the id of the run that wrote it (:class:`RunIdCheckpoint`): a run never resumes from
another run's checkpoint of the same shapes (:func:`check_owner`).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch


def rng_states() -> dict[str, Any]:
    """The torch (CPU and every CUDA device), numpy and python global RNG states, as tensors and plain lists."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    version, internal, gauss_next = random.getstate()
    return {"torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
            "numpy": {"kind": str(kind), "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)), "pos": int(pos),
                      "has_gauss": int(has_gauss), "gauss": float(gauss)},
            "python": {"version": int(version), "internal": list(internal), "gauss_next": gauss_next}}


def set_rng_states(state: dict[str, Any]) -> None:
    """Inverse of :func:`rng_states`."""
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    n = state["numpy"]
    np.random.set_state((n["kind"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["gauss"]))
    p = state["python"]
    random.setstate((p["version"], tuple(p["internal"]), p["gauss_next"]))


class RngStateCheckpoint(L.Callback):
    """Save the global RNG states in every checkpoint; restore them on resume (module docstring)."""

    def state_dict(self) -> dict[str, Any]:
        return rng_states()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        set_rng_states(state_dict)




# Top-level key of every checkpoint a run writes: the id of the run it belongs to (a plain str, so that
# ``weights_only=True`` loads it).
RUN_ID_KEY = "oscrepro_run_id"


class CheckpointOwnerError(ValueError):
    """A run's checkpoint was written by another run, or carries no run id: resuming from it would record another
    run's training under this run's id, so it is refused (one message; nothing is trained or recorded)."""


class RunIdCheckpoint(L.Callback):
    """Write the run's id into every checkpoint (``checkpoint[RUN_ID_KEY]``), so that a resume tells its own
    checkpoint from another run's of the same shapes (:func:`check_owner`, called by train.py before anything is
    written). Lightning's restore of a resumed fit checks it once more, for a resume that bypassed train.py."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule,
                           checkpoint: dict[str, Any]) -> None:
        checkpoint[RUN_ID_KEY] = self.run_id

    def on_load_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule,
                           checkpoint: dict[str, Any]) -> None:
        check_owner(checkpoint, self.run_id, Path(trainer.ckpt_path or "checkpoints/last.ckpt"))


def check_owner(checkpoint: dict[str, Any], run_id: str, path: Path) -> None:
    """Raise :class:`CheckpointOwnerError` unless ``checkpoint`` (read from ``path``) carries ``run_id``: the
    message names both ids and says how to train the run from the start."""
    owner = checkpoint.get(RUN_ID_KEY)
    if owner == run_id:
        return
    whose = f"belongs to run {owner}" if owner else "carries no run id (another run's, or written before run ids)"
    raise CheckpointOwnerError(f"checkpoint {path} is not run {run_id}'s: it {whose}; refusing to resume from it. "
                               f"Delete {path.parent} to train run {run_id} from the start")
