"""coupledqk Table 11 (App. C): parameter counts of the 60M GPT with each attention variant; no training.

Adapter of ``conf/table/coupledqk/table11.yaml``. Each row's model is composed exactly as its training runs are
(``experiment=coupledqk/lm budget=paper`` plus the row's overrides, i.e. ``conf/model/gpt.yaml`` with
``conf/attention/<name>.yaml`` and the recipe's ``bias: false``), then built on the meta device at the paper's
vocabulary (GPT-2 BPE, 50,257), so no memory is allocated and the result is the same at every budget.

Table 11's three count columns, as we compute them:

* **Total**: every parameter of ``GPTLM`` (the tied embedding once).
* **Variant-specific**: the mechanism's parameters outside its projections to and from the residual stream
  (``nn.Linear`` with ``d_model`` inputs or outputs: Q, K, V, O and their fused or grouped forms). This is the
  coupling MLP and ``log dt`` of coupled QK (8 x (2 x 64^2 + 8) = 65,600), Diff's lambdas (paper form: one per
  head, 8 x 8 = 64), and 0 for Standard and GQA (GQA only shrinks K and V), which is how the paper's column reads.
* **Overhead**: (total - Standard's total) / Standard's total, in percent (GQA's -5.21 % is a saving).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from hydra.utils import instantiate
from torch import nn

from oscrepro.runs.compose import compose_run

Table = tuple[list[str], list[dict[str, Any]], list[str]]


def build_meta_model(experiment: str, overrides: list[str], vocab: int) -> tuple[nn.Module, Any]:
    """(model on the meta device, composed run config) of ``experiment`` + ``overrides`` at budget=paper."""
    cfg = compose_run([f"experiment={experiment}", "budget=paper", *overrides])
    with torch.device("meta"):
        model = instantiate(cfg.model, vocab_size=int(vocab))
    return model, cfg


def n_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())  # parameters() yields the tied embedding once


def variant_specific(model: nn.Module) -> int:
    """Attention parameters outside the residual-stream projections, summed over the layers (see module doc)."""
    total = 0
    for block in model.blocks:
        attn = block.attn
        proj = {id(p) for m in attn.modules() if isinstance(m, nn.Linear)
                and attn.d_model in (m.in_features, m.out_features) for p in m.parameters()}
        total += sum(p.numel() for p in attn.parameters() if id(p) not in proj)
    return total


def coupledqk_table11(out_dir: Path, budget: str, results_dir: Path, experiment: str, vocab: int,
                      rows: list[dict[str, Any]], baseline: str) -> Table:
    """One row per ``rows`` entry (``label``, ``overrides``, optional ``paper: {total, specific, overhead}``).

    ``baseline`` names the row the overhead is relative to (Standard). ``out_dir``, ``budget`` and
    ``results_dir`` are unused: nothing is trained or read, and the count is the paper's at every budget.
    """
    counts = {}
    for r in rows:
        model, _ = build_meta_model(experiment, list(r.get("overrides", [])), vocab)
        counts[r["label"]] = (n_params(model), variant_specific(model), type(model.blocks[0].attn).__name__)
    if baseline not in counts:
        raise ValueError(f"baseline {baseline!r} is not a row label; rows: {list(counts)}")
    base = counts[baseline][0]
    out = []
    for r in rows:
        total, specific, cls = counts[r["label"]]
        paper = r.get("paper") or {}
        p_total, p_spec, p_over = paper.get("total"), paper.get("specific"), paper.get("overhead")
        overhead = None if r["label"] == baseline else 100 * (total - base) / base
        out.append({
            "Attention": r["label"], "overrides": " ".join(r.get("overrides", [])), "class": cls,
            "Total (ours)": total, "Total (paper)": None if p_total is None else int(p_total),
            "Δ total": None if p_total is None else total - int(p_total), "vs Standard": total - base,
            "Variant-specific (ours)": specific, "Variant-specific (paper)": None if p_spec is None else int(p_spec),
            "Overhead (ours)": overhead, "Overhead (paper)": p_over,  # numbers: the spec's formats show them
        })
    notes = [f"**Composed** as the training runs: `experiment={experiment} budget=paper` + the row's overrides "
             f"(conf/model/gpt.yaml, d 512, 8 heads, 8 layers, d_ff 2048, 2,048 learned positions, tied embedding, "
             f"no biases), built on the meta device at vocabulary {int(vocab):,}; no training, the same at every "
             f"budget.",
             "**Variant-specific** = attention parameters outside the projections to and from the residual stream "
             "(Q, K, V, O), summed over the 8 layers; **overhead** = total relative to Standard's. "
             "Rows without paper values are not in the paper's Table 11."]
    return list(out[0]), out, notes
