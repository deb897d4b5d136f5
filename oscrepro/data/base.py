"""The data-module contract: what every data module in ``oscrepro.data`` provides to training and analysis.

A data module is a ``LightningDataModule`` built by Hydra from ``conf/data/<dataset>.yaml`` and used as

    dm, verify = instantiate_data(cfg.data)                  # without data.verify (oscrepro.data.integrity)
    dm.setup("fit")                                          # load / generate, split, fingerprint
    model = instantiate(cfg.model, **model_dims(dm))         # the backbone is sized by the data
    trainer.fit(task, datamodule=dm)                         # train_dataloader / val_dataloader
    trainer.test(task, datamodule=dm)                        # test_dataloader
    record(data_source=dm.source, data_fingerprint=dm.fingerprint)

It provides (:class:`DataModule`, checked at runtime with ``isinstance``):

* ``setup(stage)``: idempotent; after it every attribute below is final.
* ``train_dataloader()`` / ``val_dataloader()`` / ``test_dataloader()``.
* ``source``: a human-readable description of where the data came from, written into run records and table
  headers. It names the files / generator and seed, and says "stand-in" when the data replaces the paper's
  dataset and "subset" when only part of it is used (a budget cut, a prefix, a test-set subset).
* ``fingerprint``: a hex string derived from sha256 (16 hex digits, :data:`FINGERPRINT_HEX`) of the source files
  (:func:`oscrepro.data.fingerprint.fingerprint_files`) or of the generated examples; it goes into run records.
  Empty before ``setup``.
* ``dims``: a :class:`DataDims` mapping of the sizes the model is built from (``vocab_size`` for token input,
  ``n_features`` for real-valued feature input, ``n_classes`` for classification) plus ``seq_len``, the longest
  input length T of a batch. Only known sizes are present (a vocabulary is known after ``setup``).

:class:`DataModuleBase` implements ``source`` / ``fingerprint`` / ``dims`` on top of the attribute names the
configs and models already use (``dm.vocab_size``, ``dm.n_features``, ``dm.n_classes``, ``dm.seq_len``);
subclasses set them and implement ``setup`` and the loaders. :func:`model_dims` is the one place that turns a data
module into backbone keyword arguments.
"""

from __future__ import annotations

from typing import Any, Protocol, TypedDict, runtime_checkable

import lightning as L
import torch
from torch.utils.data import DataLoader

from oscrepro.data.fingerprint import FINGERPRINT_HEX

__all__ = ["FINGERPRINT_HEX", "DataDims", "DataModule", "DataModuleBase", "model_dims"]

MODEL_DIM_KEYS = ("vocab_size", "n_features", "n_classes")  # backbone constructor keywords the data decides
DIM_KEYS = (*MODEL_DIM_KEYS, "seq_len")


class DataDims(TypedDict, total=False):
    """Sizes a data module fixes; a key is present only once its value is known."""

    vocab_size: int  # token input: number of distinct ids (embedding rows, LM head width)
    n_features: int  # real-valued input: features per time step (input projection width)
    n_classes: int  # classification: number of labels (head width)
    seq_len: int  # longest input length T of a batch (recorded; no backbone takes it)


@runtime_checkable
class DataModule(Protocol):
    """What training, analysis and tables may rely on in a data module (see the module docstring)."""

    source: str
    fingerprint: str

    @property
    def dims(self) -> DataDims: ...

    def setup(self, stage: str | None = None) -> None: ...

    def train_dataloader(self) -> DataLoader: ...

    def val_dataloader(self) -> DataLoader: ...

    def test_dataloader(self) -> DataLoader: ...


class DataModuleBase(L.LightningDataModule):
    """LightningDataModule with the contract's attributes; subclasses fill them in ``__init__`` / ``setup``."""

    def __init__(self) -> None:
        super().__init__()
        self.vocab_size: int | None = None
        self.n_features: int | None = None
        self.n_classes: int | None = None
        self.seq_len: int | None = None
        self.source: str = ""
        self.fingerprint: str = ""

    @property
    def dims(self) -> DataDims:
        """The known sizes among ``vocab_size``, ``n_features``, ``n_classes``, ``seq_len`` (None = not known)."""
        found = {k: getattr(self, k, None) for k in DIM_KEYS}
        return DataDims(**{k: int(v) for k, v in found.items() if v is not None})

    LOADER_SPLITS: tuple[str, str, str] = ("train", "val", "test")  # split names ``_loader`` takes

    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        """The DataLoader of one split; a subclass that defines it gets the three loader methods below."""
        raise NotImplementedError(f"{type(self).__name__} defines neither _loader nor its *_dataloader methods")

    def train_dataloader(self) -> DataLoader:
        return self._loader(self.LOADER_SPLITS[0], True)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self.LOADER_SPLITS[1], False)

    def test_dataloader(self) -> DataLoader:
        return self._loader(self.LOADER_SPLITS[2], False)

    def transfer_batch_to_device(self, batch: Any, device: torch.device, dataloader_idx: int) -> Any:
        """Batches are built on the CPU: on a CPU device Lightning's recursive move (a walk over every tensor of
        the batch, ~5 % of a small model's training step) is skipped; other devices get Lightning's move."""
        if device.type == "cpu":
            return batch
        return super().transfer_batch_to_device(batch, device, dataloader_idx)


def model_dims(dm: DataModule) -> dict[str, int]:
    """Keyword arguments a backbone takes from the data: the known ones of ``vocab_size``, ``n_features``,
    ``n_classes`` (``seq_len`` is left out: no backbone's constructor takes it).

    Call after ``dm.setup(...)``. Training and every analysis that rebuilds a trained model call
    ``instantiate(cfg.model, **model_dims(dm))``, so both get the same constructor arguments. Before ``setup``
    (nothing known yet) it raises ``ValueError``; for an object off the contract, ``TypeError``.
    """
    if not isinstance(dm, DataModule):
        raise TypeError(f"{type(dm).__name__} does not follow the data-module contract (oscrepro.data.base)")
    dims = {k: int(v) for k, v in dm.dims.items() if k in MODEL_DIM_KEYS}
    if not dims:
        raise ValueError(f"{type(dm).__name__} knows none of {', '.join(MODEL_DIM_KEYS)}: call setup() first")
    return dims
