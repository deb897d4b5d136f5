"""quiet_third_party(): each known third-party message is silenced at its source, precisely, and nothing else is.

Every filter is exercised through the upstream code path that emits it (a Lightning Trainer, seed_everything,
Lightning's pytree helper); a control run without the filter proves the path still emits it, so an upstream fix
fails the test and says the filter can go.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator
from pathlib import Path

import lightning as L
import pytest
from hydra import compose, initialize_config_dir
from lightning.pytorch.loggers import CSVLogger

import oscrepro
from oscrepro.utils import quiet
from oscrepro.utils.quiet import NOISE_ENV, QUIET_LOGGERS, WARNING_FILTERS, quiet_third_party

CONF = Path(oscrepro.__file__).resolve().parents[1] / "conf"
PYTREE = "`isinstance(treespec, LeafSpec)` is deprecated"


@pytest.fixture(autouse=True)
def _isolated(monkeypatch) -> Iterator[None]:
    """Undo the filters and logger levels a test installs; start from 'show every warning'."""
    monkeypatch.delenv(NOISE_ENV, raising=False)
    levels = {q.name: logging.getLogger(q.name).level for q in QUIET_LOGGERS}
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        yield
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _logged(logger_name: str, fn) -> list[str]:
    """Messages ``fn()`` logs through ``logger_name`` (a handler on that logger: Lightning may not propagate)."""
    handler, logger = _Records(), logging.getLogger(logger_name)
    logger.addHandler(handler)
    try:
        fn()
    finally:
        logger.removeHandler(handler)
    return handler.messages


def _warned(fn) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        fn()
    return [str(w.message) for w in caught]


def _pytree_leaf() -> None:
    from lightning.pytorch.utilities._pytree import _tree_flatten

    _tree_flatten(1)  # a leaf: Lightning builds torch's deprecated LeafSpec()


def _trainer(tmp_path: Path) -> None:
    L.Trainer(accelerator="cpu", devices=1, logger=CSVLogger(str(tmp_path)), default_root_dir=str(tmp_path),
              enable_progress_bar=False, enable_checkpointing=False)


def test_lightning_pytree_deprecation_is_silenced():
    assert any(PYTREE in m for m in _warned(_pytree_leaf)), "upstream no longer warns: drop the filter in quiet.py"
    quiet_third_party()
    assert not any(PYTREE in m for m in _warned(_pytree_leaf))


def test_filters_are_precise_same_text_elsewhere_or_other_category_still_shows():
    quiet_third_party()
    for f in WARNING_FILTERS:
        text = PYTREE if f.category is FutureWarning else f.message
        for category, module in ((f.category, "oscrepro.train"), (UserWarning, "lightning.pytorch.utilities._pytree")):
            msgs = _warned(lambda c=category, m=module: warnings.warn_explicit(text, c, "x.py", 1, module=m))
            assert msgs == [text], (category, module)


def test_lightning_device_lines_tip_and_seed_line_are_silenced(tmp_path):
    rank_zero, seed = "lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.seed"
    logging.getLogger(rank_zero).setLevel(logging.INFO)
    logging.getLogger(seed).setLevel(logging.INFO)
    before = _logged(rank_zero, lambda: _trainer(tmp_path)) + _logged(seed, lambda: L.seed_everything(0))
    for line in ("GPU available:", "TPU available:", "Tip: For seamless cloud logging", "Seed set to 0"):
        assert any(line in m for m in before), f"upstream no longer logs {line!r}: drop it from quiet.py"

    quiet_third_party()
    assert _logged(rank_zero, lambda: _trainer(tmp_path)) + _logged(seed, lambda: L.seed_everything(0)) == []
    # raised to WARNING, not disabled: Lightning's real problems on these loggers still get through
    assert _logged(rank_zero, lambda: logging.getLogger(rank_zero).warning("real problem")) == ["real problem"]


def test_our_warnings_and_lightning_real_warnings_still_show():
    quiet_third_party()
    ours = _warned(lambda: warnings.warn_explicit("data looks wrong", UserWarning, "sva.py", 1,
                                                  module="oscrepro.data.sva_module"))
    assert ours == ["data looks wrong"]
    from lightning.pytorch.utilities.rank_zero import rank_zero_warn

    assert _warned(lambda: rank_zero_warn("GPU available but not used.")) == ["GPU available but not used."]
    assert any("diverged" in m for m in _warned(lambda: warnings.warn("run x diverged", RuntimeWarning)))


def test_idempotent_and_opt_out(monkeypatch):
    quiet_third_party()
    n = len(warnings.filters)
    quiet_third_party()
    assert len(warnings.filters) == n

    warnings.resetwarnings()
    warnings.simplefilter("always")
    monkeypatch.setenv(NOISE_ENV, "1")
    quiet.quiet_third_party()
    assert any(PYTREE in m for m in _warned(_pytree_leaf))


@pytest.mark.parametrize("launcher", ["joblib", "joblib_2jobs"])
def test_launcher_configs_do_not_trigger_hydra_schema_matching(launcher):
    """A conf/hydra/launcher/<name>.yaml named like a plugin's ConfigStore node makes Hydra warn on every job."""
    pytest.importorskip("hydra_plugins.hydra_joblib_launcher")
    with warnings.catch_warnings(record=True) as caught, initialize_config_dir(str(CONF), version_base="1.3"):
        cfg = compose("train", overrides=[f"hydra/launcher={launcher}"], return_hydra_config=True)
    assert not [str(w.message) for w in caught if "ConfigStore schema with the same name" in str(w.message)]
    assert cfg.hydra.launcher.n_jobs == (2 if launcher == "joblib_2jobs" else -1)
