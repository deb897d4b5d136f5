"""The resolved config of every table cell x seed at every budget equals the golden fixture.

``tests/fixtures/golden_configs.json`` was written before the configs and the engine were restructured (and
regenerated only for the intended differences listed in its commit message); composing every cell again and
comparing proves that a restructuring changed no experiment. Analysis-table and post-hook arguments are compared
too. Regenerate with ``python tests/fixtures/make_golden_configs.py`` only for an intended change.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from oscrepro.tables.spec import available_tables
from tests.helpers.golden import differences, restrict, snapshot

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "golden_configs.json"
PAPERS = sorted({key.split("/")[0] for key in available_tables()})


@pytest.mark.parametrize("paper", PAPERS)  # one test per paper, so that pytest-xdist spreads the compositions
def test_every_table_cell_composes_to_its_golden_config(paper):
    golden = restrict(json.loads(FIXTURE.read_text()), paper)
    diffs = differences(golden, snapshot(paper))
    assert not diffs, f"{len(diffs)} differences from the golden configs, first 20:\n" + "\n".join(diffs[:20])


def test_the_papers_cover_every_golden_cell():
    """Restricting by paper loses no cell: a table outside every paper would escape the comparison."""
    golden = json.loads(FIXTURE.read_text())
    assert sum(len(restrict(golden, p)["cells"]) for p in PAPERS) == len(golden["cells"])


def test_comparison_detects_a_changed_hyperparameter():
    """The comparison can fail: one changed key in one cell is reported with its old and new value."""
    golden = json.loads(FIXTURE.read_text())
    cell = next(iter(golden["cells"]))
    changed = json.loads(json.dumps(golden))
    cfg = json.loads(json.dumps(golden["configs"][golden["cells"][cell]]))
    cfg["seed"] = int(cfg["seed"]) + 1000
    changed["configs"]["x"] = cfg
    changed["cells"][cell] = "x"
    diffs = differences(golden, changed)
    assert len(diffs) == 1 and diffs[0].startswith(f"{cell}: seed:")
