"""Claims on analysis cells that average seeds (oscrepro/claims/scoreboard.py read_cells, _stats): read from the
csv's numeric columns (mean, ``__std``, ``__n``), never from the rendered "mean ± std"; a rendered one without
numeric columns (a csv from before they existed) is refused, not read as one seed."""

from __future__ import annotations

from pathlib import Path

import pytest

from oscrepro.claims.scoreboard import Claim, ClaimError, _float, _stats, check_claim, read_cells
from oscrepro.tables.render import analysis_csv
from oscrepro.tables.values import SeedStat

OURS = "ours (3 seeds)"
CLAIM = Claim("coupledqk/table12", "l0-higher", "coupled raises L0", "App. D",
              {"kind": "difference", "a": {"row": f"Coupled | {OURS}", "column": "L0"},
               "b": {"row": f"Standard | {OURS}", "column": "L0"}, "sign": ">"})


def _write(path: Path, columns: list[str], rows: list[dict]) -> Path:
    import csv

    names, lines = analysis_csv(columns, rows)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=names)
        w.writeheader()
        w.writerows(lines)
    return path


def test_a_seed_stat_cell_is_read_with_its_n(tmp_path: Path) -> None:
    """Table 12's layout ("first | second" row keys, paper rows in the same columns): n = 3 and the seeds' std,
    so a difference gets a Welch interval instead of "n = 1 < 2 seeds"."""
    rows = [{"Attention": "Standard", "Values": OURS, "L0": SeedStat.of([25.0, 27.0, 30.8], 1)},
            {"Attention": "Standard", "Values": "paper", "L0": "28.6"},
            {"Attention": "Coupled", "Values": OURS, "L0": SeedStat.of([44.0, 48.0, 54.1], 1)},
            {"Attention": "Coupled", "Values": "paper", "L0": "32.8"}]
    cells = read_cells(_write(tmp_path / "coupledqk" / "cpu" / "table12.csv", ["Attention", "Values", "L0"], rows))
    assert {c for _, c in cells} == {"Values", "L0"}  # the numeric columns are no cells of their own
    keys = {f"{a} | {v}" for a in ("Standard", "Coupled") for v in (OURS, "paper")}
    assert {r for r, c in cells if c == "L0"} == keys
    a = _stats(cells, {"row": f"Standard | {OURS}", "column": "L0"}, CLAIM)
    assert (a.n, a.mean, round(a.std, 6)) == (3, pytest.approx(27.6), round(rows[0]["L0"].std, 6))
    paper = _stats(cells, {"row": "Standard | paper", "column": "L0"}, CLAIM)
    assert (paper.n, paper.mean) == (1, 28.6)  # a plain number is one value
    verdict = check_claim(CLAIM, cells)
    assert verdict.status == "holds" and "n = 1" not in verdict.detail and "n 3/3" in verdict.detail


def test_a_rendered_mean_std_without_numeric_columns_is_refused(tmp_path: Path) -> None:
    """The committed Table 12 csv before this change: "48.7 ± 5.0" in the cell and nothing else. Its leading number
    must not become a one-seed value; the error names the cell, the csv and the command that rebuilds it."""
    path = tmp_path / "coupledqk" / "cpu" / "table12.csv"
    path.parent.mkdir(parents=True)
    path.write_text(f"Attention,Values,L0\nStandard,{OURS},27.6 ± 2.8\nStandard,paper,28.6\n"
                    f"Coupled,{OURS},48.7 ± 5.0\nCoupled,paper,32.8\n")
    cells = read_cells(path)
    with pytest.raises(ClaimError, match=r"claim 'l0-higher': cell \('Coupled \| ours \(3 seeds\)', 'L0'\) of .*"
                                         r"table12.csv is '48.7 ± 5.0', a rendered mean ± std without its numeric "
                                         r"columns \(L0__std, L0__n\).*--budget cpu"):
        check_claim(CLAIM, cells)
    assert _stats(cells, {"row": "Coupled | paper", "column": "L0"}, CLAIM).mean == 32.8  # other cells still read
    with pytest.raises(ClaimError, match="rendered mean ± std, not one number"):
        _float("27.6 ± 2.8 (n=3)")


def test_a_cell_without_a_number_has_no_seeds(tmp_path: Path) -> None:
    """coupledqk Table 7's MNLI cells read "not run: no MNLI data here": no number, so n = 0 (the claim says
    "a has n = 0"), not one seed of value nan ("n = 1 < 2 seeds" was what CLAIMS.md printed)."""
    rows = [{"Attention": "Standard", "MNLI (ours)": "not run: no MNLI data here", "SST-2 (ours)": "72.7"},
            {"Attention": "Coupled", "MNLI (ours)": "not run: no MNLI data here", "SST-2 (ours)": "—"}]
    cells = read_cells(_write(tmp_path / "coupledqk" / "cpu" / "table7.csv",
                              ["Attention", "MNLI (ours)", "SST-2 (ours)"], rows))
    claim = Claim("coupledqk/table7", "mnli", "no gain", "Sec. 3.4",
                  {"kind": "difference", "a": {"row": "Coupled", "column": "MNLI (ours)"},
                   "b": {"row": "Standard", "column": "MNLI (ours)"}, "sign": "<", "margin": 1.0})
    assert _stats(cells, {"row": "Standard", "column": "MNLI (ours)"}, claim).n == 0
    assert _stats(cells, {"row": "Coupled", "column": "SST-2 (ours)"}, claim).n == 0  # "—": no value
    assert _stats(cells, {"row": "Standard", "column": "SST-2 (ours)"}, claim).n == 1  # a number: one value
    verdict = check_claim(claim, cells)
    assert verdict.status == "inconclusive" and "n = 0" in verdict.detail and "n = 1" not in verdict.detail
