"""``trainer.precision=bf16-mixed`` trains every task on the CPU, as a run distinct from the fp32 one."""

from __future__ import annotations

import json
import math

import pytest

from oscrepro.runs.record import run_dir, run_id
from oscrepro.train import train

TASKS = {  # one per task x backbone: classification (SVA), word LM, torus phase LM (complex FSN kernel)
    "sva_fqo": ["experiment=fqo/sva", "attention=fqo", "model.attention.d_osc=2"],
    "wikitext2_lm": ["experiment=fqo/lm_wikitext2", "attention=softmax", "model.n_layers=1"],
    "torus_fsn": ["experiment=fsn/charlm"],
    "torus_kuramoto": ["experiment=fsn/charlm", "attention=kuramoto"],
    "rope_transformer": ["experiment=fsn/charlm", "model=rope_transformer", "~attention"],
}


@pytest.mark.parametrize("name", list(TASKS))
def test_bf16_mixed_trains_and_is_its_own_run(name, compose, results_dir):
    base = [*TASKS[name], "budget=smoke", f"paths.results_dir={results_dir}"]
    fp32 = compose(base)
    bf16 = compose([*base, "trainer.precision=bf16-mixed"])
    assert run_id(fp32) == run_id(compose([*base, "trainer.precision=32-true"]))  # the default is not hashed
    assert run_id(bf16) != run_id(fp32)
    assert train(bf16)["status"] == "ok"
    metrics = json.loads((run_dir(bf16) / "metrics.json").read_text())
    assert all(math.isfinite(v) for k, v in metrics.items() if k.startswith(("val/", "test/")) and "attn" not in k)
