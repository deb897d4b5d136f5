"""Analysis adapters return numbers; the engine formats them (oscrepro/tables/render.py, values.py): a spec's
``formats`` give a column's digits in the .md and the csv, a :class:`Num` carries its own template, ``None`` is a
dash, other floats keep 4 decimals in the .md and full precision in the csv."""

from __future__ import annotations

import csv
import dataclasses
from pathlib import Path

import pytest

from oscrepro.tables.render import analysis_csv, cell_text, render_analysis_table
from oscrepro.tables.spec import SpecError, load_spec
from oscrepro.tables.values import MISSING, Num, SeedStat, column_format


def test_column_formats_are_digits_specs_or_templates() -> None:
    assert column_format(2) == "{:.2f}" and column_format("+,") == "{:+,}" and column_format(".1e") == "{:.1e}"
    assert column_format("{:+.2f} %") == "{:+.2f} %"
    with pytest.raises(ValueError, match="column format"):
        column_format(True)


def test_cells_render_as_the_adapters_former_strings() -> None:
    assert cell_text(Num(1.2345, "{:+.4f} [{:+.4f}, {:+.4f}]", (0.5, 2.0))) == "+1.2345 [+0.5000, +2.0000]"
    assert cell_text(1011834, "{:,}") == "1,011,834" and cell_text(-3, "{:+,}") == "-3"
    assert cell_text(None) == cell_text(None, "{:,}") == MISSING
    assert cell_text(0.123456) == "0.1235" and cell_text("text", "{:.2f}") == "text" and cell_text(3) == "3"
    assert float(Num(1.5, "{:.0f}×")) == 1.5 and str(Num(1.5, "{:.0f}×")) == "2×"


def test_formatted_columns_write_the_shown_text_to_the_csv(tmp_path: Path) -> None:
    spec = dataclasses.replace(load_spec("fsn/table3"), formats={"count": ",", "share": 2})
    columns = ["Model", "count", "share", "raw", "ratio"]
    rows = [{"Model": "a", "count": 1234567, "share": 0.5, "raw": 0.123456789, "ratio": Num(2.0, "{:.2f}×")},
            {"Model": "b", "count": None, "share": None, "raw": None, "ratio": MISSING}]
    md = render_analysis_table(spec, "smoke", columns, rows, tmp_path, [])
    assert "| a | 1,234,567 | 0.50 | 0.1235 | 2.00× |" in md.read_text()
    assert "| b | — | — | — | — |" in md.read_text()
    with md.with_suffix(".csv").open(newline="") as fh:
        lines = list(csv.DictReader(fh))
    assert lines[0] == {"Model": "a", "count": "1,234,567", "share": "0.50", "raw": "0.123456789", "ratio": "2.00×"}
    assert lines[1] == {"Model": "b", "count": "—", "share": "—", "raw": "", "ratio": "—"}
    assert analysis_csv(columns, rows)[1][0]["count"] == 1234567  # without the spec's formats: the number


def test_a_seed_stat_in_a_formatted_column_shows_mean_and_std_in_its_format(tmp_path: Path) -> None:
    """The spec's format of a column replaces a SeedStat's digits in the .md (fqo Table 6's errors in .2e); the csv
    keeps its numbers at full precision, and a SeedStat without a column format is shown as before."""
    err = SeedStat.of([2e-3, 3e-3, 4e-3], 4)
    assert cell_text(err, column_format(".2e")) == "3.00e-03 ± 1.00e-03" and cell_text(err) == "0.0030 ± 0.0010"
    assert cell_text(SeedStat.of([99.1234], 4), column_format(2)) == "99.12"  # one seed: the mean alone
    assert cell_text(SeedStat.of([], 2), "{:.2e}") == MISSING
    spec = dataclasses.replace(load_spec("fsn/table3"), formats={"err": ".2e"})
    md = render_analysis_table(spec, "smoke", ["Model", "err"], [{"Model": "a", "err": err}], tmp_path, [])
    assert "| a | 3.00e-03 ± 1.00e-03 |" in md.read_text()
    with md.with_suffix(".csv").open(newline="") as fh:
        (line,) = list(csv.DictReader(fh))
    assert (float(line["err"]), float(line["err__std"]), line["err__n"]) == (err.mean, err.std, "3")


def test_a_format_for_a_column_the_table_lacks_is_refused(tmp_path: Path) -> None:
    spec = dataclasses.replace(load_spec("fsn/table3"), formats={"renamed": 2})
    with pytest.raises(SpecError, match="renamed"):
        render_analysis_table(spec, "smoke", ["Model"], [{"Model": "a"}], tmp_path, [])
    assert not (tmp_path / "table3.md").exists()


def test_the_committed_spec_formats_parse() -> None:
    """The committed specs' formats parse (their columns are checked when the table renders)."""
    for key in ("fsn/table3", "fqo/table6", "fqo/ode_speed", "coupledqk/table11", "osciformer/fig3_resonance"):
        formats = load_spec(key).formats
        assert formats and all(column_format(f) for f in formats.values())
