"""coupledqk post hooks (oscrepro.papers.coupledqk.stats): the Sec. 3.1 t-test equals scipy on hand data, the
paper's test is reproduced from its summary statistics, identical rows give p = 1; Table 5's relative-change row;
Table 1's claim verdicts flip with the data."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from scipy import stats

from oscrepro.papers.coupledqk.stats import (
    claim_notes,
    relative_change_notes,
    ttest_from_stats,
    ttest_notes,
    two_sample_ttest,
    welch_dof,
)
from oscrepro.tables.aggregate import Cell
from oscrepro.tables.spec import load_spec

MLP = [23.5, 24.1, 23.7, 24.3, 23.4, 23.9, 23.6, 24.2, 23.8, 23.6]  # hand data, 10 seeds
HAM = [22.60, 22.66, 22.59, 22.63, 22.61, 22.58, 22.64, 22.62, 22.65, 22.60]


def cells_for(values: dict[str, list[float]], spec) -> dict:
    labels = [r.label for r in spec.rows]
    return {(labels.index(k), "ppl"): Cell(mean=sum(v) / len(v), n=len(v), values=v) for k, v in values.items()}


def hook(spec, values: dict[str, list[float]]) -> list[str]:
    return ttest_notes(spec=spec, cells=cells_for(values, spec), out_dir=Path("."), budget="smoke",
                       results_dir=Path("."), **{k: v for k, v in spec.post.items() if k != "_target_"})


def test_ttest_equals_scipy_on_hand_data() -> None:
    res = two_sample_ttest(MLP, HAM)
    for name, equal_var in (("student", True), ("welch", False)):
        ref = stats.ttest_ind(MLP, HAM, equal_var=equal_var)
        assert res[name]["t"] == pytest.approx(ref.statistic, rel=1e-12)
        assert res[name]["p"] == pytest.approx(ref.pvalue, rel=1e-12)
        assert res[name]["dof"] == pytest.approx(ref.df, rel=1e-12)
    assert res["student"]["dof"] == 18
    sa, sb = stats.tstd(MLP), stats.tstd(HAM)
    assert res["welch"]["dof"] == pytest.approx(welch_dof(sa, 10, sb, 10), rel=1e-12)
    # the hook (the mlp_only spec's keys) reports those numbers: all 10 seeds, then MLP-Only vs Hamiltonian's first 3
    spec = load_spec("coupledqk/mlp_only")
    notes = hook(spec, {"MLP-Only": MLP, "Hamiltonian (coupled)": HAM})
    assert len(notes) == 3
    first3 = two_sample_ttest(MLP, HAM[:3])
    for note, r in ((notes[0], res), (notes[1], first3)):
        for name in ("student", "welch"):
            t, dof, p = r[name]["t"], r[name]["dof"], r[name]["p"]
            assert f"{name.capitalize()} t = {t:.3f}, dof {dof:.2f}, p = {p:.3g}" in note
    assert "Hamiltonian (coupled) n 3," in notes[1] and "MLP-Only n 10," in notes[1]


def test_papers_test_from_summary_statistics() -> None:
    """Sec. 3.1: MLP-Only 23.81 ± 0.31 (n 10) vs Hamiltonian 22.62 ± 0.04 (n 3): p < 0.001 under both tests."""
    res = ttest_from_stats([23.81, 0.31, 10], [22.62, 0.04, 3])
    pooled = math.sqrt((9 * 0.31**2 + 2 * 0.04**2) / 11)
    assert res["student"]["t"] == pytest.approx((23.81 - 22.62) / (pooled * math.sqrt(1 / 10 + 1 / 3)), rel=1e-12)
    assert res["student"]["dof"] == 11 and res["student"]["p"] == pytest.approx(4.84e-5, rel=1e-2)
    assert res["welch"]["t"] == pytest.approx(1.19 / math.sqrt(0.31**2 / 10 + 0.04**2 / 3), rel=1e-12)
    assert res["welch"]["dof"] == pytest.approx(9.89, abs=0.01)
    assert res["welch"]["p"] == pytest.approx(3.75e-7, rel=1e-2)
    for r in res.values():  # p is the two-sided tail of t at the reported dof
        assert r["p"] == pytest.approx(2 * stats.t.sf(r["t"], r["dof"]), rel=1e-9)
    note = hook(load_spec("coupledqk/mlp_only"), {"MLP-Only": MLP, "Hamiltonian (coupled)": HAM})[-1]
    assert "summary statistics" in note and "p = 4.84e-05" in note and "p = 3.75e-07" in note
    assert "The paper states p < 0.001." in note  # the bound is quoted; no verdict word outside the claims engine
    assert "follows" not in note and "does NOT" not in note


def test_identical_rows_give_p_one() -> None:
    res = two_sample_ttest(MLP, list(MLP))
    assert all(r["t"] == 0 and r["p"] == pytest.approx(1.0) for r in res.values())
    assert all(math.isnan(r["p"]) for r in two_sample_ttest([1.0], [2.0, 3.0]).values())  # n < 2: undefined


def test_relative_change_notes_table5() -> None:
    spec = load_spec("coupledqk/table5")
    labels = [r.label for r in spec.rows]
    means = {"Standard": (20.0, 10.0, 40.0), "Diff Attention": (19.0, 9.0, 41.0), "Coupled QK": (19.0, 9.5, 44.0)}
    cells = {(labels.index(k), c): Cell(mean=m) for k, ms in means.items()
             for c, m in zip(("wt103", "pubmed", "owt"), ms, strict=True)}
    (note,) = relative_change_notes(spec=spec, cells=cells, out_dir=Path("."), budget="smoke", results_dir=Path("."),
                                    baseline="Standard", candidate="Coupled QK", columns=["wt103", "pubmed", "owt"],
                                    paper=spec.post["paper"])
    assert "WikiText-103 -5.0 % (paper -6.6 %; from the paper's means -6.6 %)" in note
    assert "PubMed -5.0 % (paper -4.5 %; from the paper's means -4.5 %)" in note
    assert "OpenWebText +10.0 % (paper +10.3 %; from the paper's means +10.4 %)" in note


def test_table1_claim_verdicts_come_from_the_claims_engine() -> None:
    """Table 1's post hook: every verdict word is the claims engine's (oscrepro.claims.verdict) on the same seeds, so
    an ordered pair of means whose Welch interval straddles 0 reads "inconclusive", never "holds (p = 0.08)" (the
    hook's own point comparison before issue 32); its numbers (means, Welch p, std ratio) are unchanged."""
    from oscrepro.claims import verdict as V

    spec = load_spec("coupledqk/table1")
    post = {k: v for k, v in spec.post.items() if k != "_target_"}
    labels = [r.label for r in spec.rows]

    def notes(values: dict[str, list[float]]) -> list[str]:
        cells = {(labels.index(k), "ppl"): Cell(mean=sum(v) / len(v), n=len(v), values=v) for k, v in values.items()}
        return claim_notes(spec=spec, cells=cells, out_dir=Path("."), budget="smoke", results_dir=Path("."), **post)

    def stats_of(v: list[float]) -> V.CellStats:
        return V.CellStats(sum(v) / len(v), stats.tstd(v), len(v))

    base = {lab: [30.0, 30.5, 29.5] for lab in labels}
    good = {**base, "Standard": [26.0 + 0.1 * (i % 3 - 1) for i in range(10)],
            "MLP-Only": [24.0 + 0.5 * (i % 5 - 2) for i in range(10)],
            "Hamiltonian (coupled)": [22.0 + 0.02 * (i % 3 - 1) for i in range(10)],
            "Euler (coupled)": [22.1 + 0.02 * (i % 3 - 1) for i in range(10)]}
    out = notes(good)
    assert len(out) == len(post["below"]) + 1
    assert all((" holds at this budget" in n or "reading of this build's seeds:** holds" in n) and "claims engine:" in n
               for n in out), out
    # the paper's numbers are printed for reference, with no verdict of their own
    assert all(n.count("holds") == 2 for n in out[:-1]), out  # the status and the engine's detail, nothing else
    assert all("the claims section's (group-sequential" in n for n in out[:-1]), out  # and where the verdict lives
    # the case the old hook got wrong: means ordered (lower first), Welch p = 0.08, interval straddles 0
    close = {**good, "Hamiltonian (coupled)": [20.0, 24.0, 22.0], "Standard": [25.0, 27.0, 23.5]}
    p = two_sample_ttest(close["Hamiltonian (coupled)"], close["Standard"])["welch"]["p"]
    engine = V.difference(stats_of(close["Hamiltonian (coupled)"]), stats_of(close["Standard"]), "<")
    assert 0.05 < p < 0.2 and engine.status == "inconclusive", (p, engine)
    note = notes(close)[3]
    assert note.startswith("**Claim Hamiltonian (coupled) < Standard, fixed-sample 95 % reading of this build's "
                           "seeds:** inconclusive"), note
    assert f"Welch p = {p:.2g}" in note and engine.detail in note
    bad = {**good, "MLP-Only": [27.0 + 0.02 * (i % 3 - 1) for i in range(10)]}  # the same spread as Hamiltonian
    out = notes(bad)
    assert out[2].startswith("**Claim MLP-Only < Standard, fixed-sample 95 % reading of this build's seeds:** "
                             "contradicted"), out[2]
    assert out[-1].startswith("**Claim std(MLP-Only) > std(Hamiltonian (coupled)) (the paper: about 8 x):** "
                              "inconclusive at this budget"), out[-1]
    ratio = stats.tstd(bad["MLP-Only"]) / stats.tstd(bad["Hamiltonian (coupled)"])
    assert f"= {ratio:.2f}x" in out[-1]
