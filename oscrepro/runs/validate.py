"""Config values checked once, when the config is composed, before a run id or a record exists.

A bad value used to surface as a traceback deep in a data module or a model, after a ``failed`` run record had been
written under results/runs (``seed=abc``, ``model.d_model=-4``, ``data.batch_size=0``), or not at all: ``seed=1.5``
trained as seed 1 under another run id, ``seed=true`` trained, ``data.n_train=-5`` trained to ``status: ok``.
:func:`validate_config` walks the composed config and checks every leaf whose *name* has a known meaning, wherever
it sits (``model.d_model``, ``model.attention.n_heads``, ``data.batch_size``, ...), and raises one
:class:`ConfigError` that lists every problem with its key, its value and what is allowed.

The rules are by leaf name because the framework's config groups share a vocabulary: a dimension is
``d_*``, a count is ``n_*``; names with no rule here are left to the component that reads them. ``null`` is
accepted wherever a rule allows "unset" (``max_len: null`` = no cap).

A few rules read several keys: the seed must fit the RNGs it seeds (``seed=4294967296`` used to fail inside
``seed_everything``); a run must train at least one step (``trainer.max_epochs=0`` trained nothing and recorded
the untrained model's metrics as ``ok``); and the model's classes declare what fits together
(:mod:`oscrepro.runs.contracts`: mechanism <-> backbone, each mechanism's shape rules such as ``d_model``
divisible by ``n_heads``).
"""

from __future__ import annotations

import functools
import math
import typing
from collections.abc import Callable, Iterator
from typing import Any

from omegaconf import DictConfig, ListConfig

from oscrepro.runs.contracts import model_problems
from oscrepro.utils.errors import ConfigError


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return (isinstance(v, int | float) and not isinstance(v, bool)) and math.isfinite(v)


Rule = tuple[Callable[[Any], bool], str, bool]  # (check, what is allowed, null allowed)

POS_INT: Rule = (lambda v: _is_int(v) and v >= 1, "an integer >= 1", False)
POS_INT_OR_NULL: Rule = (POS_INT[0], "an integer >= 1 or null", True)
NONNEG_INT: Rule = (lambda v: _is_int(v) and v >= 0, "an integer >= 0", False)
EPOCHS: Rule = (lambda v: _is_int(v) and v >= -1, "an integer >= -1 (-1: no limit)", True)
STEPS: Rule = (lambda v: _is_int(v) and (v >= 1 or v == -1), "an integer >= 1, or -1 (no limit)", True)
POS_FLOAT: Rule = (lambda v: _is_num(v) and v > 0, "a finite number > 0", False)
NONNEG_FLOAT_OR_NULL: Rule = (lambda v: _is_num(v) and v >= 0, "a finite number >= 0 or null", True)
PROBABILITY: Rule = (lambda v: _is_num(v) and 0 <= v < 1, "a number in [0, 1)", False)

RULES: dict[str, Rule] = {
    # dimensions and sizes: at least one
    "d_model": POS_INT_OR_NULL, "d_ff": POS_INT_OR_NULL,  # null: sized by the model (e.g. a width search)
    "d_head": POS_INT_OR_NULL, "n_heads": POS_INT, "n_layers": POS_INT,
    "n_kv_heads": POS_INT_OR_NULL, "vocab_size": POS_INT_OR_NULL, "seq_len": POS_INT_OR_NULL,
    "max_len": POS_INT_OR_NULL, "batch_size": POS_INT, "n_train": POS_INT, "n_val": POS_INT, "n_test": POS_INT,
    "n_nodes": POS_INT, "eval_n_nodes": POS_INT, "accumulate_grad_batches": POS_INT,
    # counts that may be zero
    "n_steps": NONNEG_INT, "num_workers": NONNEG_INT, "warmup_steps": NONNEG_INT,
    # training length and optimisation
    "max_epochs": EPOCHS, "max_steps": STEPS, "lr": POS_FLOAT, "weight_decay": NONNEG_FLOAT_OR_NULL,
    "gradient_clip_val": NONNEG_FLOAT_OR_NULL, "dropout": PROBABILITY, "attn_dropout": PROBABILITY,
}


def _leaves(node: Any, prefix: str = "") -> Iterator[tuple[str, str, Any]]:
    """(dotted key, leaf name, value) of every leaf; interpolations that do not resolve are skipped."""
    if isinstance(node, DictConfig):
        for key in node.keys():
            try:
                value = node[key]
            except Exception:  # noqa: BLE001 (a missing ${oc.env:...} or ???: the reader reports it)
                continue
            yield from _leaves(value, f"{prefix}{key}.") if isinstance(value, DictConfig | ListConfig) else [
                (f"{prefix}{key}", str(key), value)]
    elif isinstance(node, ListConfig):
        for i, value in enumerate(node):
            if isinstance(value, DictConfig | ListConfig):
                yield from _leaves(value, f"{prefix}{i}.")


SEED_MAX = 2**32 - 1  # numpy's legacy seeding (and so Lightning's seed_everything) takes [0, 2**32 - 1]


def training_length_problems(trainer: Any) -> list[str]:
    """A run trains at least one step: ``trainer.max_epochs`` >= 1, or -1 / null with a positive
    ``trainer.max_steps`` (Lightning stops at whichever limit comes first; 0 of either trains nothing), and
    ``trainer.limit_train_batches`` is not 0."""
    if not isinstance(trainer, DictConfig):
        return []
    epochs, steps = trainer.get("max_epochs"), trainer.get("max_steps")
    problems = []
    if _is_int(epochs) and epochs == 0:
        problems.append("trainer.max_epochs=0: trains nothing; must be >= 1 (or -1 with a positive trainer.max_steps)")
    elif (epochs is None or epochs == -1) and not (_is_int(steps) and steps >= 1):
        problems.append(f"trainer.max_epochs={epochs!r} with trainer.max_steps={steps!r}: no limit on training; set "
                        f"trainer.max_epochs >= 1 or a positive trainer.max_steps")
    limit = trainer.get("limit_train_batches")
    if _is_num(limit) and limit == 0:
        problems.append(f"trainer.limit_train_batches={limit!r}: trains nothing; must be > 0 (or null: every batch)")
    precision = trainer.get("precision")
    if precision is not None and precision not in lightning_precisions():
        problems.append(f"trainer.precision={precision!r}: must be one of Lightning's precisions: "
                        + ", ".join(map(str, lightning_precisions())))
    return problems


@functools.cache
def lightning_precisions() -> tuple[int | str, ...]:
    """The values Lightning's ``Trainer(precision=...)`` accepts, read from its own type (``_PRECISION_INPUT``, a
    union of literals), so that a new Lightning precision is accepted here without an edit."""
    from lightning.fabric.connector import _PRECISION_INPUT

    def flat(t: Any) -> list[Any]:
        return [v for a in typing.get_args(t) for v in (flat(a) if typing.get_args(a) else [a])]

    return tuple(flat(_PRECISION_INPUT))


def config_problems(cfg: DictConfig) -> list[str]:
    """Every value that breaks a rule, as ``key=value: must be ...`` lines (empty when the config is valid)."""
    problems = []
    seed = cfg.get("seed")
    if not (_is_int(seed) and 0 <= seed <= SEED_MAX):
        problems.append(f"seed={seed!r}: must be an integer in [0, {SEED_MAX}] (it names the run and seeds every RNG)")
    sel = cfg.get("select")
    if sel is not None and not (isinstance(sel, DictConfig) and str(sel.get("monitor", "")).startswith("val/")
                                and sel.get("mode") in ("min", "max")):
        problems.append(f"select={sel!r}: must be {{monitor: val/<metric>, mode: min | max}} (model selection reads "
                        f"validation metrics only)")
    for key, name, value in _leaves(cfg):
        rule = RULES.get(name)
        if rule is None or key.startswith(("hydra.", "paths.")):
            continue
        check, allowed, nullable = rule
        if value is None and nullable:
            continue
        if value is None or not check(value):
            problems.append(f"{key}={value!r}: must be {allowed}")
    # the rules below read several values: each group only once its leaves are valid
    if not any(p.startswith("trainer.") for p in problems):
        problems += training_length_problems(cfg.get("trainer"))
    if not any(p.startswith("model.") for p in problems):
        problems += model_problems(cfg)
    return problems


def invalid_config_message(problems: list[str], context: str = "") -> str:
    """The one message of :func:`validate_config`: one line for one problem, else a line per problem."""
    head = f"{context}{': ' if context else ''}invalid config, nothing was run or written"
    return f"{head}: {problems[0]}" if len(problems) == 1 else f"{head}:\n  " + "\n  ".join(problems)


def validate_config(cfg: DictConfig, context: str = "") -> None:
    """Raise :class:`ConfigError` listing every bad value (module docstring); nothing is written before this.
    ``context`` (e.g. a table cell) prefixes the message."""
    problems = config_problems(cfg)
    if problems:
        raise ConfigError(invalid_config_message(problems, context))

