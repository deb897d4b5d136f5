"""What a budget changes for a table: every resolved config key that differs from budget=paper, per cell group.

    python -m oscrepro.tables.explain fqo/table2 --budget cpu

A budget reaches a run through several files (``conf/budget/<budget>.yaml``, then the optional
``conf/budget_scale/{data,model,experiment}/<name>/<budget>.yaml`` that ``conf/train.yaml`` selects, and whatever
those include); this module composes the table's cells and says, key by key, what the budget changed and where.

Method (:func:`explain_budget`):

1. Each distinct cell (the overrides of a row x column, seed left at 0; columns without overrides share their
   row's cell) is composed twice by Hydra, as ``python -m oscrepro.train`` would: at budget=paper and at the
   budget asked for (after the spec's ``budget_map``). The resolved configs are compared key by key (a node that is
   a mapping on one side only is one key): that difference is the ground truth, and a key that a row override sets
   at both budgets does not show (a row that sets ``trainer.max_epochs`` itself shows no epoch change).
2. The source of each differing key is found by walking Hydra's defaults list of the budget's composition (one
   per distinct choice of budget and budget_scale files, not per cell): every entry that the budget brought in
   (``budget/*``, ``budget_scale/*`` and the configs they include, such as a data stand-in) is read as written,
   placed at its package, and the key is credited to the LAST of them that sets it or a node above or below it (a
   later entry overrides an earlier one, as in Hydra's merge). A key that no budget file sets changed through an
   interpolation; its unresolved value is shown instead.
3. Changes shared by every cell are printed once; the rest per group of cells with the same changes (keys, values
   and sources), each under the file that sets it.

Cost: two compositions per distinct cell (~0.1-0.3 s each) and one defaults list per distinct set of budget files;
cells whose overrides are the same at both budgets (budget=paper, a ``budget_map`` to paper) are not composed.

The seeds per cell (``seeds:``, a row's own ``seeds``, the claims planner's ``conf/decide/<budget>.yaml``), the
spec's ``budget_notes`` for the budget, and a ``match`` knob (set per budget by parameter matching, not by a
config file) are listed too. Analysis tables compare their ``analysis`` arguments with ``analysis.budgets``
applied, which is all the budget changes there (the runs they read are other tables': explain those).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import groupby
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf, open_dict

from oscrepro.runs.catalog import flatten
from oscrepro.runs.compose import CONF_DIR
from oscrepro.runs.record import MECHANISM_GROUP, with_mechanism
from oscrepro.tables.spec import BUDGETS, SpecError, TableSpec, load_spec

ABSENT = "(not set)"
BUDGET_CHOICES = ("budget", "budget_scale/data", "budget_scale/model", "budget_scale/experiment")


@dataclass(frozen=True)
class Change:
    """One resolved key that differs between budget=paper and the budget explained."""

    key: str
    paper: str  # the value as JSON text, or ABSENT
    budget: str
    source: str  # the conf file that sets it (repository-relative), or how it was derived
    rank: int = field(default=0, compare=False)  # merge order of the source (derived keys last), for printing


def _rel(path: Path, conf_dir: Path) -> str:
    """``conf/...`` (relative to the conf tree's parent) for a file of the conf tree, else the path as given."""
    return str(path.relative_to(conf_dir.parent)) if conf_dir.parent in path.parents else str(path)


def _text(value: Any) -> str:
    return ABSENT if value is ABSENT else json.dumps(value, default=str)


def _compose(overrides: list[str]) -> tuple[DictConfig, dict[str, str]]:
    """The run config of ``overrides`` (as :func:`oscrepro.runs.compose.compose_run` builds it) and Hydra's
    choices; call inside :func:`initialize_config_dir`, so that one Hydra initialisation serves every cell."""
    cfg = compose(config_name="train", overrides=overrides, return_hydra_config=True)
    choices = {k: str(v) for k, v in cfg.hydra.runtime.choices.items() if v is not None}
    with open_dict(cfg):
        del cfg["hydra"]
    return with_mechanism(cfg, choices.get(MECHANISM_GROUP)), choices


def _budget_setters(overrides: list[str], conf_dir: Path) -> list[tuple[str, set[str]]]:
    """[(file, keys it sets)] for every defaults-list entry the budget brought in, in merge order (method, step 2).

    An entry belongs to the budget when its config or one of the configs that include it is under ``budget/`` or
    ``budget_scale/``. Keys are dotted paths after the entry's package; a null or empty node counts as set."""
    loader = GlobalHydra.instance().config_loader()
    entries = loader.compute_defaults_list("train", overrides, RunMode.RUN).defaults
    parent = {e.config_path: e.parent for e in entries}
    out: list[tuple[str, set[str]]] = []
    for e in entries:
        chain, node = [e.config_path], e.parent
        while node in parent and node not in chain:
            chain.append(node)
            node = parent[node]
        chain.append(node)
        if not any(str(p).startswith(("budget/", "budget_scale/")) for p in chain if p):
            continue
        path = conf_dir / f"{e.config_path}.yaml"
        if not path.exists():
            continue
        raw = OmegaConf.to_container(OmegaConf.load(path), resolve=False) or {}
        raw = {k: v for k, v in raw.items() if k != "defaults"} if isinstance(raw, dict) else {}
        prefix = f"{e.package}." if e.package else ""
        keys = {f"{prefix}{k}" for k in flatten(raw)} if raw else set()
        # a nested include is named with the budget file that brings it in (chain[1] is its includer)
        via = next((p for p in chain[1:] if p and str(p).startswith("budget")), None)
        name = _rel(path, conf_dir)
        if via and via != e.config_path:
            name += f" (via {_rel(conf_dir / f'{via}.yaml', conf_dir)})"
        out.append((name, keys))
    return out


def _source(key: str, setters: list[tuple[str, set[str]]], raw: dict[str, Any]) -> tuple[str, int]:
    """(the last budget entry that sets ``key``, a node above it or one below it, its merge rank); else the
    interpolation that ``key`` reads, ranked after every file."""
    parts = key.split(".")
    prefixes = {".".join(parts[:i]) for i in range(1, len(parts) + 1)}
    for rank in range(len(setters) - 1, -1, -1):
        if setters[rank][1] & prefixes or any(k.startswith(f"{key}.") for k in setters[rank][1]):
            return setters[rank][0], rank
    value = raw.get(key, ABSENT)
    if isinstance(value, str) and "${" in value:
        return f"interpolation {value} (follows a key above)", len(setters)
    return "set by no budget file (derived at composition)", len(setters)


def _diff(a: Any, b: Any, prefix: str = "") -> Iterator[tuple[str, str, str]]:
    """(dotted key, paper value, budget value) as JSON text where two resolved configs differ; a node that is a
    mapping on one side only (``data.max_rows``: null at paper, a mapping at cpu) is one difference, not one per
    leaf."""
    if isinstance(a, dict) and isinstance(b, dict) and a and b:
        for k in sorted(set(a) | set(b), key=str):
            yield from _diff(a.get(k, ABSENT), b.get(k, ABSENT), f"{prefix}{k}.")
    elif _text(a) != _text(b):
        yield prefix.rstrip("."), _text(a), _text(b)


def _changes(paper: DictConfig, budget: DictConfig, setters: list[tuple[str, set[str]]]) -> tuple[Change, ...]:
    raw = flatten(OmegaConf.to_container(budget, resolve=False))
    diffs = _diff(OmegaConf.to_container(paper, resolve=True), OmegaConf.to_container(budget, resolve=True))
    return tuple(Change(key, pa, pb, *_source(key, setters, raw)) for key, pa, pb in diffs)


def cell_changes(
    spec: TableSpec, budget: str, conf_dir: Path = CONF_DIR
) -> dict[tuple[Change, ...], list[tuple[int, str]]]:
    """{changes: [(row index, column name), ...]} over the run-backed cells of a runs table (module docstring,
    steps 1-3). Cells whose overrides are the same at both budgets (budget=paper, or a ``budget_map`` to paper)
    change nothing: Hydra composes the same overrides to the same config, so they are not composed."""
    cells: dict[tuple[str, ...], list[tuple[int, str]]] = {}  # cell overrides at `budget` -> cells
    paper_of: dict[tuple[str, ...], tuple[str, ...]] = {}
    for ri in range(len(spec.rows)):
        for col in spec.columns:
            if col.delta is not None:
                continue
            ov = tuple(spec.cell_overrides(ri, col.name, budget, []))
            cells.setdefault(ov, []).append((ri, col.name))
            paper_of[ov] = tuple(spec.cell_overrides(ri, col.name, "paper", []))
    groups: dict[tuple[Change, ...], list[tuple[int, str]]] = {}
    setters_by_choice: dict[tuple[str, ...], list[tuple[str, set[str]]]] = {}
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(conf_dir), version_base="1.3"):
        for ov, members in cells.items():
            if ov == paper_of[ov]:
                changes: tuple[Change, ...] = ()
            else:
                paper_cfg, _ = _compose([*paper_of[ov], "seed=0"])
                budget_cfg, choices = _compose([*ov, "seed=0"])
                choice = tuple(choices.get(k, "") for k in BUDGET_CHOICES)
                if choice not in setters_by_choice:
                    setters_by_choice[choice] = _budget_setters([*ov, "seed=0"], conf_dir)
                changes = _changes(paper_cfg, budget_cfg, setters_by_choice[choice])
            groups.setdefault(changes, []).extend(members)
    GlobalHydra.instance().clear()
    return groups


def _by_source(changes: Iterable[Change], indent: str = "    ") -> list[str]:
    """The changes under the file that sets them, files in merge order: ``key  paper -> budget`` lines."""
    changes = sorted(changes, key=lambda c: (c.rank, c.source, c.key))
    width = max(len(c.key) for c in changes)
    out: list[str] = []
    for source, same in groupby(changes, key=lambda c: c.source):
        out.append(f"{indent}{source}")
        out += [f"{indent}  {c.key:<{width}}  {c.paper} -> {c.budget}" for c in same]
    return out


def _cells_text(spec: TableSpec, members: list[tuple[int, str]]) -> str:
    """``row`` (all of its run columns) or ``row [col, ...]`` per row, in spec order."""
    run_cols = [c.name for c in spec.columns if c.delta is None]
    parts = []
    for ri, row in enumerate(spec.rows):
        cols = [name for i, name in members if i == ri]
        if cols:
            parts.append(repr(row.label) if len(cols) == len(run_cols) else f"{row.label!r} [{', '.join(cols)}]")
    return "; ".join(parts)


def _seed_lines(spec: TableSpec, budget: str) -> list[str]:
    """Seeds per cell at ``budget`` and at paper, and the rows whose own count differs (a row's ``seeds``, the
    claims planner's ``conf/decide/<budget>.yaml``)."""

    def n(b: str, ri: int | None = None) -> int:
        return len(spec.seeds_for(b, ri))

    rows = [
        f"    {r.label!r}: {n(budget, i)} (paper {n('paper', i)})"
        for i, r in enumerate(spec.rows)
        if (n(budget, i), n("paper", i)) != (n(budget), n("paper"))
    ]
    own = spec.own_counts(budget)
    rows += [f"    {key!r}: {count}" for key, count in own.items() if key not in {r.label for r in spec.rows}]
    head = f"  seeds per cell: {n(budget)} (paper {n('paper')})"
    return [head + ("; rows or cells with their own count (row seeds:, conf/decide/):" if rows else ""), *rows]


def _analysis_lines(spec: TableSpec, budget: str) -> list[str]:
    def kwargs(b: str) -> dict[str, Any]:
        out = {k: v for k, v in spec.analysis.items() if k not in ("_target_", "budgets")}
        out.update((spec.analysis.get("budgets") or {}).get(b, {}))
        return out

    where = f"{_rel(spec.path, spec.path.parents[2])} analysis.budgets.{budget}"
    lines = [Change(f"analysis.{k}", pa, pb, where) for k, pa, pb in _diff(kwargs("paper"), kwargs(budget))]
    if not lines:
        return [f"  analysis arguments: the same at {budget} and paper"]
    return [f"  analysis arguments that differ (key  paper -> {budget}):", *_by_source(lines)]


def explain_budget(spec_name: str, budget: str, conf_dir: Path = CONF_DIR) -> str:
    """What ``budget`` changes for table ``spec_name`` against budget=paper, as text (module docstring: method).

    Raises :class:`oscrepro.tables.spec.SpecError` for an unknown table or budget."""
    if budget not in BUDGETS:
        raise SpecError(f"unknown budget {budget!r}; budgets are {', '.join(BUDGETS)}")
    spec = load_spec(spec_name, conf_dir)
    out = [f"{spec.key} at budget={budget}, against budget=paper: {spec.title}"]
    note = spec.budget_notes.get(budget)
    out.append(f"  note (budget_notes.{budget}): {note}" if note else f"  note: the spec has no budget_notes.{budget}")
    if spec.kind == "analysis":
        return "\n".join([*out, *_analysis_lines(spec, budget)])
    if budget == "paper":
        return "\n".join([*out, "  budget=paper is the reference: nothing changes"])
    mapped = spec.budget_map.get(budget, budget)
    if mapped != budget:
        out.append(f"  budget_map: the runs of budget={budget} are built at budget={mapped}")
    out += _seed_lines(spec, budget)
    if spec.match:
        out.append(
            f"  match: {spec.match['knob']} of each row is set per budget by parameter matching to the "
            f"{spec.match['reference']!r} row (oscrepro.tables.match), not by a config file: not shown"
        )
    groups = cell_changes(spec, budget, conf_dir)
    n_cells = sum(len(m) for m in groups.values())
    if not any(groups):
        return "\n".join(
            [*out, f"  every cell ({n_cells}): nothing changes (the resolved config is the paper budget's)"]
        )
    common = set.intersection(*(set(ch) for ch in groups))  # changes of every cell, printed once
    out.append(
        f"  every cell ({n_cells}): "
        + (
            f"{len(common)} key(s) differ (key  paper -> {budget}), by the file that sets them:"
            if common
            else "no key differs in all cells"
        )
    )
    out += _by_source(common) if common else []
    for changes, members in sorted(groups.items(), key=lambda g: (-len(g[1]), g[1])):
        rest = [c for c in changes if c not in common]
        if rest:
            out.append(f"  {len(members)} of {n_cells} cells ({_cells_text(spec, members)}) also:")
            out += _by_source(rest)
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    """``python -m oscrepro.tables.explain <table> --budget <budget>``: print :func:`explain_budget`."""
    parser = argparse.ArgumentParser(description="What a budget changes for a table, key by key, against paper.")
    parser.add_argument("table", help="table spec, e.g. fqo/table2")
    parser.add_argument("--budget", default="cpu", choices=BUDGETS)
    args = parser.parse_args(argv)
    try:
        print(explain_budget(args.table, args.budget))
    except SpecError as err:
        parser.exit(2, f"error: {err}\n")


if __name__ == "__main__":
    main()
