"""A run killed anywhere and resumed gives the uninterrupted run's metrics bit for bit (CPU).

The crash comes in the middle of epoch 1 (after its second batch), so the run resumes from the epoch-0 checkpoint
and must replay epoch 1 exactly: the same batch order (samplers keyed by the epoch, not by how often they were
iterated) and the same random draws (dropout, shuffling: the global RNG states are saved in every checkpoint and
restored on resume). Two data paths: fqo/sva (a length-bucket batch sampler) and osciformer/xor (torch's
RandomSampler over an irregular set, dropout 0.1).
"""

from __future__ import annotations

import pytest

from oscrepro.runs.record import run_dir as run_dir_for
from oscrepro.train import train

CASES = {
    "fqo/sva": ["experiment=fqo/sva", "budget=smoke"],
    "osciformer/xor": ["experiment=osciformer/xor", "budget=smoke"],
}
RUN = ["trainer.max_epochs=3", "trainer.limit_train_batches=4", "trainer.enable_progress_bar=false"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_run_killed_mid_epoch_resumes_to_the_uninterrupted_result(case, compose, tmp_path, monkeypatch):
    import oscrepro.train as train_mod
    from oscrepro.utils.callbacks import EpochWallClock

    class CrashMidEpoch1(EpochWallClock):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            if trainer.current_epoch == 1 and batch_idx == 2:
                raise RuntimeError("simulated SIGKILL in the middle of epoch 1")

    overrides = [*CASES[case], *RUN]
    uninterrupted = train(compose([*overrides, f"paths.results_dir={tmp_path / 'clean'}"]))
    cfg = compose([*overrides, f"paths.results_dir={tmp_path / 'killed'}"])
    monkeypatch.setattr(train_mod, "EpochWallClock", CrashMidEpoch1)
    assert train(cfg)["status"] == "failed"
    assert (run_dir_for(cfg) / "checkpoints" / "last.ckpt").exists()
    monkeypatch.setattr(train_mod, "EpochWallClock", EpochWallClock)
    resumed = train(cfg)
    assert resumed["status"] == "ok" == uninterrupted["status"]
    keys = sorted(k for k in uninterrupted if k.startswith(("val/", "test/")))
    assert keys and {k: resumed[k] for k in keys} == {k: uninterrupted[k] for k in keys}
