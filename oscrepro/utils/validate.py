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
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

from omegaconf import DictConfig, ListConfig


class ConfigError(ValueError):
    """One or more config values out of their allowed range; the message lists each key, value and rule."""


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return (isinstance(v, int | float) and not isinstance(v, bool)) and math.isfinite(v)


Rule = tuple[Callable[[Any], bool], str, bool]  # (check, what is allowed, null allowed)

POS_INT: Rule = (lambda v: _is_int(v) and v >= 1, "an integer >= 1", False)
POS_INT_OR_NULL: Rule = (POS_INT[0], "an integer >= 1 or null", True)
NONNEG_INT: Rule = (lambda v: _is_int(v) and v >= 0, "an integer >= 0", False)
EPOCHS: Rule = (lambda v: _is_int(v) and v >= -1, "an integer >= -1 (-1: no limit)", True)
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
    "max_epochs": EPOCHS, "max_steps": EPOCHS, "lr": POS_FLOAT, "weight_decay": NONNEG_FLOAT_OR_NULL,
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


def config_problems(cfg: DictConfig) -> list[str]:
    """Every value that breaks a rule, as ``key=value: must be ...`` lines (empty when the config is valid)."""
    problems = []
    seed = cfg.get("seed")
    if not (_is_int(seed) and seed >= 0):
        problems.append(f"seed={seed!r}: must be an integer >= 0 (it names the run and seeds every RNG)")
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
    return problems


def validate_config(cfg: DictConfig, context: str = "") -> None:
    """Raise :class:`ConfigError` listing every bad value (module docstring); nothing is written before this.
    ``context`` (e.g. a table cell) prefixes the message."""
    problems = config_problems(cfg)
    if problems:
        raise ConfigError(f"{context}{': ' if context else ''}invalid config, nothing was run or written:\n  "
                          + "\n  ".join(problems))

