"""A misspelled config key gets the closest valid key, in one message, before anything is written.

Hydra refuses an override of a key that does not exist (``trainer.max_epoch=3``) with "Could not override
'trainer.max_epoch'... Key 'max_epoch' is not in struct", a hint to append it with ``+``, and no word about the key
the user meant. :func:`unknown_key_message` composes the overrides the way ``python -m oscrepro.train`` does; when
Hydra names an unknown key it composes again without that override and looks the key up among the valid ones:
first its siblings (``trainer.max_epochs``), then every dotted key of the config (``model.n_head`` ->
``model.n_heads``, ``lr`` -> ``task.optimizer.lr``). Both entry points call it: ``python -m oscrepro.train`` before
Hydra starts, the table CLI when a cell does not compose. :func:`compose_job` also gives Hydra's own composition
errors (an unknown config group option, an override that does not parse) as one line, for the train CLI, which
refuses every bad input in one message before Hydra writes its output dir.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterator

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import ConfigCompositionException, HydraException, OverrideParseException
from omegaconf import DictConfig, OmegaConf

UNKNOWN_KEY = re.compile(r"Could not override '([^']+)'|Key '[^']+' is not in struct\s+full_key: (\S+)")
Composer = Callable[[list[str]], DictConfig]


def dotted_keys(cfg: DictConfig) -> list[str]:
    """Every key path of ``cfg`` (``trainer``, ``trainer.max_epochs``, ...), without resolving values."""
    def walk(node: object, prefix: str) -> Iterator[str]:
        if isinstance(node, dict):
            for key, value in node.items():
                yield f"{prefix}{key}"
                yield from walk(value, f"{prefix}{key}.")

    return list(walk(OmegaConf.to_container(cfg, resolve=False), ""))


def closest_keys(key: str, cfg: DictConfig, n: int = 3, groups: tuple[str, ...] = ()) -> list[str]:
    """Valid keys closest to ``key``: siblings under the same parent first (config ``groups`` count as top-level
    keys: ``experimnt`` -> ``experiment``), then any dotted key of ``cfg``."""
    parent, _, leaf = key.rpartition(".")
    node = OmegaConf.select(cfg, parent, throw_on_resolution_failure=False) if parent else cfg
    if isinstance(node, DictConfig):
        names = [str(k) for k in node.keys()] + ([] if parent else [g for g in groups if g not in node])
        siblings = difflib.get_close_matches(leaf, names, n=n, cutoff=0.6)
        if siblings:
            return [f"{parent}.{s}" if parent else s for s in siblings]
    everything = dotted_keys(cfg)
    by_leaf = {p: p.rpartition(".")[2] for p in everything}
    close = difflib.get_close_matches(key, everything, n=n, cutoff=0.75)
    close += [p for p in everything if p not in close and by_leaf[p] in difflib.get_close_matches(
        leaf, sorted(set(by_leaf.values())), n=1, cutoff=0.8)]
    return close[:n]


def one_value_each(overrides: list[str]) -> list[str]:
    """Sweep overrides (``seed=0,1,2``) reduced to their first value, so that the sweep composes once."""
    parser = OverridesParser.create()
    out = []
    for text in overrides:
        try:
            (ov,) = parser.parse_overrides([text])
        except OverrideParseException:
            out.append(text)
            continue
        if ov.is_sweep_override():
            first = next(iter(ov.sweep_string_iterator()))
            out.append(f"{ov.get_key_element()}={first}")
        else:
            out.append(text)
    return out


def one_line(text: str) -> str:
    """A multi-line Hydra error as one line: its lines joined by "; ", the items listed under a line that ends
    with ":" (Hydra's "Available options in 'attention':") joined by ", "."""
    parts: list[str] = []
    listing = False
    for line in (raw.strip() for raw in text.splitlines()):
        if line.startswith("Config search path"):  # Hydra's search path: noise to a user
            break
        if not line:
            continue
        if not parts:
            parts.append(line)
        elif listing and not line.endswith(":"):
            parts.append((" " if parts[-1].endswith(":") else ", ") + line)
        else:
            parts.append("; " + line)
        listing = listing or line.endswith(":")
    return "".join(parts)


def compose_job(overrides: list[str], compose: Composer, groups: tuple[str, ...] = ()
                ) -> tuple[DictConfig | None, str | None]:
    """Like :func:`compose_checked`, and any other composition error (Hydra's: an unknown group option, an
    override that does not parse; or another) as ``(None, its message on one line)``."""
    cfg, message, err = _compose(overrides, compose, groups)
    if err is not None and message is None:
        override = getattr(err, "override", None)  # OverrideParseException names the override apart
        text = str(err) if isinstance(err, HydraException) else f"{type(err).__name__}: {err}"
        message = one_line(f"override {override!r}: {text}" if override else text)
    return cfg, message


def compose_checked(overrides: list[str], compose: Composer, groups: tuple[str, ...] = ()
                    ) -> tuple[DictConfig | None, str | None]:
    """Compose ``overrides`` once (a sweep on its first values): ``(config, None)``; ``(None, message)`` when Hydra
    names an unknown key (the message: the key, the closest valid keys, ``groups`` being the config group names,
    and how to add a new key); ``(None, None)`` on any other failure, which Hydra reports itself."""
    return _compose(overrides, compose, groups)[:2]


def _compose(overrides: list[str], compose: Composer, groups: tuple[str, ...]
             ) -> tuple[DictConfig | None, str | None, Exception | None]:
    """(config, unknown-key message, the composition error) of :func:`compose_checked`."""
    overrides = [o for o in overrides if "=" in o and not o.startswith("-")]  # not hydra's flags (-m, -cn x)
    single = one_value_each(overrides)
    try:
        return compose(single), None, None
    except Exception as err:  # noqa: BLE001 -- only Hydra's unknown-key refusal is ours to explain
        if not isinstance(err, ConfigCompositionException):
            return None, None, err
        match = UNKNOWN_KEY.search(str(err)) or UNKNOWN_KEY.search(str(err.__cause__ or ""))
        if match is None:
            return None, None, err
        key = match.group(1) or match.group(2)
    rest = [o for o in single if o.split("=", 1)[0].lstrip("+~") != key]
    try:
        cfg = compose(rest)
    except Exception:  # noqa: BLE001 -- another problem too: report the unknown key alone
        cfg = None
    hint = [o for o in overrides if o.split("=", 1)[0] == key]
    add = f"; to add it as a new key: +{hint[0]}" if hint else ""
    close = closest_keys(key, cfg, groups=groups) if cfg is not None else []
    if close:
        return None, f"unknown config key '{key}': did you mean {' or '.join(repr(c) for c in close)}?{add}", None
    return None, f"unknown config key '{key}' (no valid key is close to it){add}", None


def unknown_key_message(overrides: list[str], compose: Composer, groups: tuple[str, ...] = ()) -> str | None:
    """The unknown-key message of :func:`compose_checked`, or None."""
    return compose_checked(overrides, compose, groups)[1]
