"""The leaderboard board (oscrepro/leaderboard/board.py): ranks, the rendered board and figure from synthetic
task tables whose ranking is known, and the engine's matched widths on the real task specs."""

from __future__ import annotations

import copy
import csv
import math
from pathlib import Path

import pytest

from oscrepro.leaderboard.board import Entry, mechanisms, rank, read_task, render_board
from oscrepro.leaderboard.figure import plot_board
from oscrepro.tables.build import matched_widths
from oscrepro.tables.match import MatchError, with_matched_rows
from oscrepro.tables.spec import Row, SpecError, load_spec


def _entry(mean: float, n: int = 3) -> Entry:
    return Entry(mean, 0.1, n, 0, 1000.0)


def test_rank_higher_and_lower_with_ties_and_missing() -> None:
    entries = {"a": _entry(0.9), "b": _entry(0.95), "c": _entry(0.9), "d": _entry(math.nan, n=0)}
    rank(entries, "higher")
    assert [entries[k].rank for k in "abcd"] == [2, 1, 2, None]  # ties share the better rank
    rank(entries, "lower")
    assert [entries[k].rank for k in "abcd"] == [1, 3, 1, None]


def _write_task_csv(path: Path, scores: dict[str, float], params: dict[str, int], missing: tuple[str, ...] = ()
                    ) -> None:
    fields = ["row", "column", "ours_mean", "ours_std", "ours_count", "n", "n_diverged", "n_failed", "n_missing",
              "paper_mean", "paper_std", "budget"]
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields)
        w.writeheader()
        for label, score in scores.items():
            gone = label in missing
            for col, val in (("acc", score), ("params", params[label])):
                w.writerow({"row": label, "column": col, "ours_mean": "nan" if gone else val, "ours_std": 0.5,
                            "ours_count": "", "n": 0 if gone else 3, "n_diverged": 0, "n_failed": 0,
                            "n_missing": 3 if gone else 0,
                            "paper_mean": "nan", "paper_std": "nan", "budget": "cpu"})


def test_board_from_synthetic_task_tables(tmp_path: Path) -> None:
    scores = {"softmax": 96.0, "fqo": 97.0, "ssa": 95.0, "coupled_qk": 90.0, "diff": 97.0}
    params = {"softmax": 12194, "fqo": 12195, "ssa": 12196, "coupled_qk": 12165, "diff": 12197}
    _write_task_csv(tmp_path / "sva.csv", scores, params, missing=("ssa",))
    task = read_task("leaderboard/sva", tmp_path / "sva.csv", "cpu")
    assert {m: e.rank for m, e in task.entries.items()} == {"softmax": 3, "fqo": 1, "ssa": None, "coupled_qk": 4,
                                                             "diff": 1}
    md = render_board([task], {"fqo": (1.35, 1.05)}, "cpu", ["- header"])
    fqo_line = next(line for line in md.splitlines() if line.startswith("| fqo |"))
    assert "97.00 ± 0.50 (n=3) **#1**" in fqo_line and "| 1.35 | 1.05 |" in fqo_line
    assert "— (3 missing)" in next(line for line in md.splitlines() if line.startswith("| ssa |"))
    assert "| coupled_qk | 12,165 |" in md  # the parameter count of every entry
    assert "| osciformer |" not in md  # not a row of this task: absent, not invented
    assert "left out: **osciformer** — its attention alone outgrows" in md  # ... and the spec says why
    plot_board([task], tmp_path / "board.png", tuple(mechanisms()))
    assert (tmp_path / "board.png").stat().st_size > 10_000


def test_missing_task_table_gives_no_entries(tmp_path: Path) -> None:
    task = read_task("leaderboard/mqar", tmp_path / "absent.csv", "cpu")
    assert task.entries == {} and task.better == "higher"


def test_engine_matches_every_row_of_a_task(tmp_path: Path) -> None:
    spec, notes = matched_widths(load_spec("leaderboard/uea"), "smoke", [])
    assert all(r.overrides[-1].startswith("model.d_ff=") for r in spec.rows)
    assert "**Matched parameters:**" in notes[-1] and all(r.label in notes[-1] for r in spec.rows)
    ref = dict(o.split("=", 1) for o in spec.rows[0].overrides if "=" in o and not o.startswith("~"))
    assert ref["model.d_ff"] == "32"  # the reference keeps its experiment's own width (smoke: d_ff 32)


def test_unmatchable_row_is_one_clear_error() -> None:
    spec = copy.deepcopy(load_spec("leaderboard/sva"))
    spec.rows.append(Row("osciformer", ["attention=osciformer"]))
    with pytest.raises(MatchError, match=r"osciformer: nearest d_ff=1 gives"):
        with_matched_rows(spec, "cpu")


def test_budget_map_and_match_are_validated(tmp_path: Path) -> None:
    spec = load_spec("leaderboard/sva")
    assert "budget=paper" in spec.cell_overrides(0, "acc", "cpu", [])
    assert "budget=smoke" in spec.cell_overrides(0, "acc", "smoke", [])
    table = tmp_path / "table" / "x"
    table.mkdir(parents=True)
    base = Path(spec.path).read_text()
    (table / "bad_map.yaml").write_text(base.replace("budget_map: {cpu: paper}", "budget_map: {cpu: huge}"))
    with pytest.raises(SpecError, match="budget_map"):
        load_spec("x/bad_map", conf_dir=tmp_path)
    (table / "bad_ref.yaml").write_text(base.replace("reference: softmax", "reference: transformer"))
    with pytest.raises(SpecError, match="match needs knob"):
        load_spec("x/bad_ref", conf_dir=tmp_path)
