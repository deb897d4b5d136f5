"""A new mechanism is its module, its ``conf/attention/`` file and rows in table specs: no other code changes.

In a copy of the package and conf/ (nothing else), the test adds ``oscrepro/attention/toy.py`` (softmax with a
learnable temperature per head: a mechanism with its own parameters), ``conf/attention/toy.yaml`` and a ``toy`` row
to the leaderboard's SVA spec. Then, in that tree: the leaderboard lists it, the engine plans and width-matches its
row (parameter count within 1 % of softmax's, counted on the built model), one smoke run trains, and the rendered
board shows its score. A mechanism list hard-coded anywhere in the engine or the board would leave it out.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

TOY = '''
"""Toy mechanism for the sixth-mechanism test: softmax attention with a learnable temperature per head."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from oscrepro.attention.base import Aux
from oscrepro.attention.softmax import SoftmaxAttention


class ToyAttention(SoftmaxAttention):
    def __init__(self, d_model: int, n_heads: int, layer_idx: int = 0) -> None:
        super().__init__(d_model, n_heads, layer_idx)
        self.log_temp = nn.Parameter(torch.zeros(n_heads))  # (H,)

    def forward(self, x: Tensor, **kwargs) -> tuple[Tensor, Aux]:
        y, aux = super().forward(x * self.log_temp.exp().mean(), **kwargs)
        return y, aux
'''

CHECK = '''
import csv, sys
from pathlib import Path
from oscrepro.leaderboard.board import mechanisms, read_task, render_board
from oscrepro.runs.compose import path_override
from oscrepro.tables.build import build_table, matched_widths
from oscrepro.tables.spec import load_spec

results = Path(sys.argv[1])
assert mechanisms()["toy"] == "toy", mechanisms()
spec, notes = matched_widths(load_spec("leaderboard/sva"), "smoke", [])
toy = next(r for r in spec.rows if r.label == "toy")
assert any(o.startswith("model.d_ff=") for o in toy.overrides), toy.overrides  # width-matched by the engine
assert "toy d_ff=" in notes[-1], notes
md = build_table("leaderboard/sva", "smoke", "inprocess", [], results)
task = read_task("leaderboard/sva", md.with_suffix(".csv"), "smoke")
assert task.entries["toy"].n == 1, task.entries
board = render_board([task], {}, "smoke", [])
line = next(ln for ln in board.splitlines() if ln.startswith("| toy |"))
print(line)
'''


def test_a_new_mechanism_needs_no_code_edit(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "oscrepro", tree / "oscrepro", ignore=ignore)
    shutil.copytree(ROOT / "conf", tree / "conf", ignore=ignore)
    (tree / "oscrepro" / "attention" / "toy.py").write_text(textwrap.dedent(TOY))
    (tree / "conf" / "attention" / "toy.yaml").write_text(
        "# @package model.attention\n_target_: oscrepro.attention.toy.ToyAttention\n_partial_: true\n")
    spec = tree / "conf" / "table" / "leaderboard" / "sva.yaml"
    text = spec.read_text()
    anchor = "  - {label: diff, overrides: [attention=diff_paper]}\n"
    assert anchor in text
    spec.write_text(text.replace(anchor, anchor + "  - {label: toy, overrides: [attention=toy]}\n"))

    env = {**os.environ, "PYTHONPATH": str(tree)}
    proc = subprocess.run([sys.executable, "-c", CHECK, str(tmp_path / "results")], cwd=tree, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    row = proc.stdout.strip().splitlines()[-1]
    assert row.startswith("| toy |") and "(n=1)" in row, row
    # the copy really is what ran: the tree under test, not the installed package, knew the toy mechanism
    assert not (ROOT / "oscrepro" / "attention" / "toy.py").exists()
