"""fqo Table 6 reads every seed's model of its source cells (oscrepro/papers/fqo/ode_tables.py): the planned
sources, the aggregation of per-model results into SeedStat cells, and the csv those render to, which the claims of
``conf/table/fqo/table6.yaml`` read with intervals and Figure 7 is redrawn from. Injected numbers, no model."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest

from oscrepro.claims.scoreboard import check_table
from oscrepro.papers.fqo import ode_tables
from oscrepro.tables.render import render_analysis_table
from oscrepro.tables.sources import planned_requests
from oscrepro.tables.spec import SpecError, load_spec
from oscrepro.tables.values import SeedStat

SPEC_ROWS = load_spec("fqo/table6").analysis["rows"]


def _needs(budget: str, seed_index: int | None = None):
    return ode_tables.table6_runs(budget=budget, source_table="fqo/table4", source_column="oscillator",
                                  rows=SPEC_ROWS, seed_index=seed_index)


def test_table6_plans_every_seed_of_each_source_cell(tmp_path: Path) -> None:
    """At budget=cpu Table 4 trains several seeds per cell: Table 6 reads all of them, one run per seed."""
    table4 = load_spec("fqo/table4")
    labels = [r.label for r in table4.rows]
    reqs = planned_requests(_needs("cpu"), "cpu", tmp_path)
    assert list(reqs) == [r["label"] for r in SPEC_ROWS]
    for label, rs in reqs.items():
        seeds = table4.seeds_for("cpu", labels.index(label))
        assert len(seeds) >= 3 and sorted(int(r.cfg.seed) for r in rs) == seeds
        assert len({r.run_dir for r in rs}) == len(seeds)  # distinct runs
    one = planned_requests(_needs("cpu", seed_index=1), "cpu", tmp_path)
    assert all([int(r.cfg.seed) for r in rs] == [1] for rs in one.values())  # seed_index still picks one
    with pytest.raises(SpecError, match="seed_index=9"):
        _needs("cpu", seed_index=9)


def _entry(label: str, seed: int, d_osc: int, conv: float, anti: float, deg: float, err: float, err_seq: float,
           nfev: float = 600.0, ppl: float = 100.0, scipy: bool = False) -> dict:
    """One table6_details.json entry (one model) with the keys table6_row reads; the scipy check's on request."""
    entry = {"label": label, "seed": seed, "run_dir": f"/r/runs/fqo/run{d_osc}s{seed}", "val_ppl": ppl,
             "d_osc": d_osc, "t_max": 30.0, "method": "batched", "n_inits": 5, "frac_converged": conv,
             "frac_apparent_antipodal": anti, "frac_degenerate": deg, "frac_intermediate": 1 - conv - anti - deg,
             "nfev_per_token": nfev, "mean_err": err, "mean_err_sequential": err_seq, "sequential_gain": err / err_seq,
             "wall_s": 2.0, "n_solves": 1000}
    if scipy:
        entry.update(scipy_n_solves=40, scipy_nfev_per_token=610.0, scipy_frac_converged=conv, scipy_wall_s=4.0,
                     agree_max_abs_err_diff=1e-11, agree_verdict_frac=1.0, agree_nfev_frac=1.0)
    return entry


def test_table6_row_is_mean_std_and_n_over_the_seeds_models() -> None:
    seeds = [_entry("x", 0, 2, 0.90, 0.06, 0.01, 4e-3, 1e-3, nfev=math.nan, ppl=110.0, scipy=True),
             _entry("x", 1, 2, 0.80, 0.12, 0.02, 6e-3, 2e-3, nfev=math.nan, ppl=120.0),
             _entry("x", 2, 2, 0.70, 0.18, 0.03, 8e-3, 3e-3, nfev=math.nan, ppl=130.0)]
    row = ode_tables.table6_row(2, {"frac": 84.3}, seeds)
    frac = row["Frac < 0.01 (%)"]
    assert isinstance(frac, SeedStat) and frac.n == 3
    assert frac.mean == pytest.approx(80.0) and frac.std == pytest.approx(10.0)
    anti, deg = row["App. antipodal (%)"], row["Degenerate (%)"]
    assert (anti.mean, anti.std, anti.n) == pytest.approx((12.0, 6.0, 3))
    assert (deg.mean, deg.std, deg.n) == pytest.approx((2.0, 1.0, 3))
    assert row["Intermediate (%)"].mean == pytest.approx(6.0) and row["Intermediate (%)"].std == pytest.approx(3.0)
    assert (row["mean err random"].mean, row["mean err random"].std) == pytest.approx((6e-3, 2e-3))
    assert (row["mean err sequential"].mean, row["mean err sequential"].std) == pytest.approx((2e-3, 1e-3))
    assert (row["run val PPL"].mean, row["run val PPL"].std, row["run val PPL"].n) == pytest.approx((120.0, 10.0, 3))
    # a closed-form solve counts no nfev: the scipy check's, which only the first seed's model has (n = 1)
    assert (row["nfev/tok"].mean, row["nfev/tok"].n) == (610.0, 1)
    assert row["scipy: verdicts agree (%)"] == 100.0 and row["scipy: max abs err diff"] == 1e-11  # first model's
    assert row["run"] == "run2s0 run2s1 run2s2" and row["paper Frac < 0.01 (%)"] == 84.3
    assert row["paper Degenerate (%)"] is None
    no_seq = ode_tables.table6_row(2, {}, [{**s, "mean_err_sequential": math.nan} for s in seeds])
    assert no_seq["mean err sequential"] is None  # no value from any model: a dash, not "nan ± nan"
    with pytest.raises(ValueError, match="no seed"):
        ode_tables.table6_row(2, {}, [])


def _table(n_seeds: int) -> tuple[list[str], list[dict]]:
    """Rows at d_osc 2 / 8 / 32 from ``n_seeds`` models each, well apart in the direction the paper claims."""
    rows = []
    for i, spec_row in enumerate(SPEC_ROWS):
        d = int(spec_row["d_osc"])
        seeds = [_entry(spec_row["label"], s, d, 0.80 + 0.08 * i + 0.002 * s, 0.12 - 0.05 * i - 0.001 * s,
                        0.04 - 0.015 * i - 0.001 * s, 5e-3 + 1e-4 * s, 1e-3 + 1e-4 * s, scipy=s == 0)
                 for s in range(n_seeds)]
        rows.append(ode_tables.table6_row(d, spec_row["paper"], seeds))
    return list(rows[0]), rows


def test_table6_csv_gives_its_claims_intervals_and_redraws_figure7(tmp_path: Path) -> None:
    """The rendered csv carries each per-model column's std and n; the spec's claims read them (decided, with an
    interval, at 3 seeds; inconclusive at 1), and Figure 7 is redrawn from the mean columns."""
    spec = load_spec("fqo/table6")
    verdicts = {}
    for n in (1, 3):
        results = tmp_path / f"results{n}"
        out = results / "fqo" / "cpu"
        columns, rows = _table(n)
        md = render_analysis_table(spec, "cpu", columns, rows, out, ["note"])
        with md.with_suffix(".csv").open(newline="") as fh:
            lines = list(csv.DictReader(line for line in fh if not line.startswith("#")))
        assert [r["d_osc"] for r in lines] == ["2", "8", "32"]
        assert {"Frac < 0.01 (%)__std", "Frac < 0.01 (%)__n", "mean err sequential__n"} <= set(lines[0])
        assert lines[0]["Frac < 0.01 (%)__n"] == str(n) and float(lines[0]["Frac < 0.01 (%)"]) == pytest.approx(
            rows[0]["Frac < 0.01 (%)"].mean)  # the mean at full precision, under the column's own name
        verdicts[n] = {c.claim.id: c.verdict for c in check_table("fqo/table6", "cpu", results)}
        assert len(verdicts[n]) == 4  # every claim of the spec is judged at cpu
        if n == 3:
            text = md.read_text()
            row2 = rows[0]
            assert f"| {row2['Frac < 0.01 (%)'].mean:.2f} ± {row2['Frac < 0.01 (%)'].std:.2f} |" in text
            assert f"{row2['mean err random'].mean:.2e} ± {row2['mean err random'].std:.2e}" in text  # the spec's .2e
            (out / "fig7a.csv").write_text("d_osc,t_max,method,frac_converged,frac_apparent_antipodal,paper_frac\n"
                                           "2,30,closed_form,0.8,0.1,84.3\n2,100,closed_form,0.9,0.05,91.3\n")
            png = ode_tables.redraw_figure7(spec, "cpu", out, lines)
            assert png.stat().st_size > 0
    assert all(v.status == "inconclusive" for v in verdicts[1].values())  # n = 1: no interval
    assert all(v.status == "holds" and not math.isnan(v.ci[0]) for v in verdicts[3].values()), verdicts[3]


def test_figure7b_points_are_the_seed_means() -> None:
    _, rows = _table(3)
    points = ode_tables.figure7b_rows(rows, 30.0)
    assert [p["d_osc"] for p in points] == [2, 8, 32]
    assert points[0]["frac_apparent_antipodal"] == pytest.approx(rows[0]["App. antipodal (%)"].mean / 100)
    from_csv = ode_tables.figure7b_rows([{"d_osc": "8", "App. antipodal (%)": "5.5", "Degenerate (%)": "0.25"}], 30)
    assert from_csv == [{"d_osc": 8, "t_max": 30, "frac_apparent_antipodal": 0.055, "frac_degenerate": 0.0025}]
