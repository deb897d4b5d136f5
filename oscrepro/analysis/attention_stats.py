"""Attention statistics read from a mechanism's ``aux`` (fqo Table 3: verb->subject vs verb->distractor)."""

from __future__ import annotations

from torch import Tensor


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
