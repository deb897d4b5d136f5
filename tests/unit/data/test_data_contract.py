"""The data-module contract (oscrepro.data.base), checked on every data module at tiny size, offline.

After ``setup`` each module must satisfy the :class:`~oscrepro.data.base.DataModule` protocol, carry a 16-hex
``fingerprint`` and a ``source`` that says "stand-in" / "subset" where that applies, and expose ``dims`` that agree
with its batches (ids below ``vocab_size``, ``n_features`` per step, labels below ``n_classes``, T <= ``seq_len``)
and build a backbone through :func:`~oscrepro.data.base.model_dims`.
"""

from __future__ import annotations

import inspect
import pkgutil
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from importlib import import_module
from pathlib import Path

import lightning as L
import pytest
import torch

import oscrepro.data
from oscrepro.attention.softmax import SoftmaxAttention
from oscrepro.data import paths
from oscrepro.data.base import DIM_KEYS, MODEL_DIM_KEYS, DataModule, DataModuleBase, model_dims
from oscrepro.data.bpe_corpus import BPELMDataModule
from oscrepro.data.charlevel import (
    CharLevelDataModule,
    CodeParrotDataModule,
    Enwik8DataModule,
    PythonCodeCharDataModule,
    WikiTextCharDataModule,
    build_code_subset,
)
from oscrepro.data.events import EventDataModule
from oscrepro.data.glue import GLUEDataModule
from oscrepro.data.heart_rate import HeartRateDataModule
from oscrepro.data.irregular import IrregularDataModule
from oscrepro.data.mqar import MQARDataModule
from oscrepro.data.resonance import ResonanceDataModule, ResonanceForecastDataModule
from oscrepro.data.speech_commands import SpeechCommandsDataModule
from oscrepro.data.spirals import SpiralsDataModule
from oscrepro.data.sva_module import SVADataModule
from oscrepro.data.uea import UEADataModule
from oscrepro.data.wordlevel import WordLMDataModule
from oscrepro.data.xor import XORDataModule
from oscrepro.models.continuous_time import ContinuousTimeClassifier, ContinuousTimeRegressor
from oscrepro.models.point_process import ContinuousTimeTPP
from oscrepro.models.sequence_regressor import ContinuousTimeSequenceRegressor
from oscrepro.models.transformer import CausalLM, EncoderClassifier
from tests.helpers.shared_data import require_shared
from tests.unit.data.test_speech_commands import _write_fixture as write_speech_fixture
from tests.unit.data.test_wordlevel import _wikitext_fixture as write_wikitext_fixture

FIXTURES = Path(__file__).resolve().parents[3] / "tests" / "fixtures"


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Caches go to tmp; no data root from the environment."""
    monkeypatch.setenv(paths.CACHE_DIR_ENV, str(tmp_path / "cache"))
    monkeypatch.delenv(paths.DATA_DIR_ENV, raising=False)


def _codeparrot(tmp: Path) -> CodeParrotDataModule:
    dm = CodeParrotDataModule(data_dir=str(tmp), n_chars=6_000, seq_len=16, batch_size=2)
    records = ({"content": f"def f{k}(x):\n    return x + {k}\n"} for k in range(1_000))
    build_code_subset(records, 6_000, tmp / "codeparrot" / dm.file_name)
    return dm


def _wordlevel(tmp: Path) -> WordLMDataModule:
    write_wikitext_fixture(tmp / "data")
    return WordLMDataModule("wikitext2", data_dir=str(tmp / "data"), cache_dir=str(tmp / "cache"), vocab_size=8,
                            seq_len=4, batch_size=2)


def _speech(tmp: Path) -> SpeechCommandsDataModule:
    write_speech_fixture(tmp / "data" / "speech_commands", n_speakers=4, samples=1_600, lists=True)
    return SpeechCommandsDataModule(data_dir=str(tmp / "data"), cache_dir=str(tmp / "cache"), batch_size=4)


def _glue(tmp: Path) -> GLUEDataModule:
    """The committed SST-2 fixture and the shared GPT-2 tokenizer in one data dir: an explicit data_dir is the only
    root searched (oscrepro.data.paths), so it must hold both."""
    root = tmp / "glue_data"
    root.mkdir()
    (root / "glue_sst2").symlink_to(FIXTURES / "glue" / "glue_sst2")
    (root / "gpt2_tokenizer").symlink_to(require_shared("gpt2_tokenizer"))
    return GLUEDataModule("sst2", data_dir=str(root), batch_size=4)


def _shared(name: str, marker: str, build: Callable[[], L.LightningDataModule]) -> Callable[[Path], DataModule]:
    def make(_tmp: Path) -> DataModule:
        require_shared(name, marker)
        return build()
    return make


@dataclass(frozen=True)
class Case:
    make: Callable[[Path], DataModule]
    backbone: str  # "classifier" | "lm" | "irregular" | "regressor" | "seq_regressor" | "tpp": what model_dims builds
    says: tuple[str, ...] = ()  # words the source must contain


CASES = {
    "sva": Case(lambda _: SVADataModule(n_train=64, n_val=16, n_test=16, batch_size=8), "classifier"),
    "enwik8_fixture": Case(lambda _: Enwik8DataModule(data_dir=str(FIXTURES), expected_sha256=None,
                                                      expected_vocab_size=None, seq_len=32, batch_size=4,
                                                      max_chars=4_000), "lm", ("subset",)),
    "codeparrot_tmp_subset": Case(_codeparrot, "lm"),
    "wikitext2_words_tmp": Case(_wordlevel, "lm"),
    "speech_commands_tmp": Case(_speech, "classifier"),
    "standin_enwik8": Case(_shared("wikitext-2", "train.txt",
                                   lambda: WikiTextCharDataModule(max_chars=5_000, seq_len=32, batch_size=2)),
                           "lm", ("stand-in", "subset")),
    "mqar": Case(lambda _: MQARDataModule(n_train=64, n_test=16, seq_len=32, n_kv_pairs=4, batch_size=8), "lm"),
    "standin_openwebtext_bpe": Case(
        lambda _: (require_shared("gpt2_tokenizer"), require_shared("openwebtext_sample"),
                   BPELMDataModule("openwebtext", standin="openwebtext_sample", seq_len=32, batch_size=2,
                                   max_train_tokens=2_000))[-1], "lm", ("stand-in",)),
    "glue_sst2_fixture": Case(lambda tmp: _glue(tmp), "classifier"),
    "xor_event": Case(lambda _: XORDataModule("event", n_train=64, n_val=16, n_test=16, batch_size=8), "irregular"),
    "xor_dense": Case(lambda _: XORDataModule("dense", n_train=64, n_val=16, n_test=16, batch_size=8), "irregular"),
    "resonance": Case(lambda _: ResonanceDataModule(n_train=64, n_val=16, n_test=16, batch_size=8), "irregular"),
    "resonance_forecast": Case(lambda _: ResonanceForecastDataModule(n_train=64, n_val=16, n_test=16, batch_size=8),
                               "regressor"),
    "spirals": Case(lambda _: SpiralsDataModule(n_train=16, n_val=8, n_test=8, batch_size=4), "regressor"),
    "uea_fixture": Case(lambda _: UEADataModule("Epilepsy", data_dir=str(FIXTURES), folders=("uea",), drop_rate=0.5,
                                                batch_size=4), "irregular", ("stand-in",)),
    "events_stackoverflow_fixture": Case(lambda _: EventDataModule("stackoverflow", data_dir=str(FIXTURES / "events"),
                                                                   max_len=32, batch_size=4), "tpp", ("subset",)),
    "events_hawkes": Case(lambda _: EventDataModule("hawkes", hawkes=dict(
        n_types=2, baseline=[0.5, 0.3], alpha=[[0.5, 0.2], [0.3, 0.4]], beta=2.0, end_time=10.0, n_train=8, n_val=4,
        n_test=4), max_len=16, batch_size=4), "tpp", ("stand-in",)),
    "bidmc32hr_fixture": Case(lambda _: HeartRateDataModule(data_dir=str(FIXTURES), batch_size=4), "seq_regressor",
                              ("stand-in",)),
    "standin_codeparrot": Case(_shared("python_code", "cpython311_stdlib_train.jsonl.gz",
                                       lambda: PythonCodeCharDataModule(max_chars=5_000, seq_len=32, batch_size=2)),
                               "lm", ("stand-in", "subset")),
}


def _build_backbone(kind: str, dims: dict[str, int]) -> torch.nn.Module:
    tiny = dict(d_model=8, n_heads=2, n_layers=1, d_ff=16, attention=partial(SoftmaxAttention))
    build = {"classifier": EncoderClassifier, "lm": CausalLM, "irregular": ContinuousTimeClassifier,
             "regressor": ContinuousTimeRegressor, "seq_regressor": ContinuousTimeSequenceRegressor,
             "tpp": ContinuousTimeTPP}[kind]
    return build(**dims, **tiny)


@pytest.mark.parametrize("name", sorted(CASES))
def test_module_follows_the_contract(name: str, tmp_path: Path) -> None:
    case = CASES[name]
    dm = case.make(tmp_path)
    assert isinstance(dm, DataModule) and isinstance(dm, DataModuleBase)
    dm.setup("fit")
    assert isinstance(dm, DataModule)
    assert re.fullmatch(r"[0-9a-f]{16}", dm.fingerprint), dm.fingerprint
    assert isinstance(dm.source, str) and len(dm.source) > 20
    assert all(word in dm.source for word in case.says), dm.source
    dims = dm.dims
    assert set(dims) <= set(DIM_KEYS) and "seq_len" in dims and set(dims) & set(MODEL_DIM_KEYS)
    assert all(type(v) is int and v > 0 for v in dims.values()), dims
    assert all(getattr(dm, k) == v for k, v in dims.items())  # the attribute names configs use agree
    fingerprint = dm.fingerprint
    dm.setup("test")  # idempotent
    assert dm.fingerprint == fingerprint and dm.dims == dims

    batch = next(iter(dm.train_dataloader()))
    x, y = batch[:2]
    meta = batch[2] if len(batch) > 2 and isinstance(batch[2], dict) else {}
    assert x.shape[1] <= dims["seq_len"]
    if "vocab_size" in dims:
        assert x.dtype == torch.long and 0 <= int(x.min()) and int(x.max()) < dims["vocab_size"]
    if "n_features" in dims:
        assert x.shape[-1] == dims["n_features"]
    if "n_classes" in dims:
        assert y.dim() == 1 and int(y.max()) < dims["n_classes"]
    for loader in (dm.val_dataloader(), dm.test_dataloader()):
        assert next(iter(loader))[0].shape[1] <= dims["seq_len"]

    built = model_dims(dm)
    assert built == {k: v for k, v in dims.items() if k in MODEL_DIM_KEYS}
    if case.backbone == "tpp":  # (one-hot x, types y, {times, mask}): y are the event types, per step
        assert y.shape == x.shape[:2] and int(y.max()) < dims["n_features"]
        assert bool((x.argmax(-1) == y)[meta["mask"]].all()), "x must be the one-hot of y at real events"
    if case.backbone in ("irregular", "regressor", "seq_regressor", "tpp"):  # (x, y, {times, mask[, target_*]})
        assert meta["times"].shape == x.shape[:2] and meta["mask"].dtype == torch.bool
        assert bool((meta["times"].diff(dim=1) >= 0).all()), "times must be non-decreasing per row"
    keys = {"irregular": ("times", "mask"), "regressor": ("times", "mask", "target_times"),
            "seq_regressor": ("times", "mask", "target_times"), "tpp": ("times", "mask")}.get(case.backbone, ())
    out, _ = _build_backbone(case.backbone, built)(x, **{k: meta[k] for k in keys})
    if case.backbone in ("regressor", "seq_regressor"):
        assert out.shape == y.shape
    elif case.backbone == "tpp":
        assert out.type_logits.shape == (*y.shape, dims["n_features"]) and out.gap.shape == y.shape
    else:
        width = dims["vocab_size"] if case.backbone == "lm" else dims["n_classes"]
        assert out.shape[-1] == width


def test_model_dims_refuses_what_it_cannot_size() -> None:
    dm = Enwik8DataModule(data_dir=str(FIXTURES), expected_sha256=None, expected_vocab_size=None)
    with pytest.raises(ValueError, match="setup"):  # the vocabulary is known only after setup
        model_dims(dm)
    dm.setup("fit")
    assert set(model_dims(dm)) == {"vocab_size"}
    with pytest.raises(TypeError, match="contract"):
        model_dims(torch.nn.Linear(2, 2))


def test_every_data_module_in_the_package_follows_the_contract() -> None:
    """No LightningDataModule in oscrepro.data bypasses DataModuleBase (so none lacks source / fingerprint / dims)."""
    found = set()
    for info in pkgutil.iter_modules(oscrepro.data.__path__):
        module = import_module(f"oscrepro.data.{info.name}")
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, L.LightningDataModule) and cls.__module__ == module.__name__:
                found.add(cls)
                assert issubclass(cls, DataModuleBase), f"{cls.__qualname__} does not derive from DataModuleBase"
    bases = {DataModuleBase, CharLevelDataModule, IrregularDataModule}  # shared plumbing, never configured directly
    tested = {SVADataModule, Enwik8DataModule, CodeParrotDataModule, WordLMDataModule, SpeechCommandsDataModule,
              WikiTextCharDataModule, PythonCodeCharDataModule, MQARDataModule, BPELMDataModule,
              GLUEDataModule, XORDataModule, ResonanceDataModule, ResonanceForecastDataModule, SpiralsDataModule,
              UEADataModule, EventDataModule, HeartRateDataModule}  # one CASES entry each
    assert found - bases == tested, "add a CASES entry for every new data module"
