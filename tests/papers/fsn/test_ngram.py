"""The n-gram reference levels of char-LM tables (oscrepro.papers.fsn.ngram) against hand-computed values."""

import math

import numpy as np
import pytest

from oscrepro.papers.fsn.ngram import ngram_levels


def test_levels_by_hand():
    train = np.array([0, 1, 0, 1, 0, 1])  # counts 3/3 of 3 symbols; bigrams 0->1 x3, 1->0 x2
    val = np.array([0, 1, 2])
    lv = ngram_levels(train, val, vocab=3)
    uni = np.array([4, 4, 1]) / 9  # add-one
    assert lv["unigram"] == pytest.approx(-np.mean(np.log2(uni[[0, 1, 2]])))
    # P(1 | 0) = (3 + 1) / (3 + 3); P(2 | 1) = (0 + 1) / (2 + 3)
    assert lv["bigram"] == pytest.approx(-(math.log2(4 / 6) + math.log2(1 / 5)) / 2)


def test_a_deterministic_cycle_is_near_zero_bigram_and_uniform_unigram():
    cyc = np.tile(np.arange(8), 2000)
    lv = ngram_levels(cyc, cyc[:800], vocab=8)
    assert lv["unigram"] == pytest.approx(3.0, abs=1e-3)
    assert lv["bigram"] < 0.01


def test_too_short_raises():
    with pytest.raises(ValueError):
        ngram_levels(np.array([1]), np.array([1, 2]), vocab=3)
