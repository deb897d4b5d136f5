"""quiet_third_party(): each known third-party message is silenced at its source, precisely, and nothing else is.

Every filter is exercised through the upstream code path that emits it (a Lightning Trainer, seed_everything,
Lightning's pytree helper); a control run without the filter proves the path still emits it, so an upstream fix
fails the test and says the filter can go.
"""

from __future__ import annotations

import importlib
import logging
import os
import tomllib
import warnings
from collections.abc import Iterator
from pathlib import Path

import lightning as L
import pytest
import torch
from hydra import compose, initialize_config_dir
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger

import oscrepro
from oscrepro.utils import quiet
from oscrepro.utils.quiet import (
    NOISE_ENV,
    QUIET_LOGGERS,
    RESUME_FILTERS,
    WARNING_FILTERS,
    expected_on_resume,
    quiet_third_party,
)

PACKAGE = Path(oscrepro.__file__).resolve().parent
CONF = PACKAGE.parent / "conf"
PYTREE = "`isinstance(treespec, LeafSpec)` is deprecated"
SCRIPT_METHOD = "`torch.jit.script_method` is deprecated"
SHORT_EPOCH = "The number of training batches (64) is smaller than the logging interval"
FEW_WORKERS = "The 'train_dataloader' does not have many workers which may be a bottleneck"


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


def _few_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Lightning's own worker check, as on the 16-core GPU machine (this CPU has too few cores to trigger it)."""
    from lightning.pytorch.trainer.connectors import data_connector

    monkeypatch.setattr(data_connector, "suggested_max_num_workers", lambda devices: 15)
    loader = torch.utils.data.DataLoader(list(range(4)), num_workers=0)
    trainer = L.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False)
    data_connector._worker_check(trainer, loader, "train_dataloader")


def _pytree_leaf() -> None:
    from lightning.pytorch.utilities._pytree import _tree_flatten

    _tree_flatten(1)  # a leaf: Lightning builds torch's deprecated LeafSpec()


def _trainer(tmp_path: Path) -> None:
    L.Trainer(accelerator="cpu", devices=1, logger=CSVLogger(str(tmp_path)), default_root_dir=str(tmp_path),
              enable_progress_bar=False, enable_checkpointing=False)


def _short_epoch_fit(tmp_path: Path) -> None:
    """A fit whose epoch (64 batches) is shorter than log_every_n_steps=100 (the UEA stand-ins' 13-14 batches)."""
    from lightning.pytorch.demos.boring_classes import BoringModel

    L.Trainer(accelerator="cpu", devices=1, max_epochs=1, logger=CSVLogger(str(tmp_path)), enable_progress_bar=False,
              enable_checkpointing=False, enable_model_summary=False, log_every_n_steps=100).fit(BoringModel())


def _torch_mkldnn_import() -> None:
    import torch.utils.mkldnn

    importlib.reload(torch.utils.mkldnn)  # what inductor's first import does: 14 @torch.jit.script_method


def _resume_into(run_dir: Path) -> None:
    """What oscrepro.train does on resume: checkpoint callback and CSV logger on the run's non-empty dirs."""
    for sub, name in (("checkpoints", "epoch=0-step=3.ckpt"), ("logs", "metrics.before_resume.csv")):
        (run_dir / sub).mkdir(parents=True, exist_ok=True)
        (run_dir / sub / name).write_text("x")
    logger = CSVLogger(save_dir=str(run_dir), name="", version="logs")
    trainer = L.Trainer(accelerator="cpu", devices=1, logger=logger, default_root_dir=str(run_dir),
                        enable_progress_bar=False)
    ModelCheckpoint(dirpath=str(run_dir / "checkpoints"), save_top_k=1).setup(trainer, None, "fit")
    logger.experiment  # noqa: B018 -- creating it runs the log-dir check


@pytest.mark.parametrize(("text", "emit"), [(PYTREE, _pytree_leaf), (SCRIPT_METHOD, _torch_mkldnn_import),
                                            (SHORT_EPOCH, "short_epoch"), (FEW_WORKERS, "few_workers")])
def test_known_third_party_warnings_are_silenced(text, emit, tmp_path, monkeypatch):
    if emit == "short_epoch":
        emit = lambda: _short_epoch_fit(tmp_path)  # noqa: E731
    if emit == "few_workers":
        emit = lambda: _few_workers(monkeypatch)  # noqa: E731
    assert any(text in m for m in _warned(emit)), f"upstream no longer warns {text!r}: drop its filter in quiet.py"
    quiet_third_party()
    assert not any(text in m for m in _warned(emit))


def _warned_as(text: str, category: type[Warning], module: str) -> list[str]:
    """Messages shown when ``text`` is warned as if from ``module`` (the module a filter's regex is matched on)."""
    return _warned(lambda: warnings.warn_explicit(text, category, "x.py", 1, module=module))


def test_filters_are_precise_same_text_from_our_module_or_other_category_still_shows():
    quiet_third_party()
    texts = [PYTREE + ", use ...", SCRIPT_METHOD + ". Please switch ...", SHORT_EPOCH + " Trainer(...).",
             FEW_WORKERS + ". Consider ..."]
    assert len(texts) == len(WARNING_FILTERS)
    for f, text in zip(WARNING_FILTERS, texts, strict=True):
        upstream = f.module.removesuffix(r"\Z").replace("\\", "")
        other = RuntimeWarning if f.category is not RuntimeWarning else UserWarning
        assert _warned_as(text, f.category, upstream) == []
        assert _warned_as(text, f.category, "oscrepro.train") == [text]
        assert _warned_as(text, other, upstream) == [text]
        assert _warned_as(text, f.category, upstream + "_other") == [text]


def test_resume_warnings_are_silenced_only_while_resuming(tmp_path):
    expected = ("Checkpoint directory", "Experiment logs directory")
    with expected_on_resume(False):
        shown = _warned(lambda: _resume_into(tmp_path / "a"))
    assert all(any(e in m for m in shown) for e in expected), f"upstream no longer warns: drop RESUME_FILTERS ({shown})"
    with expected_on_resume(True):
        assert not [m for m in _warned(lambda: _resume_into(tmp_path / "b")) if m.startswith(expected)]
        assert _warned(lambda: warnings.warn("our own problem", UserWarning, stacklevel=2)) == ["our own problem"]
    # scoped: after the resumed fit, the same warnings show again
    assert all(any(e in m for m in _warned(lambda: _resume_into(tmp_path / "c"))) for e in expected)
    assert len(RESUME_FILTERS) == 2


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
    assert any("diverged" in m for m in _warned(lambda: warnings.warn("run x diverged", RuntimeWarning, stacklevel=2)))


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


@pytest.mark.parametrize("launcher", ["joblib", "joblib_2jobs", "submitit_slurm", "submitit_local", "slurm_gpu"])
def test_launcher_configs_do_not_trigger_hydra_schema_matching(launcher):
    """A conf/hydra/launcher/<name>.yaml named like a plugin's ConfigStore node makes Hydra warn on every job."""
    with warnings.catch_warnings(record=True) as caught, initialize_config_dir(str(CONF), version_base="1.3"):
        cfg = compose("train", overrides=[f"hydra/launcher={launcher}"], return_hydra_config=True)
    assert not [str(w.message) for w in caught if "ConfigStore schema with the same name" in str(w.message)]
    if launcher.startswith("joblib"):
        assert cfg.hydra.launcher.n_jobs == (2 if launcher == "joblib_2jobs" else -1)
    if launcher == "slurm_gpu":  # ours extends the plugin's node: its schema, our GPU defaults
        assert cfg.hydra.launcher._target_.endswith("SlurmLauncher") and cfg.hydra.launcher.gpus_per_node == 1


def test_pytest_filters_mirror_quiet_filters_and_nothing_blanket():
    """pyproject.toml may only repeat quiet.py's precise filters (message + category + module), nothing broader."""
    ini = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    entries = [tuple(e.split(":")) for e in ini.get("filterwarnings", [])]
    assert all(len(e) == 4 and e[0] == "ignore" and e[1] and e[3] for e in entries), entries
    assert sorted(entries) == sorted(("ignore", f.message, f.category.__name__, f.module) for f in WARNING_FILTERS)


def test_oscrepro_does_not_use_torch_jit_script_method():
    """torch warns about script_method with stacklevel=1 (module torch.jit._script), so the filter would also hide
    our own use of it: there must be none."""
    users = [p for p in PACKAGE.rglob("*.py") if "script_method" in p.read_text() and p.name != "quiet.py"]
    assert users == []


def test_cpp_extension_cuda_home_line_is_dropped_and_other_records_still_show(caplog):
    """The LOG_FILTERS entry drops exactly torch's "No CUDA runtime is found" record of torch.utils.cpp_extension."""
    quiet_third_party()
    quiet_third_party()  # idempotent: one filter
    logger = logging.getLogger("torch.utils.cpp_extension")
    assert sum(type(f).__name__ == "_DropMatching" for f in logger.filters) == 1
    with caplog.at_level(logging.WARNING, logger="torch.utils.cpp_extension"):
        logger.warning("No CUDA runtime is found, using CUDA_HOME='/usr/local'")
        logger.warning("Error building extension 'x'")
    assert [r.getMessage() for r in caplog.records] == ["Error building extension 'x'"]


def test_the_table_cli_installs_the_filters(monkeypatch, tmp_path):
    """``python -m oscrepro.table`` quiets third-party noise itself: analysis tables load and compile models without
    going through train(), which installs the filters for runs."""
    import oscrepro.table as table_cli

    logger = logging.getLogger("torch.utils.cpp_extension")
    monkeypatch.setattr(logger, "filters", [])  # whatever earlier tests installed in this process
    md = tmp_path / "t.md"
    md.with_suffix(".csv").write_text("row,column,n_missing\n")
    monkeypatch.setattr(table_cli, "build_table", lambda *a, **k: md)
    table_cli.main(["fsn/table3", "--budget", "smoke"])
    assert sum(type(f).__name__ == "_DropMatching" for f in logger.filters) == 1


def _srun_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine with the SLURM client installed: an executable ``srun`` on PATH, not started by srun."""
    srun = tmp_path / "srun"
    srun.write_text("#!/bin/sh\nexit 0\n")
    srun.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ.get('PATH', '')}")
    for var in ("SLURM_NTASKS", "SLURM_JOB_ID", "SLURM_JOB_NAME"):
        monkeypatch.delenv(var, raising=False)


def _srun_check() -> None:
    from lightning.fabric.plugins.environments.slurm import SLURMEnvironment

    SLURMEnvironment._validate_srun_used()  # what every Trainer runs (SLURMEnvironment.detect)


SRUN = "The `srun` command is available on your system but is not used"


def test_srun_hint_is_silenced_outside_a_slurm_allocation(tmp_path, monkeypatch):
    _srun_on_path(tmp_path, monkeypatch)
    assert any(SRUN in m for m in _warned(_srun_check)), "upstream no longer hints srun: drop OUTSIDE_SLURM_FILTERS"
    quiet_third_party()
    assert not any(SRUN in m for m in _warned(_srun_check))
    assert _warned_as(SRUN + ".", UserWarning, "oscrepro.train") == [SRUN + "."]  # precise: module + message


def test_srun_hint_still_shows_inside_a_slurm_allocation(tmp_path, monkeypatch):
    """Inside an allocation a missing srun makes multi-process jobs hang: the hint is a real problem there."""
    _srun_on_path(tmp_path, monkeypatch)
    monkeypatch.setenv("SLURM_JOB_ID", "1234")
    quiet_third_party()
    assert any(SRUN in m for m in _warned(_srun_check))


def test_joblib_launcher_settings_repr_is_dropped_and_its_job_lines_still_show(caplog):
    """The message as hydra-joblib-launcher builds it (read from its source, so a change there fails here)."""
    import inspect

    from hydra_plugins.hydra_joblib_launcher import _core

    source = inspect.getsource(_core.launch)
    assert '"Joblib.Parallel({}) is launching {} jobs"' in source, "upstream changed the line: update LOG_FILTERS"
    settings = {"n_jobs": 2, "backend": "loky", "prefer": "processes", "pre_dispatch": "2*n_jobs"}
    repr_line = "Joblib.Parallel({}) is launching {} jobs".format(",".join(f"{k}={v}" for k, v in settings.items()), 2)
    quiet_third_party()
    with caplog.at_level(logging.INFO, logger=_core.log.name):
        _core.log.info(repr_line)
        _core.log.info("Launching jobs, sweep output dir : /tmp/x")
        _core.log.info("\t#0 : seed=0")
    assert [r.getMessage() for r in caplog.records] == ["Launching jobs, sweep output dir : /tmp/x", "\t#0 : seed=0"]


PROFILE = """
import torch
from torch.profiler import ProfilerActivity, profile
{quiet}
with profile(activities=[ProfilerActivity.CPU], profile_memory=True):
    torch.ones(4) + 1
"""


def _profiled_stderr(quiet_first: bool) -> str:
    """stderr of a fresh process that runs one CPU pass under torch.profiler (as oscrepro.bench.harness does)."""
    import subprocess
    import sys

    code = PROFILE.format(quiet="from oscrepro.utils.quiet import quiet_third_party; quiet_third_party()"
                          if quiet_first else "")
    env = {k: v for k, v in os.environ.items() if k not in ("KINETO_LOG_LEVEL", NOISE_ENV)}
    return subprocess.run([sys.executable, "-W", "ignore", "-c", code], capture_output=True, text=True, timeout=120,
                          env=env, check=True).stderr


def test_kineto_gpu_count_error_is_silenced_on_machines_without_a_gpu_driver():
    assert "gpuGetDeviceCount" not in _profiled_stderr(quiet_first=True)
    if "gpuGetDeviceCount" not in _profiled_stderr(quiet_first=False):
        pytest.skip("kineto does not log gpuGetDeviceCount here (a GPU driver, or a CPU-only torch wheel)")


def test_env_defaults_never_override_the_users_setting(monkeypatch):
    for env in quiet.ENV_DEFAULTS:
        monkeypatch.setenv(env.name, "3")
    quiet_third_party()
    assert all(os.environ[env.name] == "3" for env in quiet.ENV_DEFAULTS)
    for env in quiet.ENV_DEFAULTS:
        monkeypatch.delenv(env.name)
    quiet_third_party()
    assert all(os.environ[env.name] == env.value for env in quiet.ENV_DEFAULTS)
