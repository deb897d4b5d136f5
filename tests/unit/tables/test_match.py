"""Matched-count width search (oscrepro/tables/match.py) for every vector-contract mechanism, on the fqo LM and
SVA/KWS backbones: within 1 % of the softmax model, counted on the built model."""

from __future__ import annotations

import pytest

from oscrepro.leaderboard.board import mechanisms
from oscrepro.tables.match import (
    MatchError,
    builder,
    match_all,
    match_d_ff,
    n_params,
)

# every mechanism the leaderboard specs name (their attention configs): a new row there is matched here too
VECTOR_MECHANISMS = tuple(mechanisms().values())
BACKBONES = [("causal_lm", {"vocab_size": 256}, {}),
             ("encoder_classifier", {"vocab_size": 64, "n_classes": 2}, {"n_heads": 2})]  # Diff needs even heads


@pytest.mark.parametrize(("backbone", "dims", "overrides"), BACKBONES)
def test_every_mechanism_matches_softmax_within_one_percent(backbone, dims, overrides) -> None:
    matched = match_all(backbone, dims, VECTOR_MECHANISMS, **overrides)
    assert [m.attention for m in matched] == list(VECTOR_MECHANISMS)
    target = matched[0].target
    assert matched[0].params == target  # softmax at the backbone's own d_ff is the reference
    for m in matched:
        assert abs(m.params - target) <= 0.01 * target, m
        assert n_params(builder(backbone, m.attention, dims, **overrides)(m.d_ff)) == m.params  # a real count
    # the search is not vacuous: the mechanisms' counts at the reference d_ff differ, and differ by more than 1 %
    base_ff = matched[0].d_ff
    raw = {m: n_params(builder(backbone, m, dims, **overrides)(base_ff)) for m in VECTOR_MECHANISMS}
    assert max(abs(v - target) / target for v in raw.values()) > 0.01


def test_unreachable_target_is_one_clear_error() -> None:
    build = builder("causal_lm", "osciformer", {"vocab_size": 256})
    with pytest.raises(MatchError, match=r"osciformer: nearest d_ff=1 gives .* from 1,000"):
        match_d_ff(build, 1000, 128, "osciformer")
