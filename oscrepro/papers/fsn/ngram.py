"""Where a character-level language model stands: the unigram and bigram levels of its corpus.

A char LM that has learned only symbol frequencies sits at the unigram level, one that reads only the previous
symbol at the bigram level; attention over the context is what takes a model below that. Tables of char LMs trained
at scaled-down budgets state these two levels beside their numbers (a ``post`` hook of the table spec), so a reader
sees which rows left which regime: fsn Table 1 and the ladder at ``cpu`` (issue 16), where FSN runs that never
switch their attention on stall at the bigram level.

The levels are cross-entropies in bits per symbol on the validation split of add-one (Laplace) smoothed n-gram
models fit on the training split: an upper bound on what those model classes reach, which is what "the model has
left the regime" needs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from oscrepro.data.integrity import setup_data
from oscrepro.runs.compose import compose_run


def ngram_levels(train: np.ndarray, val: np.ndarray, vocab: int) -> dict[str, float]:
    """Bits per symbol on ``val`` of add-one smoothed unigram and bigram models fit on ``train`` (symbol ids in
    ``[0, vocab)``). The bigram model conditions each ``val[i]`` (i >= 1) on ``val[i - 1]``."""
    train = np.asarray(train, dtype=np.int64)
    val = np.asarray(val, dtype=np.int64)
    if train.size < 2 or val.size < 2:
        raise ValueError("n-gram levels need at least two training and two validation symbols")
    uni = np.bincount(train, minlength=vocab).astype(np.float64) + 1.0
    uni /= uni.sum()
    big = np.ones((vocab, vocab))
    np.add.at(big, (train[:-1], train[1:]), 1.0)
    big /= big.sum(axis=1, keepdims=True)
    return {"unigram": float(-np.mean(np.log2(uni[val]))),
            "bigram": float(-np.mean(np.log2(big[val[:-1], val[1:]])))}


def corpus_levels(overrides: list[str], budget: str) -> dict[str, float]:
    """The n-gram levels of the data a run composed from ``overrides`` at ``budget`` trains and validates on. The
    data module must expose ``splits`` (the char-level modules do)."""
    cfg = compose_run([*overrides, f"budget={budget}"])
    dm = setup_data(cfg.data)
    splits = getattr(dm, "splits", None)
    if not splits:
        raise TypeError(f"{type(dm).__name__} exposes no token splits: n-gram levels are for char-level corpora")
    return ngram_levels(splits["train"], splits["val"], int(dm.vocab_size))


def ngram_notes(spec: Any, cells: dict, out_dir: Path, budget: str, results_dir: Path,
                corpora: dict[str, list[str]]) -> list[str]:
    """Table ``post`` hook: one header line per corpus (``name: overrides`` composing a run on it) with its
    unigram and bigram levels on the whole validation split."""
    notes = []
    for name, overrides in corpora.items():
        lv = corpus_levels(list(overrides), budget)
        notes.append(f"**{name}, reference levels** (add-one n-grams fit on the training split, whole validation "
                     f"split): unigram {lv['unigram']:.3f}, bigram {lv['bigram']:.3f} bits/char: a row near the "
                     "bigram level uses little more than the previous character")
    return notes
