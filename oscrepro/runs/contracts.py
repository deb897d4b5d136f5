"""Mechanism <-> backbone compatibility and each mechanism's shape rules, read from the classes' own declarations
before anything is built (called by :func:`oscrepro.runs.validate.config_problems`).

``attention=fqo`` on ``experiment=fsn/charlm``, ``model.d_model=7 model.n_heads=2`` or ``attention=gqa
model.n_heads=6 model.attention.n_kv_heads=4`` used to fail inside ``instantiate`` or the first forward, as a
traceback and a ``failed`` run record. The rules live with the classes that need them
(:mod:`oscrepro.attention.base` describes them):

* a backbone declares the call contract it builds its mechanism with (``attention_contract``: ``vector``,
  ``phase``, or None for a backbone with its own attention) and, when the mechanism's ``d_model`` / ``n_heads``
  are not its own keys of those names, where they come from (``attention_shape``); a backbone without a
  declaration (the paper-specific models) hosts none when its constructor takes no ``attention``;
* a mechanism declares the contracts it implements (``contracts``) and its rules (``config_problems``).

A mismatch names what the backbone needs, the attention configs that fit it and the experiments that fit the
chosen mechanism. Both lists are computed from conf/ (the ``_target_`` of each conf/attention/*.yaml; each
conf/experiment composed), so nothing here lists mechanisms, backbones or experiments by name.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hydra.utils import get_class
from omegaconf import DictConfig, OmegaConf

from oscrepro.attention.base import VECTOR

UNKNOWN = "unknown"  # a backbone that forwards **kwargs and declares nothing: not checked
DEFAULT_SHAPE = {"d_model": "d_model", "n_heads": "n_heads"}  # mechanism argument -> backbone config key
HYDRA_KEYS = ("_target_", "_partial_", "_args_", "_recursive_", "_convert_")
BUILT_BY_BACKBONE = ("d_model", "n_heads", "layer_idx", "gates")  # what the backbone passes, not the config


def hosted_contract(backbone: type) -> str | None:
    """The contract ``backbone`` builds its attention with: its declaration, else ``vector`` when its constructor
    takes ``attention``, None when it takes neither ``attention`` nor ``**kwargs`` (its own mechanism), else
    :data:`UNKNOWN`."""
    if hasattr(backbone, "attention_contract"):
        return backbone.attention_contract
    params = inspect.signature(backbone).parameters
    if "attention" in params:
        return VECTOR
    return UNKNOWN if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()) else None


def attention_required(backbone: type) -> bool:
    """Whether ``backbone`` cannot be built without a mechanism: its ``attention`` argument has no default (or is
    forwarded through ``**kwargs`` to a block that needs it)."""
    param = inspect.signature(backbone).parameters.get("attention")
    return param is None or param.default is inspect.Parameter.empty


def _contracts(mechanism: type) -> frozenset[str]:
    return getattr(mechanism, "contracts", frozenset({VECTOR}))


def _class(target: Any) -> type | None:
    try:
        return get_class(str(target))
    except Exception:  # noqa: BLE001 -- an unimportable target is reported by the caller
        return None


@functools.cache
def attention_configs(conf_dir: Path) -> dict[str, frozenset[str]]:
    """``{attention config name: contracts of its mechanism}`` for every conf/attention/*.yaml."""
    out = {}
    for path in sorted((conf_dir / "attention").rglob("*.yaml")):
        mechanism = _class(OmegaConf.load(path).get("_target_"))
        if mechanism is not None:
            out[str(path.relative_to(conf_dir / "attention").with_suffix(""))] = _contracts(mechanism)
    return out


@functools.cache
def experiment_contracts(conf_dir: Path) -> dict[str, str | None]:
    """``{experiment name: contract its backbone hosts}`` for every conf/experiment/**.yaml, each composed as
    ``experiment=<name>`` (in an isolated Hydra: this may run inside a Hydra app). Experiments that do not compose
    on their own are left out."""
    from hydra import compose

    from oscrepro.runs.sweep import isolated_hydra

    out = {}
    with isolated_hydra(conf_dir):
        for path in sorted((conf_dir / "experiment").rglob("*.yaml")):
            name = str(path.relative_to(conf_dir / "experiment").with_suffix(""))
            try:
                backbone = _class(compose(config_name="train", overrides=[f"experiment={name}"]).model._target_)
            except Exception:  # noqa: BLE001 -- not composable alone: not a candidate
                continue
            if backbone is not None:
                out[name] = hosted_contract(backbone)
    return out


def _either(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def mismatch_message(backbone: type, contract: str | None, mechanism: type | None, choice: str | None,
                     conf_dir: Path) -> str:
    """One message: what ``backbone`` needs (its contract, the attention configs that fit it) and, for the chosen
    ``mechanism``, the experiments whose backbone fits it."""
    where = f"{backbone.__name__} ({backbone.__module__})"
    if contract is None:
        return (f"model.attention: {where} has its own attention: compose it without an attention group "
                f"(experiment defaults `- override /attention: null`, or `~attention` on the CLI)")
    fitting = [name for name, contracts in attention_configs(conf_dir).items() if contract in contracts]
    needs = f"{where} builds its attention with the '{contract}' contract: choose attention={_either(fitting)}"
    if mechanism is None:
        return f"model.attention is missing: {needs}"
    label = f"attention={choice} ({mechanism.__name__})" if choice else mechanism.__name__
    fits = sorted(name for name, hosted in experiment_contracts(conf_dir).items()
                  if hosted is not None and hosted in _contracts(mechanism))
    experiments = f"; experiments that fit {choice or mechanism.__name__}: {', '.join(fits)}" if fits else ""
    return (f"model.attention: {label} implements the {' / '.join(sorted(_contracts(mechanism)))} contract, but "
            f"{needs}{experiments}")


def attention_shape(backbone: type, model: Mapping[str, Any]) -> dict[str, int] | None:
    """The ``d_model`` / ``n_heads`` the backbone builds its mechanism with, from its config (its declaration
    ``attention_shape`` maps each to a dotted key); None when one is unset or not a positive integer (the leaf
    rules of oscrepro.runs.validate report those)."""
    shape = {}
    for arg, key in getattr(backbone, "attention_shape", DEFAULT_SHAPE).items():
        value: Any = model
        for part in key.split("."):
            value = value.get(part) if isinstance(value, Mapping) else None
        if not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
            return None
        shape[arg] = value
    return shape


def mechanism_problems(mechanism: type, hparams: dict[str, Any], shape: dict[str, int] | None,
                       shape_keys: Mapping[str, str]) -> list[str]:
    """Keys of ``model.attention`` the mechanism does not take, then its own rules (``config_problems``) on the
    shapes the backbone gives it and its hyperparameters (the constructor's defaults filled in)."""
    params = inspect.signature(mechanism).parameters
    problems = []
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        taken = [n for n in params if n not in BUILT_BY_BACKBONE]
        problems += [f"model.attention.{key}={value!r}: {mechanism.__name__} takes no '{key}' (it takes: "
                     f"{', '.join(taken)})" for key, value in hparams.items() if key not in params]
    rules = getattr(mechanism, "config_problems", None)
    if problems or shape is None or rules is None:
        return problems
    given = {n: p.default for n, p in params.items() if p.default is not inspect.Parameter.empty}
    given.update(hparams)
    for key in BUILT_BY_BACKBONE:
        given.pop(key, None)
    source = ", ".join(f"model.{shape_keys[arg]}={value}" for arg, value in shape.items())
    return [f"model.attention ({mechanism.__name__}; {source}): {p}" for p in rules(**shape, **given)]


def accepted_keys(cls: type) -> set[str] | None:
    """The keyword arguments ``cls`` takes, following a declared ``kwargs_to`` (the class, in the same module, that
    its ``**kwargs`` are passed to); None when they end in ``**kwargs`` that nothing declares (not checked)."""
    params = inspect.signature(cls).parameters
    names = {n for n, p in params.items() if p.kind not in (inspect.Parameter.VAR_KEYWORD,
                                                             inspect.Parameter.VAR_POSITIONAL)}
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return names
    target = getattr(cls, "kwargs_to", None)
    inner = getattr(inspect.getmodule(cls), target, None) if isinstance(target, str) else None
    if not isinstance(inner, type):
        return None
    more = accepted_keys(inner)
    return None if more is None else names | more


def model_problems(cfg: DictConfig, conf_dir: Path | None = None) -> list[str]:
    """Every problem of ``cfg.model`` that its classes declare (module docstring), as messages; empty when the
    backbone and its mechanism fit and their rules hold."""
    model = cfg.get("model")
    if not isinstance(model, DictConfig) or not isinstance(model.get("_target_"), str):
        return []
    backbone = _class(model._target_)
    if backbone is None:
        return [f"model._target_={model._target_!r}: not an importable class"]
    try:
        values = OmegaConf.to_container(model, resolve=True)
    except Exception:  # noqa: BLE001 -- an interpolation that does not resolve: its reader reports it
        return []
    if conf_dir is None:
        from oscrepro.runs.compose import CONF_DIR

        conf_dir = CONF_DIR
    taken = accepted_keys(backbone)
    if taken is not None:  # a key the backbone (or the class its **kwargs go to) would refuse
        unknown = [f"model.{k}={v!r}: {backbone.__name__} takes no '{k}' (it takes: {', '.join(sorted(taken))})"
                   for k, v in values.items() if k not in HYDRA_KEYS and k not in taken]
        if unknown:
            return unknown
    own = getattr(backbone, "config_problems", None)
    problems = [] if own is None else [f"model ({backbone.__name__}): {p}" for p in own(
        **{k: v for k, v in values.items() if k not in HYDRA_KEYS and k != "attention"})]
    contract = hosted_contract(backbone)
    attention = values.get("attention")
    if contract == UNKNOWN or (attention is None and (contract is None or not attention_required(backbone))):
        return problems
    mechanism = None if attention is None else _class(attention.get("_target_"))
    if attention is not None and mechanism is None:
        return [*problems, f"model.attention._target_={attention.get('_target_')!r}: not an importable class"]
    if mechanism is None or contract is None or contract not in _contracts(mechanism):
        return [*problems, mismatch_message(backbone, contract, mechanism, cfg.get("mechanism"), conf_dir)]
    hparams = {k: v for k, v in attention.items() if k not in HYDRA_KEYS}
    shape_keys = getattr(backbone, "attention_shape", DEFAULT_SHAPE)
    return problems + mechanism_problems(mechanism, hparams, attention_shape(backbone, values), shape_keys)
