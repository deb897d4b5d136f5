"""A forward / backward kernel pair run eagerly or through ``torch.compile``, shared by the tiled mechanisms.

The tiled kernels (SSA, fqo) call their per-tile functions either eagerly or compiled. Compilation uses static
shapes and happens once per process; only full-size tiles are compiled, so there is one compile per tile shape
and variant. If compiling fails once (no compiler on the machine, a backend bug), the kernel warns once and runs
eagerly from then on: the same maths, only slower.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import TypeVar

import torch

R = TypeVar("R")


class CompiledPair:
    """(forward, backward) kernels, eager or compiled on first use (module docstring)."""

    def __init__(self, name: str, forward: Callable, backward: Callable) -> None:
        self.name, self.eager = name, (forward, backward)
        self._compiled: tuple[Callable, Callable] | None = None
        self.broken = False

    def get(self, compiled: bool) -> tuple[Callable, Callable]:
        """The eager pair, or the compiled one (built once, ``dynamic=False``)."""
        if not compiled or self.broken:
            return self.eager
        if self._compiled is None:
            self._compiled = tuple(torch.compile(fn, dynamic=False) for fn in self.eager)  # type: ignore[assignment]
        return self._compiled

    def call(self, compiled: bool, index: int, *args: object) -> object:
        """Stage ``index`` (0: first, 1: second) compiled when ``compiled``, else eager. For stages that run outside
        :func:`run_with_fallback`'s reach (an autograd backward): a failure of the compiled stage marks the pair
        broken (one warning) and runs the eager stage, which raises again if the error was not the compiler's."""
        if compiled and not self.broken:
            try:
                return self.get(True)[index](*args)
            except Exception as err:  # noqa: BLE001 -- any compile backend failure means "use eager"
                self.mark_broken(err)
        return self.eager[index](*args)

    def mark_broken(self, err: Exception) -> None:
        """Record that compiling failed here (one warning); afterwards :meth:`get` returns the eager pair."""
        if not self.broken:
            warnings.warn(f"{self.name}: torch.compile failed ({err!r}); falling back to eager kernels", stacklevel=3)
        self.broken = True


def run_with_fallback(run: Callable[[bool], R], compiled: bool, *pairs: CompiledPair) -> R:
    """``run(True)`` (the compiled kernels) when ``compiled`` and none of ``pairs`` failed to compile in this
    process, else ``run(False)``. A failure of ``run(True)`` marks every pair broken (one warning) and runs
    ``run(False)``: the same maths, eagerly; an error that is not the compiler's raises again from there."""
    if compiled and not any(p.broken for p in pairs):
        try:
            return run(True)
        except Exception as err:  # noqa: BLE001 -- any compile backend failure means "use eager"
            for p in pairs:
                p.mark_broken(err)
    return run(False)
