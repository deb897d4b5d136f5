"""MQAR generator and data module (coupledqk Sec. 3.3; Zoology semantics): key/value halves, labels only at the
queries and equal to the paired value, power-law gaps, determinism and disjoint split streams."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from oscrepro.data.mqar import DIFFICULTIES, IGNORE, MQARDataModule, gap_probabilities, generate_mqar


def _gen(n: int = 500, seed: int = 0, **kw: object) -> tuple[np.ndarray, np.ndarray]:
    args = {"vocab_size": 64, "seq_len": 64, "n_kv_pairs": 4, "power_a": 0.01, "random_non_queries": True, **kw}
    return generate_mqar(n, rng=np.random.default_rng(seed), **args)


@pytest.mark.parametrize("difficulty", sorted(DIFFICULTIES))
def test_labels_are_the_values_of_the_queried_keys(difficulty: str) -> None:
    seq_len, n = DIFFICULTIES[difficulty]
    x, y = (a.astype(np.int64) for a in _gen(300, seq_len=seq_len, n_kv_pairs=n))
    keys, values = x[:, 0 : 2 * n : 2], x[:, 1 : 2 * n : 2]  # (N, n)
    assert ((1 <= keys) & (keys < 32)).all() and ((32 <= values) & (values < 64)).all()  # disjoint halves
    assert all(len(set(r)) == n for r in keys) and all(len(set(r)) == n for r in values)  # distinct per sequence
    labelled = y != IGNORE
    assert (labelled.sum(axis=1) == n).all()  # every key queried exactly once
    assert not labelled[:, : 2 * n].any()  # no label inside the key-value context
    assert set(np.unique(y[~labelled])) == {IGNORE}
    for row, t in zip(*np.nonzero(labelled), strict=True):
        j = np.flatnonzero(keys[row] == x[row, t])
        assert len(j) == 1 and y[row, t] == values[row, j[0]]  # the target is the value paired with that key
    queried = np.sort(np.where(labelled, x, 0), axis=1)[:, -n:]
    assert (queried == np.sort(keys, axis=1)).all()  # the n queries are the n keys


def test_filler_is_zero_or_uniform_random() -> None:
    x, y = _gen(200, random_non_queries=False)
    filler = np.ones_like(x, dtype=bool)
    filler[:, :8] = False
    filler[y != IGNORE] = False
    assert (x[filler] == 0).all()
    xr, _ = _gen(200, random_non_queries=True)
    counts = np.bincount(xr[:, 8:].ravel().astype(np.int64), minlength=64)
    assert counts.min() > 0  # the whole vocabulary (keys and values too) appears as filler


def test_query_gaps_follow_zoologys_sequential_weighted_draw() -> None:
    """The Gumbel top-k draw has the law of numpy's ``choice(space, n, replace=False, p)`` (zoology's call)."""
    seq_len, n, rows = 64, 4, 4000
    space = (seq_len - 2 * n) // 2
    _, y = _gen(rows, seed=5, seq_len=seq_len, n_kv_pairs=n)
    gaps = (np.nonzero(y != IGNORE)[1] - 2 * n) // 2
    ours = np.bincount(gaps, minlength=space) / rows  # P(gap g is used)
    rng, p = np.random.default_rng(6), gap_probabilities(space, 0.01)
    ref = np.bincount(np.concatenate([rng.choice(space, n, replace=False, p=p) for _ in range(rows)]),
                      minlength=space) / rows
    assert np.abs(ours - ref).max() < 0.04, (ours.round(3), ref.round(3))
    assert ours[0] > 2 * ours[-1]  # short gaps dominate


def test_same_seed_same_data_and_disjoint_split_streams() -> None:
    a = MQARDataModule(n_train=256, n_test=128, seq_len=64, n_kv_pairs=4, seed=0)
    b = MQARDataModule(n_train=256, n_test=128, seq_len=64, n_kv_pairs=4, seed=0)
    c = MQARDataModule(n_train=256, n_test=128, seq_len=64, n_kv_pairs=4, seed=1)
    for dm in (a, b, c):
        dm.setup("fit")
    assert a.fingerprint == b.fingerprint and len(a.fingerprint) == 16
    assert all(torch.equal(a.splits[s].inputs, b.splits[s].inputs) for s in a.splits)
    assert a.fingerprint != c.fingerprint and not torch.equal(a.splits["train"].inputs, c.splits["train"].inputs)
    train = {tuple(r) for r in a.splits["train"].inputs.tolist()}
    for split in ("val", "test"):  # different streams: no sequence of val/test also in train
        assert not any(tuple(r) in train for r in a.splits[split].inputs.tolist())
    assert not torch.equal(a.splits["val"].inputs, a.splits["test"].inputs)


def test_data_module_batches_and_dims() -> None:
    dm = MQARDataModule(n_train=100, n_test=40, batch_size=16)  # medium defaults: T 128, 8 pairs
    dm.setup("fit")
    assert dm.dims == {"vocab_size": 64, "seq_len": 128}
    assert "synthetic MQAR" in dm.source and "8 KV pairs" in dm.source and "seed=0" in dm.source
    x, y = next(iter(dm.train_dataloader()))
    assert x.shape == y.shape == (16, 128) and x.dtype == y.dtype == torch.long
    assert ((y != IGNORE).sum(dim=1) == 8).all() and int(x.max()) < 64
    assert [len(dm.splits[s]) for s in ("train", "val", "test")] == [100, 40, 40]
    assert sum(len(b[0]) for b in dm.test_dataloader()) == 40


@pytest.mark.parametrize("kw", [{"seq_len": 63}, {"seq_len": 12, "n_kv_pairs": 4}, {"n_kv_pairs": 40}])
def test_impossible_settings_are_refused(kw: dict) -> None:
    with pytest.raises(ValueError):
        _gen(4, **kw)


def test_impossible_settings_are_refused_at_construction_in_one_message() -> None:
    """The data module checks its setting when constructed (before any generation, so a run is refused, not
    failed): one ConfigError naming every bad key and how to fix it."""
    from oscrepro.runs.validate import ConfigError

    with pytest.raises(ConfigError) as err:
        MQARDataModule(vocab_size=64, seq_len=130, n_kv_pairs=40)  # too short for 40 pairs, and too few keys
    msg = str(err.value)
    assert "\n" not in msg and "data.seq_len=130: must be even and >= 4 * data.n_kv_pairs = 160" in msg
    assert "data.n_kv_pairs=40: needs 40 distinct keys, but data.vocab_size=64 has 31" in msg
    assert "raise data.vocab_size to >= 82" in msg


def test_vocab_not_above_seq_len_is_accepted_as_the_paper_sets_it() -> None:
    """Zoology asserts vocab_size > seq_len; coupledqk's hard setting (vocab 64, T 256, 16 pairs) breaks it and is
    accepted here on purpose (module docstring): the sequences keep their structure (distinct keys in 1..31,
    values in 32..63, 16 labelled queries each answering its key)."""
    x, y = generate_mqar(64, vocab_size=64, seq_len=256, n_kv_pairs=16, power_a=0.01, random_non_queries=True,
                         rng=np.random.default_rng(0))
    assert x.shape == (64, 256) and int(x.max()) < 64
    keys, values = x[:, 0:32:2], x[:, 1:32:2]
    assert all(len(set(row)) == 16 for row in keys.tolist()) and ((keys >= 1) & (keys <= 31)).all()
    assert ((values >= 32) & (values <= 63)).all()
    assert ((y != IGNORE).sum(axis=1) == 16).all()
    for row in range(64):  # each labelled position holds a context key and is labelled with that key's value
        pairs = dict(zip(keys[row].tolist(), values[row].tolist(), strict=True))
        for pos in np.flatnonzero(y[row] != IGNORE):
            assert pairs[int(x[row, pos])] == int(y[row, pos])
