"""Synthetic SVA: determinism, labels, indices, hard split, invariant nouns, equal-length batches."""

from __future__ import annotations

import numpy as np

from oscrepro.data.sva import INVARIANT, NOUNS, VOCAB, generate
from oscrepro.data.sva_module import SVADataModule


def test_generate_is_deterministic_by_seed():
    assert generate(200, seed=3) == generate(200, seed=3)
    assert generate(200, seed=3) != generate(200, seed=4)


def test_indices_labels_and_hard_flag_are_consistent():
    plural = {p for s, p in NOUNS if s != p}
    singular = {s for s, p in NOUNS if s != p}
    for e in generate(2000, seed=0):
        assert e.tokens[e.verb_idx] == "<verb>" and e.verb_idx == len(e.tokens) - 1
        subj, dist = e.tokens[e.subject_idx], e.tokens[e.distractor_idx]
        assert e.tokens[e.subject_idx - 1] in ("the",) or e.tokens[e.subject_idx - 2] == "the"
        if subj in plural:
            assert e.label == 1
        if subj in singular:
            assert e.label == 0
        if subj not in INVARIANT and dist not in INVARIANT:
            assert e.hard == ((subj in plural) != (dist in plural))
        assert e.invariant_subject == (subj in INVARIANT)
        assert all(0 <= i < len(VOCAB) for i in e.ids)


def test_split_balance_and_invariant_nouns_present():
    ex = generate(4000, seed=1)
    hard = np.mean([e.hard for e in ex])
    assert 0.45 < hard < 0.55
    assert 0.03 < np.mean([e.invariant_subject for e in ex]) < 0.10
    assert {len(e.tokens) for e in ex} == {6, 7, 8}


def test_datamodule_batches_have_one_length_and_disjoint_seed_streams():
    dm = SVADataModule(n_train=300, n_val=100, n_test=100, batch_size=32)
    dm.setup("fit")
    assert dm.splits["train"].examples[:50] != dm.splits["test"].examples[:50]
    for x, y, meta in dm.train_dataloader():
        assert x.shape[0] == y.shape[0] == meta["hard"].shape[0]
        assert (x[:, -1] == VOCAB.index("<verb>")).all()
    fp = dm.fingerprint
    dm2 = SVADataModule(n_train=300, n_val=100, n_test=100, batch_size=32)
    dm2.setup("fit")
    assert dm2.fingerprint == fp and len(fp) == 16


def test_disk_cache_round_trips_exactly_and_is_json(tmp_path, monkeypatch):
    """The cached sentences equal freshly generated ones (types included), from a JSON file: no pickle to load."""
    import json

    from oscrepro.data import paths
    from oscrepro.data.sva_module import generate_cached

    monkeypatch.setenv(paths.CACHE_DIR_ENV, str(tmp_path))
    first, second = generate_cached(300, 5), generate_cached(300, 5)
    assert first == second == generate(300, 5)
    (cached,) = (tmp_path / "sva").iterdir()
    assert cached.suffix == ".json" and len(json.loads(cached.read_text())) == 300
