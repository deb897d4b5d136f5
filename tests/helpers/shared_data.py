"""Tests that read a shared dataset copy (``../shared/data``): visible skip locally, loud failure under CI.

A silent skip hides lost coverage: under ``CI=true`` a missing copy fails the test with the dataset name, where
it was looked for and how to supply it (the data path of :mod:`oscrepro.data.paths`).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from oscrepro.data.paths import find_dataset, search_roots


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def require_shared(name: str, marker: str | None = None) -> Path:
    """The folder of dataset ``name`` (must contain ``marker`` if given); else fail under CI, skip otherwise."""
    found = find_dataset(name, marker=marker)
    if found is not None:
        return found
    roots = ", ".join(str(r) for r in search_roots())
    msg = (f"dataset '{name}'{f' (file {marker})' if marker else ''} not found in {roots}; put a copy under "
           f"one of them or set OSCREPRO_DATA_DIR")
    if in_ci():
        pytest.fail(f"CI needs {msg}", pytrace=False)
    pytest.skip(msg)
