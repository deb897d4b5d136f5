"""Compile-or-eager fallback shared by the tiled and fused kernels (oscrepro.attention.compiled)."""

import warnings

import pytest
import torch

from oscrepro.attention.compiled import CompiledPair, run_with_fallback


def _pair() -> CompiledPair:
    return CompiledPair("test kernels", lambda x: x + 1, lambda x: x - 1)


def test_a_compile_failure_warns_once_and_runs_eagerly_from_then_on():
    pairs, calls = (_pair(), _pair()), []

    def run(compiled: bool) -> str:
        calls.append(compiled)
        if compiled:
            raise RuntimeError("no C compiler")
        return "eager"

    with pytest.warns(UserWarning, match="torch.compile failed"):
        assert run_with_fallback(run, True, *pairs) == "eager"
    assert all(p.broken for p in pairs) and calls == [True, False]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no second warning, no second compile attempt
        assert run_with_fallback(run, True, *pairs) == "eager"
    assert calls == [True, False, False]


def test_not_compiled_never_tries_and_an_eager_error_raises():
    pair, calls = _pair(), []

    def run(compiled: bool) -> None:
        calls.append(compiled)
        raise ValueError("bad shapes")

    with pytest.raises(ValueError, match="bad shapes"):
        run_with_fallback(run, False, pair)
    assert calls == [False] and not pair.broken


def test_a_stage_called_in_a_backward_falls_back_once(monkeypatch):
    """CompiledPair.call (the stages an autograd backward runs, outside run_with_fallback): a compile failure of
    the second stage warns once, marks the pair broken and returns the eager stage's value; later calls go eager."""
    pair = _pair()

    def broken_compile(*args, **kwargs):
        raise RuntimeError("inductor unavailable")

    monkeypatch.setattr(torch, "compile", broken_compile)
    x = torch.arange(3.0)
    with pytest.warns(UserWarning, match="inductor unavailable"):
        torch.testing.assert_close(pair.call(True, 1, x), x - 1)
    assert pair.broken
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        torch.testing.assert_close(pair.call(True, 0, x), x + 1)


def test_the_fsn_bound_falls_back_when_compile_fails(monkeypatch):
    from oscrepro.papers.fsn import torus_lm

    def broken_compile(*args, **kwargs):
        raise RuntimeError("inductor unavailable")

    monkeypatch.setattr(torch, "compile", broken_compile)
    monkeypatch.setattr(torus_lm, "_BOUND", CompiledPair("bounded update", torus_lm.bound_forward,
                                                         torus_lm.bound_backward))
    x, alpha = torch.randn(4, 256, 256), torch.tensor(2.0)  # B*T*k >= COMPILE_MIN_ELEMS: the compiled path is asked
    with pytest.warns(UserWarning, match="inductor unavailable"):
        y = torus_lm.bound(x, alpha)
    torch.testing.assert_close(y, torus_lm.bounded_update(x, alpha))
    assert torus_lm._BOUND.broken
