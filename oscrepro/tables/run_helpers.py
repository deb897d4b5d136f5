"""Helpers for analysing a loaded run (:func:`oscrepro.tables.runs.load_run`): its attention modules, its first
validation inputs, and a thread budget for the analysis. Shared by the papers' analyses (fqo ODE, fsn kernels)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import Tensor, nn

from oscrepro.tables.runs import LoadedRun


@contextmanager
def num_threads(n: int | None) -> Iterator[None]:
    """Run the block with ``torch.set_num_threads(n)`` (``None``: unchanged); restores the previous count.

    Analyses of a run use the run's own ``torch_threads`` (1 by default): the batched ODE integrators issue many
    small ops, which run several times slower with more threads on a shared 2-core CPU.
    """
    before = torch.get_num_threads()
    if n is not None:
        torch.set_num_threads(int(n))
    try:
        yield
    finally:
        torch.set_num_threads(before)


def attention_modules(model: nn.Module) -> list[nn.Module]:
    """The attention module of every block (``block.attn``, TransformerBlock convention), in layer order."""
    return [m.attn for m in model.modules() if isinstance(getattr(m, "attn", None), nn.Module)]


def first_val_inputs(run: LoadedRun, n: int) -> Tensor:
    """The inputs ``x`` of the first ``n`` validation examples (fewer if the split is smaller): (n, T, ...)."""
    xs, have = [], 0
    for batch in run.val_batches():
        xs.append(batch[0][: n - have])
        have += xs[-1].shape[0]
        if have >= n:
            break
    if not xs:
        raise ValueError(f"{run.run_dir}: empty validation split")
    return torch.cat(xs)
