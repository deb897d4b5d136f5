"""Seed-matched pairs (oscrepro.claims.seed_pairs): a claim that declares two models' runs seed-matched is judged by
the paired t over seeds from its ``from_look`` on, by Welch before it, and never pairs silently otherwise; and the
design fqo App. C declares it for does start both rows from the same weights at one seed."""

from __future__ import annotations

from pathlib import Path

import lightning as L
import pytest
import torch
from hydra.utils import instantiate
from scipy import stats

from oscrepro.claims import seed_pairs
from oscrepro.claims.scoreboard import Claim, ClaimError, check_claim, load_claims
from oscrepro.tables.plan import plan
from oscrepro.tables.spec import load_spec

PAIRING = {"from_look": 3, "why": "identity-initialised extra parameter"}
# per seed: the variant tracks the baseline within a few tenths while seeds differ by several units
BASE = [325.47, 323.75, 322.74, 323.03, 319.91]
VARIANT = [325.45, 324.01, 322.22, 323.83, 320.01]


def _records(tmp: Path, prefix: str, seeds: list[int]) -> list[str]:
    ids = [f"{prefix}{s:02d}" for s in seeds]
    for rid, s in zip(ids, seeds, strict=True):
        d = tmp / "runs" / "fqo" / "lm_wikitext2" / rid
        d.mkdir(parents=True)
        (d / "config.yaml").write_text(f"seed: {s}\nlr: 0.001\n")
    return ids


def _cells(a_ids: list[str], b_ids: list[str]) -> dict:
    def line(ids, vals):
        mean = sum(vals) / len(vals)
        std = (sum((v - mean) ** 2 for v in vals) / (len(vals) - 1)) ** 0.5
        return {"ours_mean": str(mean), "ours_std": str(std), "n": str(len(vals)),
                "units": ";".join(f"{u}={v!r}" for u, v in zip(ids, vals, strict=True))}
    return {("L3", "oscillator"): line(a_ids, VARIANT), ("L3", "baseline"): line(b_ids[::-1], BASE[::-1])}


def _claim(pairing: dict | None = PAIRING) -> Claim:
    check = {"kind": "difference", "a": {"row": "L3", "column": "oscillator"},
             "b": {"row": "L3", "column": "baseline"}, "sign": ">", "margin": -1.0}
    return Claim("fqo/appc", "x-no-gain", "no gain", "App. C", check | ({"pair_seeds": pairing} if pairing else {}))


def test_declared_pairing_is_the_paired_t_over_seeds(tmp_path):
    # the two cells list their seeds in different orders: pairs are matched by seed, not by position
    a_ids, b_ids = _records(tmp_path, "a", [0, 1, 2, 3, 4]), _records(tmp_path, "b", [0, 1, 2, 3, 4])
    cells = _cells(a_ids, b_ids)
    v = check_claim(_claim(), cells, tmp_path)
    ref = stats.ttest_rel(VARIANT, BASE).confidence_interval(0.95)
    assert v.test == "paired t (seed-matched)" and "seed-matched runs of the two models" in v.detail
    assert v.ci == pytest.approx((ref.low, ref.high), rel=1e-9)
    assert v.status == "holds"  # the per-seed differences are a few tenths: wholly above −1
    welch = check_claim(_claim(None), cells, tmp_path)
    assert welch.test == "Welch t" and welch.status == "inconclusive"  # ±2 PPL across seeds swamps it


def test_looks_before_from_look_stay_welch(tmp_path):
    cells = _cells(_records(tmp_path, "a", [0, 1, 2, 3, 4]), _records(tmp_path, "b", [0, 1, 2, 3, 4]))
    assert check_claim(_claim(), cells, tmp_path, look=2).test == "Welch t"
    assert check_claim(_claim(), cells, tmp_path, look=3).test == "paired t (seed-matched)"


def test_never_pairs_silently(tmp_path):
    cells = _cells(_records(tmp_path, "a", [0, 1, 2, 3, 4]), _records(tmp_path, "b", [0, 1, 2, 3, 5]))
    with pytest.raises(ClaimError, match="different seeds"):
        check_claim(_claim(), cells, tmp_path)
    with pytest.raises(ClaimError, match="results directory"):
        check_claim(_claim(), cells)
    missing = _cells(["a00", "a01", "a02", "a03", "zz99"], ["b00", "b01", "b02", "b03", "b05"])
    with pytest.raises(FileNotFoundError, match="zz99"):
        check_claim(_claim(), missing, tmp_path)


@pytest.mark.parametrize(("pairing", "kind", "match"), [
    ({"from_look": 0, "why": "x"}, "difference", "look number"),
    ({"from_look": 2, "why": " "}, "difference", "why is empty"),
    ({"from_look": 2}, "difference", "write it as"),
    (PAIRING, "ordering", "difference check"),
])
def test_malformed_pairing_is_refused(tmp_path, pairing, kind, match):
    (tmp_path / "table" / "p").mkdir(parents=True)
    cells = "cells: [{row: a, column: c}, {row: b, column: c}], direction: increasing" if kind == "ordering" else (
        "a: {row: a, column: c}, b: {row: b, column: c}, sign: '>'")
    pair = "{" + ", ".join(f"{k}: {v!r}" for k, v in pairing.items()) + "}"
    (tmp_path / "table" / "p" / "t.yaml").write_text(
        f"claims:\n  - {{id: x, text: t, where: w, check: {{kind: {kind}, {cells}, pair_seeds: {pair}}}}}\n")
    assert seed_pairs.validate({"kind": kind, "pair_seeds": pairing}) is not None
    with pytest.raises(ClaimError, match=match):
        load_claims("p/t", tmp_path)


@pytest.mark.parametrize("row", [1, 2])  # L3 (relative-position anchors), L4 (coupling gain)
def test_appc_rows_start_from_their_baselines_weights(row):
    """What makes fqo App. C's pairing common random numbers: at one seed the composed L3/L4 model and its
    baseline draw the same weights (the added δ = 0 / β = 1 take nothing from the random stream)."""
    spec = load_spec("fqo/appc")
    assert all("pair_seeds" in c.check for c in load_claims("fqo/appc") if c.check["a"]["row"] == spec.rows[row].label)
    cells = plan(spec, "cpu")
    variant, base = cells[(row, "oscillator")][0].cfg, cells[(row, "baseline")][0].cfg
    assert variant.seed == base.seed
    models = []
    for cfg in (variant, base):
        L.seed_everything(int(cfg.seed))
        models.append(instantiate(cfg.model, vocab_size=97))
    sv, sb = models[0].state_dict(), models[1].state_dict()
    extra = set(sv) - set(sb)
    assert extra and all(k.endswith(("rel_angle", "gain")) for k in extra)
    assert all(torch.equal(sv[k], sb[k]) for k in sb)
    assert all(torch.equal(sv[k], torch.full_like(sv[k], 1.0 if k.endswith("gain") else 0.0)) for k in extra)
