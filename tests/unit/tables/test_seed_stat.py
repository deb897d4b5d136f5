"""A statistic over seeds in an analysis table (oscrepro/tables/values.py, render.py): the .md shows it as the
adapters always printed it, the csv carries its numbers (mean, ``__std``, ``__n``) for the claims engine."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np
import pytest

from oscrepro.tables.render import analysis_csv, render_analysis_table
from oscrepro.tables.spec import load_spec
from oscrepro.tables.values import SeedStat


def test_seed_stat_renders_as_the_adapters_did() -> None:
    """The adapters' former f-strings: attention_maps/damping 'm ± s' (one seed: 'm'), glue/resonance/spirals/
    forecast '… (n=k)', glue's flags, and "—" for no seed."""
    v = [25.0, 27.0, 30.8]
    old = f"{np.mean(v):.1f} ± {np.std(v, ddof=1):.1f}"
    assert SeedStat.of(v, 1).text() == old == "27.6 ± 2.9"
    assert str(SeedStat.of([2.5], 2)) == "2.50" and str(SeedStat.of([1.0, 3.0], 1)) == "2.0 ± 1.4"
    assert str(SeedStat.of([0.5, 0.7], 3, show_n=True)) == "0.600 ± 0.141 (n=2)"
    assert str(SeedStat.of([72.7], 1, show_n=True, flags=["diverged 1"])) == "72.7 (n=1) [diverged 1]"
    assert str(SeedStat.of([], 1, show_n=True, flags=["failed 3"])) == "— [failed 3]"
    s = SeedStat.of(v, 1)
    assert (s.n, s.mean, s.std) == (3, pytest.approx(27.6), pytest.approx(float(np.std(v, ddof=1))))
    assert math.isnan(SeedStat.of([2.5], 2).std)


def test_analysis_table_writes_numeric_columns_for_seed_stats(tmp_path: Path) -> None:
    """coupledqk Table 12's layout: ours rows hold SeedStats, paper rows strings in the same columns. The .md reads
    as before; the csv has the mean (full precision) in the column, the std and n beside it, empty for strings."""
    spec = load_spec("coupledqk/table12")
    ours, other = [25.0, 27.0, 30.8], [0.140, 0.150, 0.148]
    columns = ["Attention", "Values", "L0", "σ1/Σσ", "Note"]
    rows = [{"Attention": "Standard", "Values": "ours (3 seeds)", "L0": SeedStat.of(ours, 1),
             "σ1/Σσ": SeedStat.of(other, 3), "Note": "x"},
            {"Attention": "Standard", "Values": "paper (Standard)", "L0": "—", "σ1/Σσ": "0.056", "Note": 1.5}]
    md = render_analysis_table(spec, "cpu", columns, rows, tmp_path, ["a note"])
    assert "| Standard | ours (3 seeds) | 27.6 ± 2.9 | 0.146 ± 0.005 | x |" in md.read_text()
    assert "| Standard | paper (Standard) | — | 0.056 | 1.5000 |" in md.read_text()
    with md.with_suffix(".csv").open(newline="") as f:
        reader = csv.DictReader(f)
        lines = list(reader)
    assert reader.fieldnames == ["Attention", "Values", "L0", "L0__std", "L0__n", "σ1/Σσ", "σ1/Σσ__std",
                                 "σ1/Σσ__n", "Note"]
    assert float(lines[0]["L0"]) == pytest.approx(np.mean(ours), abs=1e-12)
    assert float(lines[0]["L0__std"]) == pytest.approx(np.std(ours, ddof=1), abs=1e-12)
    assert lines[0]["L0__n"] == "3" and lines[0]["σ1/Σσ__n"] == "3"
    assert (lines[1]["L0"], lines[1]["L0__std"], lines[1]["L0__n"]) == ("—", "", "")
    assert not any("±" in v for line in lines for v in line.values())


def test_flags_get_their_own_column_and_a_name_clash_is_an_error() -> None:
    rows = [{"R": "a", "acc": SeedStat.of([0.7, 0.8], 1, show_n=True, flags=["diverged 1"])},
            {"R": "b", "acc": SeedStat.of([0.7, 0.8], 1, show_n=True)}]
    names, lines = analysis_csv(["R", "acc"], rows)
    assert names == ["R", "acc", "acc__std", "acc__n", "acc__flags"]
    assert [line["acc__flags"] for line in lines] == ["diverged 1", ""]
    with pytest.raises(ValueError, match=r"\['acc__n'\] collide with the numeric columns"):
        analysis_csv(["R", "acc", "acc__n"], [dict(rows[1], acc__n=2)])
