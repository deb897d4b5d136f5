"""fqo Table 3: the attention of the verb on its subject vs on the distractor noun, in the SVA test sentences.

The SVA experiment's task (``conf/experiment/fqo/sva.yaml``: ``task._target_`` is :class:`VerbAttentionProbeTask`)
is the core :class:`~oscrepro.tasks.classification.ClassificationTask` plus this probe: on the test pass it asks the
model for its attention weights and records, per hard sentence, the weight of the last position (SVA's ``<verb>``)
on ``meta['subject_idx']`` and on ``meta['distractor_idx']`` in layer ``probe_layer`` (mean over heads), then logs
:func:`verb_attention_summary` (``test/attn_vs_correct`` ...), the statistic Table 3 reports.

Its configs' run ids were first hashed when this task was the core task with ``attention_probe: true``:
``oscrepro.runs.record.MOVED_TARGETS`` keeps them.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from oscrepro.tasks.classification import ClassificationTask


def verb_attention_summary(a_vs: Tensor, a_vd: Tensor, correct: Tensor) -> dict[str, float]:
    """Mean verb->subject (a_vs) and verb->distractor (a_vd) attention, split by correct/wrong prediction.

    Inputs are per-sentence tensors over hard sentences. The mean over a split with no sentence is undefined: its
    ``attn_*`` keys are omitted (``n_hard_<split>`` = 0 says why), so that every recorded metric is a finite
    number (a run with a non-finite final metric is recorded ``diverged``: oscrepro.train).
    """
    out: dict[str, float] = {}
    for name, sel in (("correct", correct), ("wrong", ~correct)):
        n = int(sel.sum())
        if n:
            out[f"attn_vs_{name}"] = float(a_vs[sel].mean())
            out[f"attn_vd_{name}"] = float(a_vd[sel].mean())
        out[f"n_hard_{name}"] = float(n)
    return out


class VerbAttentionProbeTask(ClassificationTask):
    """:class:`ClassificationTask` whose test pass also measures verb->subject / verb->distractor attention.

    ``attention_probe``: the probe's switch (false: the plain task; the SVA experiment sets true, and its records
    hash it). ``probe_layer``: the layer whose weights are read.
    """

    def __init__(self, *args: Any, attention_probe: bool = True, probe_layer: int = 0, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.attention_probe, self.probe_layer = attention_probe, probe_layer

    def needs_weights(self, split: str) -> bool:
        return split == "test" and self.attention_probe

    def probe_samples(self, split: str, meta: dict[str, Tensor], auxes: list[dict[str, Any]]) -> dict[str, Tensor]:
        """Per sentence: the ``<verb>`` row's weight on the subject and on the distractor (head mean)."""
        if not self.needs_weights(split):
            return {}
        w = auxes[self.probe_layer]["weights"].mean(dim=1)[:, -1]  # (B, T): last-position row, head mean
        rows = torch.arange(len(w), device=w.device)
        return {"probe/vs": w[rows, meta["subject_idx"]], "probe/vd": w[rows, meta["distractor_idx"]]}

    def probe_metrics(self, split: str, samples: dict[str, Tensor], correct: Tensor) -> dict[str, Tensor]:
        """:func:`verb_attention_summary` over the hard sentences, as ``<split>/attn_*`` and ``<split>/n_hard_*``."""
        if "probe/vs" not in samples or f"{split}/hard" not in samples:
            return {}
        hard = samples[f"{split}/hard"]
        summary = verb_attention_summary(samples["probe/vs"][hard], samples["probe/vd"][hard], correct[hard])
        return {f"{split}/{k}": torch.tensor(v) for k, v in summary.items()}
