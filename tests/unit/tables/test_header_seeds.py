"""A table's header names the rows whose seed count differs from the table's (seeds the claims planner raised to
decide a claim), so a reader of the .md sees why a cell says n = 5 under "Seeds per cell: 3"."""

from __future__ import annotations

import shutil
from pathlib import Path

from oscrepro.claims.decide import write_decided
from oscrepro.runs.compose import CONF_DIR
from oscrepro.tables.render import header_lines
from oscrepro.tables.spec import load_spec

KEY = "coupledqk/table1"


def _seeds_line(spec) -> str:
    return next(x for x in header_lines(spec, "cpu", len(spec.seeds_for("cpu")), [], {})
                if x.startswith("- **Seeds per cell:**"))


def test_header_names_raised_rows(tmp_path: Path):
    root = tmp_path / "conf"
    (root / "table" / KEY).parent.mkdir(parents=True)
    shutil.copy(CONF_DIR / "table" / f"{KEY}.yaml", root / "table" / f"{KEY}.yaml")
    assert "own count" not in _seeds_line(load_spec(KEY, root))  # nothing raised: the plain line
    write_decided("cpu", KEY, ["Standard"], 5, root)
    line = _seeds_line(load_spec(KEY, root))
    assert line.startswith("- **Seeds per cell:** 3 (paper budget: 3)")
    assert line.endswith("`conf/decide/cpu.yaml`): Standard 5")


def test_header_names_raised_cells(tmp_path: Path):
    key = "coupledqk/table6"
    root = tmp_path / "conf"
    (root / "table" / key).parent.mkdir(parents=True)
    shutil.copy(CONF_DIR / "table" / f"{key}.yaml", root / "table" / f"{key}.yaml")
    write_decided("cpu", key, ["Standard | medium"], 8, root)
    assert _seeds_line(load_spec(key, root)).endswith("`conf/decide/cpu.yaml`): Standard | medium 8")
