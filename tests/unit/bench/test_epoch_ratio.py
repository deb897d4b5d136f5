"""The epoch-ratio benchmark reads its mechanisms from a table spec's rows (no list in the bench code)."""

from __future__ import annotations

import pytest

from oscrepro.bench.epoch_ratio import DEFAULT_TABLE, main, table_mechanisms
from oscrepro.tables.spec import load_spec


def test_mechanisms_are_the_rows_of_the_table_named_by_their_attention_choice():
    """Every row of osciformer Table 4 that chooses a mechanism is one, with the row's own overrides and label."""
    spec = load_spec(DEFAULT_TABLE)
    mechanisms = table_mechanisms(DEFAULT_TABLE)
    assert list(mechanisms) == [r.attention for r in spec.rows if r.attention is not None]
    assert {"osciformer", "contiformer", "softmax"} <= set(mechanisms)
    assert mechanisms["softmax"].overrides == next(r.overrides for r in spec.rows if r.attention == "softmax")


def test_a_name_that_is_no_row_is_refused_with_the_rows(capsys):
    """A mechanism the table does not compare is refused before anything is composed, naming the table's rows."""
    with pytest.raises(SystemExit):
        main(["--mechanisms", "osciformer", "not_a_row"])
    err = capsys.readouterr().err
    assert "not_a_row" in err and DEFAULT_TABLE in err and "contiformer" in err


def test_the_reference_must_be_benchmarked(capsys):
    with pytest.raises(SystemExit):
        main(["--mechanisms", "contiformer", "--reference", "osciformer"])
    assert "--reference osciformer is not among --mechanisms" in capsys.readouterr().err
