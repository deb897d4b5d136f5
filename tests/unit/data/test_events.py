"""Event sequences for TPPs (osciformer Table 1; oscrepro.data.events): the restricted NHP unpickler refuses code,
the RMTPP -> NHP conversion reproduces the third party's pickles (committed fixture, tests/fixtures/events), the
StackOverflow timestamp recovery, windowing / truncation / time scaling, the batch format, tick's Hawkes simulation
(determinism, stationary rate) and the clear error for the paper's unobtainable sets.

tick is a pinned dependency (requirements.lock): the Hawkes tests import it and fail if it is missing. The tests
on the full shared copy use ``require_shared`` (visible skip locally, failure under CI).
"""

from __future__ import annotations

import _compat_pickle
import builtins
import importlib.util
import os
import pickle
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from oscrepro.data import paths
from oscrepro.data.events import PAPER_ONLY, EventDataModule, crop, load_nhp_pickle
from oscrepro.data.events_sources import (
    EventSeq,
    HawkesSpec,
    NHPUnpickler,
    nhp_sequences,
    nhp_train_count,
    parse_rmtpp,
    read_lines,
    recover_times,
    simulate_hawkes,
    to_nhp_records,
)
from oscrepro.data.integrity import instantiate_data
from tests.helpers.shared_data import require_shared

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "events"
SO_RAW = FIXTURE / "event_seq_tpp" / "rmtpp_raw" / "so"
SO_NHP = FIXTURE / "event_seq_tpp" / "nhp_format" / "data_so_nhp_subset" / "fold1"
F32_TOL = 2.5e-4  # float32 rounding of SO times ~1.3e3 (NHP pickles store float32); SOURCE.md: max |diff| 2.3e-4
HAWKES = dict(n_types=3, baseline=[0.3, 0.2, 0.1], alpha=[[0.8, 0.2, 0.0], [0.4, 0.6, 0.2], [0.0, 0.4, 0.6]],
              beta=2.0, end_time=30.0, n_train=24, n_val=6, n_test=6)


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(paths.CACHE_DIR_ENV, str(tmp_path / "cache"))
    monkeypatch.delenv(paths.DATA_DIR_ENV, raising=False)


def test_tick_is_installed() -> None:
    """The Hawkes simulator's dependency (pinned in requirements.lock) is importable: never a silent skip."""
    assert importlib.util.find_spec("tick") is not None, "tick missing: make install (requirements.lock pins it)"


# ------------------------------------------------------------------------------------------------ restricted pickle


class _Reduce:
    """Pickles as ``func(*args)``: what a hostile file would contain."""

    def __init__(self, func: object, args: tuple) -> None:
        self.func, self.args = func, args

    def __reduce__(self) -> tuple:
        return self.func, self.args


def _hostile(target: Path) -> dict[str, object]:
    return {"os.system": _Reduce(os.system, (f"touch {target}",)),
            "builtins.eval": _Reduce(builtins.eval, (f"open({str(target)!r}, 'w')",)),
            "builtins.exec": _Reduce(builtins.exec, (f"open({str(target)!r}, 'w')",)),
            "subprocess.call": _Reduce(subprocess.call, (["touch", str(target)],)),
            "subprocess.Popen": _Reduce(subprocess.Popen, (["touch", str(target)],))}


@pytest.mark.parametrize("kind", ["os.system", "builtins.eval", "builtins.exec", "subprocess.call", "subprocess.Popen"])
@pytest.mark.parametrize(("protocol", "nested"), [(2, False), (3, False), (3, True)])
def test_hostile_pickle_raises_before_anything_runs(kind: str, protocol: int, nested: bool, tmp_path: Path) -> None:
    target = tmp_path / "pwned"
    payload = _hostile(target)[kind]
    module, name = payload.func.__module__, payload.func.__name__  # os.system is posix.system
    if protocol == 2:  # Python-2 names (builtins -> __builtin__, subprocess.call -> commands.call); not mapped back
        module = _compat_pickle.REVERSE_IMPORT_MAPPING.get(module, module)
        module, name = _compat_pickle.REVERSE_NAME_MAPPING.get((payload.func.__module__, name), (module, name))
    if nested:  # after valid NHP content, deep inside an event dict
        event = {"time_since_start": np.float32(1.0), "type_event": payload}
        payload = {"dim_process": np.int32(2), "train": [[event]]}
    blob = pickle.dumps(payload, protocol=protocol)
    assert f"c{module}\n{name}\n".encode() in blob  # the file really references the callable (GLOBAL + REDUCE)
    path = tmp_path / "evil.pkl"
    path.write_bytes(blob)
    with pytest.raises(pickle.UnpicklingError, match="forbidden global") as err:
        load_nhp_pickle(path)
    assert f"'{module}.{name}'" in str(err.value)  # the message names the global
    assert not target.exists()


def test_non_dict_pickle_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "list.pkl"
    path.write_bytes(pickle.dumps([1, 2]))
    with pytest.raises(pickle.UnpicklingError, match="expected a dict"):
        load_nhp_pickle(path)


@pytest.mark.parametrize(("protocol", "numpy_name"), [(2, "numpy.core.multiarray"), (3, "numpy.core.multiarray"),
                                                   (3, "numpy._core.multiarray"), (5, "numpy._core.multiarray")])
def test_benign_nhp_pickle_round_trips(protocol: int, numpy_name: str, tmp_path: Path) -> None:
    """numpy scalars (spelled as numpy 2 writes them and, renamed, as numpy 1 / the NHP files do), containers,
    numbers, strings and bytes come back equal and of the same types."""
    data = {"dim_process": np.int32(22), "devtest": [], "args": None, "dev": [], "test": [],
            "train": [[{"time_since_start": np.float32(1325.4767), "time_since_last_event": 0.0,
                        "type_event": np.int32(3)},
                       {"time_since_start": np.float64(1325.9), "time_since_last_event": np.float32(0.42),
                        "type_event": np.int64(0)}]], "note": ("x", 1, 2.5, True, b"raw")}
    blob = pickle.dumps(data, protocol=protocol)
    if protocol < 4:  # GLOBAL names are newline-terminated (no length prefix): rename to numpy 1's module
        assert b"cnumpy._core.multiarray\nscalar\n" in blob
        blob = blob.replace(b"numpy._core.multiarray", numpy_name.encode())
    path = tmp_path / "ok.pkl"
    path.write_bytes(blob)
    back = load_nhp_pickle(path)
    assert back.keys() == data.keys() and back["note"] == data["note"] and back["args"] is None
    for got, want in zip(back["train"][0], data["train"][0], strict=True):
        for key in want:
            assert got[key] == want[key] and type(got[key]) is type(want[key])


def test_allowed_globals_accept_only_plain_data() -> None:
    """Even the allowed callables refuse object dtypes (they would carry arbitrary objects) and other codecs; a
    Python-2 file's scalar bytes arrive as a latin-1 str and still decode."""
    scalar = NHPUnpickler.ALLOWED[("numpy.core.multiarray", "scalar")]
    with pytest.raises(pickle.UnpicklingError, match="non-object"):
        scalar(np.dtype(object), b"\0" * 8)
    raw = np.float32(1.5).tobytes()
    assert scalar(np.dtype("<f4"), raw) == scalar(np.dtype("<f4"), raw.decode("latin-1")) == np.float32(1.5)
    encode = NHPUnpickler.ALLOWED[("_codecs", "encode")]
    assert encode("\xff\x00", "latin1") == b"\xff\x00"
    with pytest.raises(pickle.UnpicklingError, match="latin1"):
        encode("x", "rot13")


# ------------------------------------------------------------------------------------- RMTPP -> NHP conversion


def _fixture_conversion() -> tuple[list[EventSeq], list[EventSeq], list[EventSeq]]:
    """Train (recoverable only), dev and test of the fixture by the SOURCE.md rule, through the readers."""
    events = read_lines(SO_RAW / "event-1-train.txt")
    donors = [(read_lines(SO_RAW / f"event-{k}-test.txt"), read_lines(SO_RAW / f"time-{k}-test.txt"))
              for k in range(2, 6)]
    times = recover_times(events, donors)
    n_train = nhp_train_count(len(events))
    conv = {i: parse_rmtpp([events[i]], [t], 1e6)[0] for i, t in enumerate(times) if t is not None}
    test = parse_rmtpp(read_lines(SO_RAW / "event-1-test.txt"), read_lines(SO_RAW / "time-1-test.txt"), 1e6)
    return ([conv[i] for i in sorted(conv) if i < n_train], [conv[i] for i in sorted(conv) if i >= n_train], test)


def _assert_records_match(ours: list[dict], theirs: list[dict]) -> None:
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs, strict=True):
        assert a["type_event"] == int(b["type_event"])  # type - 1
        assert abs(a["time_since_start"] - float(b["time_since_start"])) < F32_TOL  # times / 1e6, not shifted
        assert abs(a["time_since_last_event"] - float(b["time_since_last_event"])) < 2 * F32_TOL


def test_conversion_rule_reproduces_the_nhp_pickles() -> None:
    """Fixture: real RMTPP lines and the third party's NHP records of the same sequences (make_event_fixtures.py)."""
    train, dev, test = _fixture_conversion()
    assert nhp_train_count(10) == 9 and nhp_train_count(100) == 90 and nhp_train_count(5307) == 4777
    nhp = {s: load_nhp_pickle(SO_NHP / f"{s}.pkl")[s] for s in ("train", "dev", "test")}
    assert int(load_nhp_pickle(SO_NHP / "train.pkl")["dim_process"]) == 22
    assert 0 < len(train) < len(nhp["train"]) and len(dev) == len(nhp["dev"]) == 1  # some train times unrecoverable
    by_types = {tuple(int(e["type_event"]) for e in seq): seq for seq in nhp["train"]}
    for seq in train:  # each recovered train sequence equals its NHP record
        _assert_records_match(to_nhp_records([seq])[0], by_types[tuple(seq.types.tolist())])
    for ours, theirs in ((dev, nhp["dev"]), (test, nhp["test"])):  # fold 1 test = RMTPP test 1, in order
        for a, b in zip(to_nhp_records(ours), theirs, strict=True):
            _assert_records_match(a, b)


def test_recovery_refuses_conflicting_donors() -> None:
    assert recover_times(["1 2", "3"], [(["3"], ["5.0"]), (["3", "9"], ["5.0", "1"])]) == [None, "5.0"]
    with pytest.raises(ValueError, match="different timestamps"):
        recover_times(["3"], [(["3"], ["5.0"]), (["3"], ["6.0"])])


def test_stackoverflow_module_on_the_fixture_matches_the_nhp_module() -> None:
    so = EventDataModule("stackoverflow", data_dir=str(FIXTURE), max_len=None, batch_size=4)
    nhp = EventDataModule("stackoverflow_nhp", data_dir=str(FIXTURE), max_len=None, batch_size=4)
    so.setup("fit")
    nhp.setup("fit")
    train, dev, test = _fixture_conversion()
    assert [len(so.splits[s]) for s in ("train", "val", "test")] == [len(train), 1, 3]
    assert "subset" in so.source and f"the {len(train)}/1 of 9/1" in so.source and "folds 2,3,4,5" in so.source
    assert so.num_types == nhp.num_types == so.n_features == 22 and so.time_scale == 1.0
    a, b = so.splits["test"].arrays, nhp.splits["test"].arrays  # same 3 sequences, two routes
    assert np.array_equal(a.types, b.types) and np.array_equal(a.mask, b.mask)
    assert np.abs(a.times - b.times).max() < 2 * F32_TOL and (a.times[:, 0] == 0).all()  # from the first event
    assert so.fingerprint != nhp.fingerprint


# ----------------------------------------------------------------------------- windows, truncation, time scale


def _write_rmtpp(folder: Path, lengths: dict[str, list[int]], seed: int = 0) -> dict[str, list[np.ndarray]]:
    """A complete BookOrder-style fold 1 (both time files) with sequences of the given lengths; returns the times."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True)
    out = {}
    for split, ns in lengths.items():
        times = [np.cumsum(rng.exponential(0.01, n)).round(6) for n in ns]
        (folder / f"event-1-{split}.txt").write_text("".join(" ".join(map(str, rng.integers(1, 3, n))) + "\n"
                                                             for n in ns))
        (folder / f"time-1-{split}.txt").write_text("".join(" ".join(map(str, t)) + "\n" for t in times))
        out[split] = times
    return out


@pytest.mark.parametrize("mode", ["window", "truncate"])
def test_long_sequences_are_windowed_or_truncated(mode: str, tmp_path: Path) -> None:
    root = tmp_path / "data"
    times = _write_rmtpp(root / "event_seq_tpp" / "rmtpp_raw" / "book_order",
                         {"train": [300, 5, 1, 7, 9, 11, 13, 15, 17, 20], "test": [40, 2]})
    dm = EventDataModule("bookorder", data_dir=str(root), max_len=128, crop=mode, batch_size=64)
    dm.setup("fit")
    train = dm.splits["train"].arrays
    if mode == "window":  # 300 -> 128 + 128 + 44; the length-1 sequence is dropped (min_len 2)
        assert train.lengths.tolist() == [128, 128, 44, 5, 7, 9, 11, 13, 15, 17]
        rows = [train.times[i, : train.lengths[i]] for i in range(3)]
        gaps = np.concatenate([np.diff(r, prepend=0.0) for r in rows])  # a later window starts at its true gap
        assert np.allclose(gaps[1:], np.diff(times["train"][0]), atol=1e-5) and gaps[0] == 0
        assert (train.times[1:3, 0] > 0).all() and (train.times[[0, *range(3, 10)], 0] == 0).all()
    else:
        assert train.lengths.tolist() == [128, 5, 7, 9, 11, 13, 15, 17]
        assert (train.times[:, 0] == 0).all()  # every row counts from its first event
        assert np.allclose(train.times[0, :128], times["train"][0][:128] - times["train"][0][0], atol=1e-5)
    assert dm.seq_len == 128 and len(dm.splits["val"]) == 1 and len(dm.splits["test"]) == 2
    assert "subset" not in dm.source and f"{mode} to max_len=128" in dm.source and "9/1/2 sequences" in dm.source
    assert crop(EventSeq(np.arange(3), np.arange(3.0) + 5), None, mode, from_zero=False)[0].times.tolist() == [0, 1, 2]


def test_time_scale_auto_makes_the_mean_training_gap_one(tmp_path: Path) -> None:
    root = tmp_path / "data"
    _write_rmtpp(root / "event_seq_tpp" / "rmtpp_raw" / "book_order", {"train": [50] * 10, "test": [30, 30]})
    dm = EventDataModule("bookorder", data_dir=str(root), time_scale="auto", max_len=16)
    dm.setup("fit")
    a = dm.splits["train"].arrays
    gaps = np.concatenate([np.diff(a.times[i, : n]) for i, n in enumerate(a.lengths)])
    assert abs(gaps.mean() - 1) < 1e-4 and 0.005 < dm.time_scale < 0.02  # exponential(0.01) gaps
    assert f"time_scale={dm.time_scale:.6g} (auto" in dm.source
    plain = EventDataModule("bookorder", data_dir=str(root), max_len=16)
    plain.setup("fit")
    assert np.allclose(plain.splits["test"].arrays.times / dm.time_scale, dm.splits["test"].arrays.times, rtol=1e-5)
    with pytest.raises(ValueError, match="time_scale"):
        EventDataModule("bookorder", time_scale="mean")


# ----------------------------------------------------------------------------------------------- batch format


def _modules() -> dict[str, EventDataModule]:
    return {"so_fixture": EventDataModule("stackoverflow", data_dir=str(FIXTURE), max_len=32, batch_size=8),
            "hawkes": EventDataModule("hawkes", hawkes=HAWKES, max_len=None, batch_size=8)}


@pytest.mark.parametrize("which", ["so_fixture", "hawkes"])
def test_batch_format(which: str) -> None:
    dm = _modules()[which]
    dm.setup("fit")
    assert dm.dims == {"n_features": dm.num_types, "seq_len": dm.seq_len}
    for loader in (dm.train_dataloader(), dm.val_dataloader(), dm.test_dataloader()):
        for x, y, meta in loader:
            times, mask = meta["times"], meta["mask"]
            b, t = y.shape
            assert x.shape == (b, t, dm.num_types) and times.shape == mask.shape == (b, t) and t <= dm.seq_len
            assert (x.dtype, y.dtype, times.dtype, mask.dtype) == (torch.float32, torch.int64, torch.float32,
                                                                   torch.bool)
            assert mask[:, 0].all() and not (mask[:, 1:] & ~mask[:, :-1]).any()  # a prefix per row
            assert mask.sum(1).max() == t  # trimmed to the batch's longest row
            assert torch.equal(x.argmax(-1)[mask], y[mask]) and torch.equal(x.sum(-1), mask.float())  # one-hot
            assert (y[~mask] == 0).all() and (x[~mask] == 0).all()  # padding 0
            assert ((y >= 0) & (y < dm.num_types)).all()
            assert (times.diff(dim=1) >= 0).all()
            last = times.gather(1, (mask.sum(1, keepdim=True) - 1))  # (B, 1) last real time
            assert torch.equal(torch.where(mask, times, last), times)  # padding repeats the last real time
    single = dm.splits["train"][0]
    assert single[0].shape[0] == single[1].shape[0] == int(dm.splits["train"].lengths[0])


# ------------------------------------------------------------------------------------------------------ Hawkes


def test_hawkes_is_deterministic_by_seed() -> None:
    a, b, c = (EventDataModule("hawkes", hawkes=HAWKES, seed=s) for s in (3, 3, 4))
    for dm in (a, b, c):
        dm.setup("fit")
    for s in ("train", "val", "test"):
        assert np.array_equal(a.splits[s].arrays.times, b.splits[s].arrays.times)
        assert np.array_equal(a.splits[s].arrays.types, b.splits[s].arrays.types)
    assert a.fingerprint == b.fingerprint != c.fingerprint
    train, test = a.splits["train"].arrays, a.splits["test"].arrays
    assert not np.array_equal(train.times[0, :2], test.times[0, :2])  # splits come from different streams
    assert "stand-in" in a.source and "tick" in a.source


def test_hawkes_rate_matches_the_stationary_rate() -> None:
    """Counts / time -> (I - alpha/beta)^-1 mu. Decays differ from 1 and per pair (asymmetric), so handing tick alpha
    instead of its L1 norm alpha/beta (spectral radius 2.0: tick refuses) or transposed decays (type-1 rate -11%)
    would be caught. 80 x 200 time units, ~11,000 events per type: the rate's sd is ~1-2%, the start-up bias ~1%."""
    spec = HawkesSpec.from_config(dict(n_types=2, baseline=[0.4, 0.2], alpha=[[1.2, 0.5], [0.8, 1.5]],
                                       beta=[[4.0, 2.5], [2.0, 5.0]], end_time=200.0))
    assert 0.55 < spec.spectral_radius() < 0.6
    seqs = simulate_hawkes(spec, 80, np.random.SeedSequence([7, 0]))
    counts = np.bincount(np.concatenate([s.types for s in seqs]), minlength=2)
    rate = counts / (80 * 200.0)
    assert np.allclose(rate, spec.stationary_rate(), rtol=0.05), (rate, spec.stationary_rate())
    assert all(s.times.max() <= 200.0 and (np.diff(s.times) >= 0).all() for s in seqs)
    capped = simulate_hawkes(HawkesSpec.from_config({**HAWKES, "end_time": None, "max_events": 17}), 3,
                             np.random.SeedSequence(1))
    assert [len(s.types) for s in capped] == [17, 17, 17]


def test_hawkes_true_parameters_in_the_batch_unit() -> None:
    dm = EventDataModule("hawkes", hawkes=HAWKES, time_scale=2.0)
    dm.setup("fit")
    p = dm.hawkes_params()
    assert np.allclose(p["baseline"], [0.6, 0.4, 0.2]) and np.allclose(p["beta"], 4.0)
    assert np.allclose(p["alpha"] / p["beta"], np.array(HAWKES["alpha"]) / 2.0)  # branching ratios unit-free
    assert np.allclose(p["stationary_rate"], 2 * HawkesSpec.from_config(HAWKES).stationary_rate())
    assert (dm.splits["train"].arrays.times[:, 0] > 0).all()  # Hawkes rows count from the process start
    with pytest.raises(ValueError, match="spectral radius"):
        HawkesSpec.from_config({**HAWKES, "beta": 0.5})
    with pytest.raises(ValueError, match="hawkes_params"):
        EventDataModule("stackoverflow_nhp").hawkes_params()


# ------------------------------------------------------------------------------------------- missing / supplied


@pytest.mark.parametrize("name", PAPER_ONLY)
def test_paper_sets_raise_the_clear_missing_data_error(name: str, tmp_path: Path) -> None:
    with pytest.raises(paths.DatasetNotFoundError) as err:
        EventDataModule(name, data_dir=str(tmp_path)).setup("fit")
    text = str(err.value)
    assert f"event_seq_tpp/nhp_format/{name}" in text and "Looked in" in text and "How to supply it" in text
    assert str(tmp_path / "event_seq_tpp" / "nhp_format" / name / "fold1") in text
    assert "dim_process" in text and "time_since_start" in text and "restricted unpickler" in text
    assert ("tpp_hawkes" in text) == (name == "synthetic") and ("PhysioNet" in text) == (name == "mimic")


def test_paper_set_loads_user_supplied_pickles(tmp_path: Path) -> None:
    """PhysioPro's layout (<Name>/folder<K>, train + test only): val = the last 10% of train (NHP's rule)."""
    folder = tmp_path / "event_seq_tpp" / "nhp_format" / "Neonate" / "folder2"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    seqs = [EventSeq(rng.integers(0, 4, n), np.cumsum(rng.exponential(1.0, n))) for n in rng.integers(3, 20, 13)]
    recs = to_nhp_records(seqs)
    for split, part in (("train", recs[:10]), ("test", recs[10:])):
        with open(folder / f"{split}.pkl", "wb") as f:
            pickle.dump({"dim_process": np.int32(4), split: part}, f, protocol=2)
    dm = EventDataModule("neonate", fold=2, data_dir=str(tmp_path), max_len=None)
    dm.setup("fit")
    assert [len(dm.splits[s]) for s in ("train", "val", "test")] == [9, 1, 3] and dm.num_types == 4
    assert "no dev.pkl" in dm.source and "user-supplied" in dm.source
    assert np.allclose(dm.splits["val"].arrays.times[0, : len(seqs[9].times)], seqs[9].times - seqs[9].times[0])
    assert [s.types.tolist() for s in nhp_sequences(recs)] == [s.types.tolist() for s in seqs]


def test_configs_compose_and_instantiate(compose) -> None:  # noqa: ANN001 (conftest fixture)
    built = {name: instantiate_data(compose([f"data={name}", "budget=paper"]).data)[0]
             for name in ("tpp_bookorder", "tpp_stackoverflow", "tpp_hawkes")}
    assert [dm.name for dm in built.values()] == ["bookorder", "stackoverflow", "hawkes"]
    assert all(isinstance(dm, EventDataModule) for dm in built.values())
    spec = built["tpp_hawkes"].spec  # the yaml comments' numbers
    assert abs(spec.spectral_radius() - 0.534) < 1e-3 and abs(spec.stationary_rate().sum() - 1.36) < 0.01


def test_unknown_name_and_crop_list_the_valid_ones() -> None:
    with pytest.raises(ValueError, match="bookorder"):
        EventDataModule("retweet")
    with pytest.raises(ValueError, match="truncate"):
        EventDataModule("bookorder", crop="pad")


# -------------------------------------------------------------------------------------------- full shared copy


def test_shared_bookorder_and_stackoverflow_sizes() -> None:
    """SOURCE.md's counts on the real files: BookOrder 90/10/100, SO fold 1 3,142 recoverable train sequences
    (4,777 / 530 NHP rule), and the shared NHP subset's train/dev are RMTPP train[0:300] / [4777:4877]."""
    shared = require_shared("event_seq_tpp", "SOURCE.md")
    book = EventDataModule("bookorder", max_len=128)
    book.setup("fit")
    assert "90/10/100 sequences -> 2,340/260/700 rows" in book.source and book.num_types == 2
    so = EventDataModule("stackoverflow", max_len=None)
    so.setup("fit")
    n = [len(so.splits[s]) for s in ("train", "val", "test")]
    assert sum(n[:2]) == 3_142 and n[2] == 1_326 and so.num_types == 22 and "of 4,777/530" in so.source
    events = read_lines(shared / "rmtpp_raw" / "so" / "event-1-train.txt")
    subset = shared / "nhp_format" / "data_so_nhp_subset" / "fold1"
    for split, start in (("train", 0), ("dev", nhp_train_count(len(events)))):
        seqs = nhp_sequences(load_nhp_pickle(subset / f"{split}.pkl")[split])  # numpy.core.* names: numpy-1 files
        assert [" ".join(map(str, s.types + 1)) for s in seqs] == events[start : start + len(seqs)]


def test_max_rows_keeps_a_seeded_ordered_subset_of_each_split() -> None:
    """The cap draws the same rows for every instance (model seeds share them), keeps their order, leaves splits
    under the cap untouched, computes time_scale='auto' on all training rows, and is named in ``source``."""
    full = EventDataModule("hawkes", hawkes=HAWKES, max_len=8, time_scale="auto")
    caps = {"train": 10, "val": None, "test": 1000}
    a, b = (EventDataModule("hawkes", hawkes=HAWKES, max_len=8, time_scale="auto", max_rows=caps) for _ in range(2))
    for dm in (full, a, b):
        dm.setup("fit")
    rows = [tuple(r) for r in full.splits["train"].arrays.times.round(6)]
    kept = [tuple(r) for r in a.splits["train"].arrays.times.round(6)]
    assert len(kept) == 10 < len(rows)
    assert np.array_equal(a.splits["train"].arrays.times, b.splits["train"].arrays.times)
    positions = [rows.index(r) for r in kept]
    assert positions == sorted(positions) and len(set(positions)) == 10  # a subset, in order
    for s in ("val", "test"):
        assert np.array_equal(a.splits[s].arrays.times, full.splits[s].arrays.times)
    assert a.time_scale == full.time_scale
    assert f"train 10 of {len(rows):,}" in a.source and "val" not in a.source.split("seeded row subset")[1]


@pytest.mark.parametrize("caps", [{"training": 5}, {"train": 0}, {"test": -1}, {"val": True}])
def test_bad_max_rows_are_refused(caps: dict) -> None:
    with pytest.raises(ValueError, match="max_rows"):
        EventDataModule("hawkes", hawkes=HAWKES, max_rows=caps)
