"""SequenceClassifier (oscrepro.models.sequence_classifier): the head reads position lengths - 1, right padding
never changes the logits, and a pretrained LM is rebuilt from a run directory (config.yaml + a real Lightning
checkpoint) with its weights intact; a missing or unusable run is a clear error."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import lightning as L
import pytest
import torch
from omegaconf import OmegaConf
from torch import Tensor, nn
from torch.utils.data import DataLoader, TensorDataset

from oscrepro.attention.softmax import SoftmaxAttention
from oscrepro.models.gpt import GPTLM
from oscrepro.models.sequence_classifier import SequenceClassifier, pretrained_backbone, pretrained_checkpoint
from oscrepro.runs.compose import RunNotUsableError
from oscrepro.runs.record import RunRecord
from oscrepro.tasks.language_modeling import LanguageModelTask
from oscrepro.train import callbacks

V, C = 23, 3
TINY_GPT = {"_target_": "oscrepro.models.gpt.GPTLM", "d_model": 16, "n_heads": 2, "n_layers": 2, "d_ff": 32,
            "max_positions": 32}
SOFTMAX = {"_target_": "oscrepro.attention.softmax.SoftmaxAttention", "_partial_": True}


class TinyCausalLM(nn.Module):
    """Stand-in backbone with GPTLM's interface: h_t = emb(x_t) + mixing of the causal running mean."""

    def __init__(self, vocab_size: int, d_model: int = 8, attention: object | None = None) -> None:
        super().__init__()
        self.d_model = d_model
        self.embed = nn.Embedding(vocab_size, d_model)
        self.mix = nn.Linear(d_model, d_model)
        self.head = nn.Linear(d_model, vocab_size)

    def forward_hidden(self, x: Tensor, need_weights: bool = False, *, times: Tensor | None = None
                       ) -> tuple[Tensor, list[dict[str, Tensor]]]:
        e = self.embed(x)  # (B, T, D)
        mean = e.cumsum(1) / torch.arange(1, x.shape[1] + 1, device=x.device)[:, None]  # causal running mean
        return torch.tanh(e + self.mix(mean)), [{}]

    def forward(self, x: Tensor, need_weights: bool = False, *, times: Tensor | None = None
                ) -> tuple[Tensor, list[dict[str, Tensor]]]:
        h, aux = self.forward_hidden(x, need_weights, times=times)
        return self.head(h), aux


BACKBONES = {
    "stand_in": partial(TinyCausalLM, d_model=8),
    "gpt": partial(GPTLM, d_model=16, n_heads=2, n_layers=2, d_ff=32, max_positions=32,
                   attention=partial(SoftmaxAttention)),
}


def _classifier(name: str) -> SequenceClassifier:
    torch.manual_seed(0)
    return SequenceClassifier(n_classes=C, vocab_size=V, backbone=BACKBONES[name]).eval()


@pytest.mark.parametrize("name", sorted(BACKBONES))
def test_head_reads_the_last_real_token(name: str) -> None:
    model = _classifier(name)
    x = torch.randint(0, V, (4, 7))
    lengths = torch.tensor([7, 1, 4, 2])
    logits, _ = model(x, lengths)
    h, _ = model.backbone.forward_hidden(x)  # (B, T, D)
    want = model.head(torch.stack([h[b, int(n) - 1] for b, n in enumerate(lengths)]))
    assert logits.shape == (4, C) and torch.allclose(logits, want, atol=1e-6)
    assert torch.allclose(model(x)[0], model.head(h[:, -1]), atol=1e-6)  # no lengths: every row is full
    assert not torch.allclose(logits[1], model.head(h[1, -1]))  # position 0, not T - 1


@pytest.mark.parametrize("name", sorted(BACKBONES))
def test_right_padding_does_not_change_logits(name: str) -> None:
    model = _classifier(name)
    rows = [torch.randint(0, V, (n,)) for n in (5, 2, 9, 1)]
    lengths = torch.tensor([len(r) for r in rows])
    alone = torch.cat([model(r[None], lengths[i : i + 1])[0] for i, r in enumerate(rows)])  # (B, C), no padding
    for pad in (0, V - 1, -1):  # -1: random garbage in every padded slot
        x = torch.randint(0, V, (4, 12)) if pad == -1 else torch.full((4, 12), pad)
        for i, r in enumerate(rows):
            x[i, : len(r)] = r
        assert torch.allclose(model(x, lengths)[0], alone, atol=1e-5), pad


def test_random_init_is_labelled_and_needs_a_backbone() -> None:
    assert _classifier("gpt").init_from.startswith("random init")
    with pytest.raises(ValueError, match="pretrained_run"):
        SequenceClassifier(n_classes=C, vocab_size=V)


# ------------------------------------------------------------------------------------------ pretrained runs
@pytest.fixture(scope="module")
def lm_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Tensor]]:
    """A finished tiny GPT LM run, written the way train.py writes one: config.yaml, status ok, and the
    checkpoints of train.callbacks after two epochs of a real Lightning fit. Returns (run dir, trained weights)."""
    run_dir = tmp_path_factory.mktemp("runs") / "coupledqk" / "abc123"
    cfg = OmegaConf.create({"model": {**TINY_GPT, "attention": SOFTMAX}, "data": {"_target_": "not.needed"},
                            "seed": 0})
    record = RunRecord(run_dir)
    record.start(cfg, {"run_id": run_dir.name})
    torch.manual_seed(0)
    model = GPTLM(vocab_size=V, **{k: v for k, v in TINY_GPT.items() if k != "_target_"},
                  attention=partial(SoftmaxAttention))
    task = LanguageModelTask(model, optimizer=partial(torch.optim.AdamW, lr=1e-2))
    x = torch.randint(0, V, (8, 9))
    loader = DataLoader(TensorDataset(x[:, :-1], x[:, 1:]), batch_size=4)
    trainer = L.Trainer(max_epochs=2, logger=False, enable_progress_bar=False, enable_model_summary=False,
                        callbacks=callbacks(run_dir), default_root_dir=str(run_dir), accelerator="cpu")
    trainer.fit(task, loader, loader)
    record.finish("ok", {}, {})
    return run_dir, {k: v.detach().clone() for k, v in model.state_dict().items()}


def _same(a: dict[str, Tensor], b: dict[str, Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_pretrained_run_round_trips_the_backbone(lm_run: tuple[Path, dict[str, Tensor]]) -> None:
    run_dir, trained = lm_run
    assert not _same(trained, GPTLM(vocab_size=V, **{k: v for k, v in TINY_GPT.items() if k != "_target_"},
                                    attention=partial(SoftmaxAttention)).state_dict())  # training moved it
    for which in ("last", "best"):
        assert _same(pretrained_backbone(run_dir, checkpoint=which, vocab_size=V).state_dict(), trained)
    assert pretrained_checkpoint(run_dir, "best").name.startswith("epoch=1")  # newest epoch (no monitor)
    model = SequenceClassifier(n_classes=C, vocab_size=V, pretrained_run=str(run_dir),
                               attention=partial(SoftmaxAttention), backbone=BACKBONES["stand_in"])
    assert isinstance(model.backbone, GPTLM) and _same(model.backbone.state_dict(), trained)
    assert model.init_from == f"pretrained: {run_dir / 'checkpoints' / 'last.ckpt'}"
    assert model(torch.randint(0, V, (2, 5)), torch.tensor([5, 3]))[0].shape == (2, C)


def test_pretrained_run_must_match_attention_and_vocab(lm_run: tuple[Path, dict[str, Tensor]]) -> None:
    run_dir, _ = lm_run
    with pytest.raises(ValueError, match="trained with oscrepro.attention.softmax.SoftmaxAttention"):
        SequenceClassifier(n_classes=C, vocab_size=V, pretrained_run=run_dir, attention=partial(nn.Identity))
    with pytest.raises(RunNotUsableError, match="another tokenizer"):
        pretrained_backbone(run_dir, vocab_size=V + 1)


def test_missing_or_unfinished_run_is_a_clear_error(tmp_path: Path,
                                                    lm_run: tuple[Path, dict[str, Tensor]]) -> None:
    with pytest.raises(RunNotUsableError, match="does not exist.*pretrained_run"):
        pretrained_backbone(tmp_path / "no_such_run", vocab_size=V)
    with pytest.raises(RunNotUsableError, match="does not exist"):
        SequenceClassifier(n_classes=C, vocab_size=V, pretrained_run=tmp_path / "no_such_run",
                           attention=partial(SoftmaxAttention))
    (tmp_path / "empty").mkdir()
    with pytest.raises(RunNotUsableError, match="no config.yaml"):
        pretrained_backbone(tmp_path / "empty", vocab_size=V)
    (tmp_path / "empty" / "config.yaml").write_text((lm_run[0] / "config.yaml").read_text())
    with pytest.raises(RunNotUsableError, match="no checkpoints/last.ckpt"):
        SequenceClassifier(n_classes=C, vocab_size=V, pretrained_run=tmp_path / "empty")
    running = tmp_path / "running"
    RunRecord(running).start(OmegaConf.load(lm_run[0] / "config.yaml"), {})  # status "running"
    (running / "checkpoints").mkdir()
    (running / "checkpoints" / "last.ckpt").write_bytes((lm_run[0] / "checkpoints" / "last.ckpt").read_bytes())
    with pytest.raises(RunNotUsableError, match="status 'running'"):
        pretrained_backbone(running, vocab_size=V)
    with pytest.raises(ValueError, match="checkpoint must be"):
        pretrained_checkpoint(lm_run[0], "first")
