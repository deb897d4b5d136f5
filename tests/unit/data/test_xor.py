"""Bit-stream XOR (osciformer Table 4; ODE-LSTM XORData semantics): parity labels, the event encoding expands back
to the bits, dense and event encodings agree, determinism by seed, disjoint split streams, the batch format."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from oscrepro.data.irregular import pad_collate
from oscrepro.data.xor import XORDataModule, expand_events, generate


def _bits(d: dict[str, np.ndarray]) -> list[np.ndarray]:
    return expand_events(d["x"], d["t"], d["mask"])


@pytest.mark.parametrize("encoding", ["dense", "event"])
def test_shapes_times_and_parity(encoding: str) -> None:
    d = generate(2_000, seed=3, encoding=encoding)
    assert d["x"].shape == (2_000, 32, 1) and d["t"].shape == d["mask"].shape == (2_000, 32)
    assert d["x"].dtype == d["t"].dtype == np.float32 and d["mask"].dtype == bool and d["y"].dtype == np.int64
    assert (np.diff(d["t"], axis=1) >= 0).all() and (d["t"] > 0).all() and (d["t"] < 1).all()
    n = d["mask"].sum(axis=1)
    last = d["t"][np.arange(2_000), n - 1][:, None]
    assert (np.where(d["mask"], d["t"], last) == d["t"]).all()  # padding repeats the last real time
    assert (d["x"][~d["mask"]] == 0).all()
    bits = _bits(d)
    lengths = np.array([len(b) for b in bits])
    assert lengths.min() == 2 and lengths.max() == 31  # uniform in 2..31
    assert all(int(b.sum()) % 2 == y for b, y in zip(bits, d["y"], strict=True))  # parity label
    assert 0.45 < d["y"].mean() < 0.55
    if encoding == "dense":
        assert (d["mask"].sum(1) == lengths).all()
        assert np.allclose(d["t"][d["mask"]], np.concatenate([np.arange(1, k + 1) / 32 for k in lengths]))


def test_event_encoding_is_the_bit_changes_plus_a_flush() -> None:
    dense, event = generate(3_000, seed=7, encoding="dense"), generate(3_000, seed=7, encoding="event")
    assert (dense["y"] == event["y"]).all()  # the same strings under both encodings
    for i, (bits, expanded) in enumerate(zip(_bits(dense), _bits(event), strict=True)):
        assert np.array_equal(expanded, bits)  # expanding the event runs gives the dense bits back
        m = event["mask"][i]
        pos = np.rint(event["t"][i][m] * 32).astype(int)  # 1-based positions of the events
        changes = np.flatnonzero(np.diff(np.concatenate([[-1], bits])) != 0) + 1
        expected = np.union1d(changes, [len(bits)])  # every change, and the flush on the last bit
        assert np.array_equal(pos, expected)
        assert np.array_equal(event["x"][i, m, 0], bits[pos - 1])  # each event carries its bit
    gaps = np.diff(np.concatenate([[0.0], event["t"][0][event["mask"][0]]]))
    assert (gaps > 0).all() and np.allclose(gaps * 32, np.rint(gaps * 32))  # elapsed steps / 32


def test_hand_example() -> None:
    """0 0 1 1 1 -> events (0 @1), (1 @3), flush (1 @5): ODE-LSTM's elapsed 1, 2, 2."""
    d = generate(20_000, seed=11, encoding="event")
    bits = _bits(d)
    i = next(k for k, b in enumerate(bits) if b.tolist() == [0, 0, 1, 1, 1])
    m = d["mask"][i]
    assert d["x"][i, m, 0].tolist() == [0, 1, 1]
    assert np.allclose(np.diff(np.concatenate([[0.0], d["t"][i, m]])) * 32, [1, 2, 2])


def test_determinism_and_disjoint_streams() -> None:
    a, b, c = generate(500, seed=1), generate(500, seed=1), generate(500, seed=2)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not np.array_equal(a["x"], c["x"])
    dm = XORDataModule(n_train=3_000, n_val=500, n_test=500, batch_size=64)
    dm.setup("fit")
    again = XORDataModule(n_train=3_000, n_val=500, n_test=500, batch_size=64)
    again.setup("fit")
    assert dm.fingerprint == again.fingerprint
    train, test = dm.splits["train"].arrays, dm.splits["test"].arrays
    assert not np.array_equal(train.x[:500], test.x)  # test is not a copy of the start of train
    strings = {name: [b.tobytes() for b in expand_events(a.x, a.t, a.mask) if len(b) >= 16]
               for name, a in (("train", train), ("test", test))}
    assert sum(s in set(strings["train"]) for s in strings["test"]) <= 1  # 16+ bit strings do not recur
    assert XORDataModule(seed=1, n_train=10, n_val=10, n_test=10).source != dm.source


def test_batches_follow_the_irregular_format() -> None:
    dm = XORDataModule(n_train=256, n_val=64, n_test=64, batch_size=32)
    dm.setup("fit")
    assert dm.dims == {"n_features": 1, "n_classes": 2, "seq_len": dm.seq_len} and dm.seq_len <= 31
    x, y, meta = next(iter(dm.train_dataloader()))
    assert x.dtype == torch.float32 and x.shape[0] == 32 and x.shape[2] == 1 and y.dtype == torch.long
    assert set(meta) == {"times", "mask"} and meta["mask"].dtype == torch.bool
    assert x.shape[1] == int(meta["mask"].sum(1).max())  # trimmed to the batch's longest row
    ds = dm.splits["val"]
    idx = [3, 0, 9, 5]
    fast, slow = ds.__getitems__(idx), pad_collate([ds[i] for i in idx])
    assert torch.equal(fast[0], slow[0]) and torch.equal(fast[1], slow[1])
    assert all(torch.equal(fast[2][k], slow[2][k]) for k in fast[2])
