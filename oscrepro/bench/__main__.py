"""``python -m oscrepro.bench block=<attention> seq_lens=[...]``: block benchmark vs softmax, written as .md + .csv.

Example (the ssa paper's N = 1024 row on CPU): ``python -m oscrepro.bench block=ssa seq_lens=[1024] batch=4``.
Output: ``<out_dir>/<block>_<device>.{md,csv}`` with a provenance header; ratios are candidate / softmax.
"""

from __future__ import annotations

from pathlib import Path

import hydra
import torch
from omegaconf import DictConfig, OmegaConf

from oscrepro.bench.harness import render_markdown, run_bench, write_csv
from oscrepro.utils.provenance import provenance


@hydra.main(version_base="1.3", config_path="../../conf", config_name="bench")
def main(cfg: DictConfig) -> None:
    """Run the benchmark described by ``conf/bench.yaml`` (+ command-line overrides) and write the tables."""
    if cfg.threads is not None:
        torch.set_num_threads(cfg.threads)
    overrides = OmegaConf.to_container(cfg.attention_overrides) if cfg.attention_overrides else None
    rows = run_bench(cfg.block, list(cfg.seq_lens), cfg.batch, cfg.d_model, cfg.n_heads, cfg.warmup, cfg.trials,
                     cfg.device, use_paper_batch=cfg.paper_batch, overrides=overrides, backward=cfg.backward,
                     seed=cfg.seed)
    prov = provenance()
    header = [f"{k}: {v}" for k, v in prov.items()] + [
        f"benchmark: TransformerBlock(d_model={cfg.d_model}, n_heads={cfg.n_heads}, d_ff=4*d_model) with "
        f"attention={cfg.block} (cand) vs SoftmaxAttention (softmax); warm-up {cfg.warmup}, trials {cfg.trials}",
        "ratios: cand / softmax of median time and of peak memory (time ratio > 1 = candidate slower)",
        f"overrides: {overrides or {}}; threads: {torch.get_num_threads()}",
    ]
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"{cfg.block}_{cfg.device}"
    (out / f"{stem}.md").write_text(render_markdown(rows, header))
    write_csv(rows, out / f"{stem}.csv", header)
    print(render_markdown(rows, header))


if __name__ == "__main__":
    main()
