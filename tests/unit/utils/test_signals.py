"""A signal that lands while a checkpoint is saved is handled after the save: ``last.ckpt`` never dangles."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import lightning as L
import pytest
from lightning.pytorch.demos.boring_classes import BoringModel

from oscrepro.utils.callbacks import EpochCheckpoint
from oscrepro.utils.signals import signals_held


class Preempted(Exception):
    """What submitit's USR2 handler amounts to here: training stops where the handler runs."""


@pytest.fixture
def usr2_raises():
    def handler(signum, frame):
        raise Preempted(signum)

    previous = signal.signal(signal.SIGUSR2, handler)
    yield handler
    signal.signal(signal.SIGUSR2, previous)


def test_signals_held_defers_each_signal_to_its_own_handler_once(usr2_raises):
    with pytest.raises(Preempted):
        with signals_held() as held:
            os.kill(os.getpid(), signal.SIGUSR2)
            os.kill(os.getpid(), signal.SIGUSR2)
            assert held == [signal.SIGUSR2]  # recorded, not handled: we are still here
            reached = True
    assert reached
    assert signal.getsignal(signal.SIGUSR2) is usr2_raises


def test_a_signal_between_delete_and_link_leaves_last_ckpt_pointing_at_a_checkpoint(tmp_path: Path, usr2_raises,
                                                                                   monkeypatch):
    # Lightning deletes epoch=0.ckpt, then re-links last.ckpt to epoch=1.ckpt: signal right after the delete
    remove = EpochCheckpoint._remove_checkpoint

    def remove_then_signal(self, trainer, filepath):
        remove(self, trainer, filepath)
        os.kill(os.getpid(), signal.SIGUSR2)

    monkeypatch.setattr(EpochCheckpoint, "_remove_checkpoint", remove_then_signal)
    ckpt = EpochCheckpoint(dirpath=str(tmp_path), save_last="link", save_top_k=1, save_on_train_epoch_end=True)
    trainer = L.Trainer(max_epochs=3, limit_train_batches=2, limit_val_batches=1, callbacks=[ckpt], logger=False,
                        enable_progress_bar=False, enable_model_summary=False, accelerator="cpu")
    with pytest.raises(Preempted):
        trainer.fit(BoringModel())
    last = tmp_path / "last.ckpt"
    assert last.is_symlink() and last.exists(), f"last.ckpt dangles: -> {os.readlink(last)}"
    assert last.resolve().name == "epoch=1-step=4.ckpt"
