"""RunIf-style skip decorators (STYLE rule 8)."""

from __future__ import annotations

import importlib.util

import pytest
import torch


def run_if(cuda: bool = False, package: str | None = None) -> pytest.MarkDecorator:
    """Skip unless a CUDA device / an importable package is present; the reason names what is missing."""
    if cuda and not torch.cuda.is_available():
        return pytest.mark.skipif(True, reason="needs a CUDA device")
    if package and importlib.util.find_spec(package) is None:
        return pytest.mark.skipif(True, reason=f"needs the package {package}")
    return pytest.mark.skipif(False, reason="")
