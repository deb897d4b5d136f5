"""Declarative table specs (``conf/table/<paper>/<name>.yaml``): load and validate.

A *runs* table is a grid: each cell = experiment + row overrides + column overrides, repeated over the
budget's seeds; the cell value is the column's metric aggregated over the seeds. Column kinds:

- ``metric: <key>`` (``{var}`` placeholders filled from the row's ``vars``, also in column overrides),
  optional ``scale`` (times the row's ``scale``);
- ``delta: [colA, colB]``: difference of two metric columns' means (e.g. Table 7's Δ, Table 3's gap);
- ``count_below: {metric, threshold}``: seeds whose metric is below a threshold (Table 2's failures).

The experiment of a cell is the column's, else the row's, else the spec's ``experiment``. An optional ``post``
callable (``_target_``) receives the aggregated cells and may add figures and header notes (Figure 6's fit).

Paper reference values are data: ``rows[i].paper[<column name>]`` = ``[mean, std]`` or a number. They are
rendered beside our numbers and never written into a reproduced column.

Optional ``budget_map`` (``{cpu: paper}``) builds the table's runs at another budget than the one asked for (the
leaderboard's SVA task runs at the paper budget when the board is built at ``cpu``: it fits this CPU). Optional
``match`` (``{knob: model.d_ff, reference: <row label>, tolerance: 0.01}``) sets each row's knob so that its
model's parameter count is within the tolerance of the reference row's (``oscrepro.tables.match``).

An *analysis* table (``kind: analysis``) names a callable (``_target_``) that computes its rows directly
(e.g. Figure 2's Monte Carlo vs closed form) as numbers; optional ``formats`` (``{column: digits | format spec |
template}``) says how the renderer shows a column's plain numbers (:mod:`oscrepro.tables.render`). The runs it
reads are declared by the callable and trained and resolved by the engine (:mod:`oscrepro.tables.sources`).

What a spec owns, a build's extra overrides may not set (:func:`check_extra_overrides`, before anything is
written): ``seed`` (each cell runs the budget's seeds 0..n-1; an extra ``seed=-3`` used to be silently replaced by
them while the header said "Overrides of every run: ``seed=-3``"), ``experiment``, ``budget`` (use ``--budget``) and
``table_name``, which the engine sets for every cell, and any key a row, a column or ``match`` sets (an extra
``attention=softmax`` on fqo Table 2 would train softmax under the label "Oscillator"). Keys are compared exactly,
as Hydra parses them (``+lr_schedule=cosine`` sets ``lr_schedule``): an extra ``data.batch_size=8`` on a table
whose rows choose ``data=...`` sets a value inside each row's choice and is allowed.
"""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import OverrideParseException
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from oscrepro.runs.compose import CONF_DIR

BUDGETS = ("smoke", "cpu", "paper")


ENGINE_KEYS = ("seed", "experiment", "budget", "table_name")  # set by the engine for every cell of every table


class SpecError(ValueError):
    """A table spec that cannot be built; the message names the file and the problem."""


class OwnedOverrideError(SpecError):
    """An extra override of a key that the table spec (or the engine) sets for its cells; raised before anything
    is written (module docstring)."""


@dataclass
class Column:
    name: str
    label: str
    metric: str | None = None
    scale: float = 1.0
    overrides: list[str] = field(default_factory=list)
    delta: list[str] | None = None
    count_below: dict[str, Any] | None = None
    digits: int = 2
    experiment: str | None = None  # overrides the row's / spec's experiment for this column


@dataclass
class Row:
    label: str
    overrides: list[str] = field(default_factory=list)
    vars: dict[str, Any] = field(default_factory=dict)
    paper: dict[str, Any] = field(default_factory=dict)
    experiment: str | None = None  # overrides the spec's experiment for this row
    scale: float = 1.0  # multiplies every metric of the row (e.g. accuracy -> % in a mixed-metric table)
    seeds: dict[str, int] = field(default_factory=dict)  # fewer seeds for this row at a budget (a costly row)

    @property
    def attention(self) -> str | None:
        """The row's mechanism: the config its ``attention=<name>`` override chooses (None when it sets none)."""
        return next((o.split("=", 1)[1] for o in self.overrides if o.startswith("attention=")), None)


@dataclass
class TableSpec:
    key: str  # e.g. "fqo/table2"
    paper: str
    title: str
    kind: str  # runs | analysis
    experiment: str | None
    seeds: dict[str, int]
    rows: list[Row]
    columns: list[Column]
    budget_notes: dict[str, str]
    analysis: dict[str, Any]
    post: dict[str, Any]  # optional post-processing callable over the aggregated cells (e.g. a fit + figure)
    source: str  # paper table/appendix reproduced
    path: Path
    budget_map: dict[str, str] = field(default_factory=dict)  # asked budget -> the budget its runs use
    match: dict[str, Any] = field(default_factory=dict)  # matched parameter counts across rows (see above)
    formats: dict[str, Any] = field(default_factory=dict)  # analysis column -> digits | format (tables.render)

    def seeds_for(self, budget: str, row_idx: int | None = None, column: str | None = None) -> list[int]:
        """Seeds 0..n-1 of the budget; a row's own ``seeds`` (``{cpu: 1}``) can only lower n (a costly row whose
        extra seeds do not fit: its cells show their n). The claims planner (``oscrepro.claims.decide``) raises n
        for a whole row (key ``<row label>`` in ``conf/decide/<budget>.yaml``) or for one cell of it (key
        :func:`cell_key`, read when ``column`` is given): a claim on one column pays for that column's runs only."""
        n = int(self.seeds[budget])
        if row_idx is not None and budget in self.rows[row_idx].seeds:
            n = min(n, int(self.rows[row_idx].seeds[budget]))
        if row_idx is not None:  # seeds added by the claims planner (oscrepro.claims.decide) to decide a claim
            raised = decided_seeds(self.path.parents[2], budget).get(self.key, {})
            label = self.rows[row_idx].label
            n = max(n, int(raised.get(label, 0)),
                    int(raised.get(cell_key(label, column), 0)) if column is not None else 0)
        return list(range(n))

    def own_counts(self, budget: str) -> dict[str, int]:
        """Rows, and cells of a row (:func:`cell_key`), whose seed count at ``budget`` differs from the table's: a
        row's own ``seeds``, or the claims planner's raise (what a table header and ``--explain`` name)."""
        n, out = len(self.seeds_for(budget)), {}
        for i, row in enumerate(self.rows):
            own = len(self.seeds_for(budget, i))
            if own != n:
                out[row.label] = own
            for col in self.columns:
                cell = len(self.seeds_for(budget, i, col.name))
                if col.delta is None and cell != own:
                    out[cell_key(row.label, col.name)] = cell
        return out

    def analysis_cell_seeds(self, budget: str) -> dict[str, int]:
        """Per-cell seed counts of an analysis table's own runs that the claims planner raised (``conf/decide``
        keys ``(analysis seeds) | <row> | <column>``), as ``{cell_key(row, column): n}``: what the adapter argument
        ``analysis.cell_seeds_arg`` names receives (coupledqk Table 7: the QNLI cells only, not every task)."""
        prefix = ANALYSIS_SEEDS + CELL_SEP
        raised = decided_seeds(self.path.parents[2], budget).get(self.key, {})
        return {k[len(prefix):]: int(v) for k, v in raised.items() if k.startswith(prefix)}

    def analysis_seeds(self, budget: str, decided: bool = True) -> int:
        """The seed count of an analysis table's own runs (the adapter argument that ``analysis.seeds_arg`` names,
        e.g. osciformer Figure 5's forecast seeds, coupledqk Table 7's fine-tuning seeds) at ``budget``: the spec's
        value (``analysis.budgets`` over ``analysis``), raised to what the claims planner decided for the table
        (``conf/decide/<budget>.yaml``, key :data:`ANALYSIS_SEEDS`) unless ``decided`` is False (the spec's own
        count). Extra seeds are the adapter's ordinary seeds n..N-1. SpecError when the table names no such
        argument."""
        return self._own_count(budget, SEEDS_ARG, ANALYSIS_SEEDS if decided else None, "seed runs")

    def analysis_trials(self, budget: str, decided: bool = True) -> int:
        """The count of an analysis table's repeated measurements (the adapter argument that ``analysis.trials_arg``
        names: osciformer Figure 2's timing repeats, coupledqk Table 10's timed trials) at ``budget``, raised to what
        the claims planner decided (key :data:`ANALYSIS_TRIALS`) unless ``decided`` is False (the spec's own count,
        from which the planner's trial cap is set). A build with more trials measures them all afresh. SpecError
        when the table names no such argument."""
        return self._own_count(budget, TRIALS_ARG, ANALYSIS_TRIALS if decided else None, "timed trials")

    def _own_count(self, budget: str, arg: str, pseudo: str | None, what: str) -> int:
        name = self.analysis.get(arg)
        if self.kind != "analysis" or not name:
            raise SpecError(f"table {self.key}: no analysis.{arg} (the adapter argument that counts its own {what})")
        value = {**self.analysis, **(self.analysis.get("budgets") or {}).get(budget, {})}.get(name)
        if not isinstance(value, int):
            raise SpecError(f"table {self.key}: analysis.{arg} names {name!r}, which is {value!r} at "
                            f"budget={budget}, not a count")
        raised = decided_seeds(self.path.parents[2], budget).get(self.key, {}).get(pseudo, 0) if pseudo else 0
        return max(value, int(raised))

    def below_paper(self, budget: str) -> bool:
        """Whether a build at ``budget`` is below the paper's: any budget but ``paper``, except for an analysis
        table that runs the paper's protocol unchanged there: no setting for the budget under ``analysis.budgets``
        and no budget note saying how it departs (a note that starts "same as paper" says it does not). An analysis
        of scaled-down runs says so in one of the two: osciformer Tables 10-11 list the budget under
        ``analysis.budgets``; fqo Table 6 reads Table 4's cpu models with the paper's protocol, and its budget note
        says the models are less trained. The table header and the figure captions
        (``analysis.figures.header_caption``) both say what this says."""
        if budget == "paper" or self.kind != "analysis" or budget in self.analysis.get("budgets", {}):
            return budget != "paper"
        note = str(self.budget_notes.get(budget) or "").strip()
        return bool(note) and not note.lower().startswith("same as paper")

    def cell_overrides(self, row_idx: int, col_name: str, budget: str, extra: list[str]) -> list[str]:
        """Hydra overrides (without seed) of one (row, column) cell: experiment, budget, row, column, extra."""
        col = next(c for c in self.columns if c.name == col_name)
        row = self.rows[row_idx]
        experiment = col.experiment or row.experiment or self.experiment
        return [f"experiment={experiment}", f"budget={self.budget_map.get(budget, budget)}", f"table_name={self.key}",
                *row.overrides, *(o.format(**row.vars) for o in col.overrides), *extra]

    def owned_keys(self) -> dict[str, str]:
        """Config keys the spec sets for its cells (module docstring), each with who sets it, for messages."""
        owned = {"seed": f"the spec (each cell runs seeds 0..n-1, n per budget: "
                         f"{', '.join(f'{b} {n}' for b, n in self.seeds.items())}; pick n with --budget, or train "
                         "one seed with python -m oscrepro.train)",
                 "experiment": "the spec (the experiment of each cell)",
                 "budget": "--budget (the engine sets it for every run)",
                 "table_name": "the engine (every run of this table)"}
        setters: dict[str, list[str]] = {}
        for row in self.rows:
            for text in row.overrides:
                setters.setdefault(override_key(text), []).append(f"row {row.label!r}")
            for col in self.columns:
                for text in col.overrides:
                    try:
                        text = text.format(**row.vars)
                    except (KeyError, IndexError, ValueError):
                        pass  # a placeholder the row does not fill: the key is still what it sets
                    who = f"column {col.name!r}"
                    if who not in setters.setdefault(override_key(text), []):
                        setters[override_key(text)].append(who)
        if self.match.get("knob"):
            setters.setdefault(str(self.match["knob"]), []).append("match (parameter-matched per row)")
        for key, who in setters.items():
            owned.setdefault(key, f"the spec per cell ({', '.join(who[:3])}{', ...' if len(who) > 3 else ''}); one "
                                  "value for every run would make the cells what their labels do not say")
        return owned


def override_key(text: str) -> str:
    """The key (or config group) an override sets, as Hydra parses it: ``+lr_schedule=cosine`` -> ``lr_schedule``,
    ``model/ffn=glu`` -> ``model/ffn``; text Hydra cannot parse gives the part before ``=`` (composition then
    reports the syntax error)."""
    try:
        (parsed,) = OverridesParser.create().parse_overrides([text])
        return str(parsed.key_or_group)
    except (OverrideParseException, ValueError):
        return text.split("=", 1)[0].lstrip("+~")


def check_extra_overrides(spec: TableSpec, extra: list[str]) -> None:
    """Refuse extra overrides of keys the spec owns (:meth:`TableSpec.owned_keys`; module docstring) with one
    :class:`OwnedOverrideError` naming each override and who sets its key. Analysis tables own the engine's keys
    only (their source tables' cells are planned with the seeds and rows of those tables)."""
    owned = spec.owned_keys() if spec.kind == "runs" else {k: v for k, v in spec.owned_keys().items()
                                                             if k in ENGINE_KEYS}
    clashes = [f"{text!r} sets {override_key(text)!r}, which is set by {owned[override_key(text)]}"
               for text in extra if override_key(text) in owned]
    if clashes:
        raise OwnedOverrideError(f"table {spec.key}: {'; '.join(clashes)}; nothing was run or written "
                                 f"(overrides of what a table spec sets are refused, not silently replaced)")


def available_tables(conf_dir: Path = CONF_DIR) -> list[str]:
    return sorted(str(p.relative_to(conf_dir / "table").with_suffix("")) for p in (conf_dir / "table").rglob("*.yaml"))


#: Analysis-table key under which ``analysis.seeds_arg`` names the adapter argument counting the table's own seeds.
SEEDS_ARG = "seeds_arg"
#: The pseudo row label under which ``conf/decide/<budget>.yaml`` keeps an analysis table's decided seed count: its
#: own seed runs are the adapter's, shared by every row.
ANALYSIS_SEEDS = "(analysis seeds)"
#: Analysis-table key under which ``analysis.cell_seeds_arg`` names the adapter argument that takes per-cell seed
#: counts raised by the claims planner (``{cell_key(row, column): n}``, :meth:`TableSpec.analysis_cell_seeds`): a
#: claim on one of its columns then pays for that column's runs only, not a seed of every cell.
CELL_SEEDS_ARG = "cell_seeds_arg"
#: Separator of a row label and a column name in a per-cell key of ``conf/decide/<budget>.yaml``.
CELL_SEP = " | "


def cell_key(row: str, column: str) -> str:
    """The ``conf/decide/<budget>.yaml`` key of one cell (row label, column name) whose seeds the planner raised."""
    return f"{row}{CELL_SEP}{column}"


#: Analysis-table key under which ``analysis.trials_arg`` names the adapter argument counting repeated measurements
#: (timed trials): more of them narrow a timing claim's interval as more seeds narrow a trained one.
TRIALS_ARG = "trials_arg"
#: The pseudo row label of an analysis table's decided trial count in ``conf/decide/<budget>.yaml``.
ANALYSIS_TRIALS = "(analysis trials)"
#: Analysis-table key: measured core-seconds of one trial at the budget (``{budget: s}``), the planner's price of a
#: trial (a timing build leaves no run record to price it from); the spec's comment says where it was measured.
TRIAL_CORE_S = "trial_core_s"


def decided_seeds(conf_dir: Path, budget: str) -> dict[str, dict[str, int]]:
    """``{table key: {row label: n}}`` from ``conf/decide/<budget>.yaml``: per-row seed counts that the claims
    planner (``python -m oscrepro.claims.decide``) raised to decide a claim; empty when there are none. Extra seeds
    are ordinary runs of the cell (seeds n..N-1, their run ids as any seed), so every build of the table shows them."""
    path = decided_seeds_path(conf_dir, budget)
    if not path.exists():
        return {}
    st = path.stat()  # read once per version of the file: a plan asks for every cell of every table
    return copy.deepcopy(_read_decided(path, st.st_ino, st.st_mtime_ns, st.st_size))


@functools.lru_cache(maxsize=8)
def _read_decided(path: Path, _ino: int, _mtime_ns: int, _size: int) -> dict[str, dict[str, int]]:
    return yaml.safe_load(path.read_text()) or {}


def decided_seeds_path(conf_dir: Path, budget: str) -> Path:
    """Where the claims planner keeps the per-row seed counts it raised at ``budget``."""
    return conf_dir / "decide" / f"{budget}.yaml"


def load_spec(key: str, conf_dir: Path = CONF_DIR) -> TableSpec:
    """Load ``conf/table/<key>.yaml`` and check it is buildable; unknown keys list the valid ones."""
    path = conf_dir / "table" / f"{key}.yaml"
    if not path.exists():
        raise SpecError(f"no table spec '{key}' ({path}); available: {', '.join(available_tables(conf_dir))}")
    try:
        raw = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
        if not isinstance(raw, dict):
            raise TypeError(f"the file holds a {type(raw).__name__}, not a mapping")
        kind = raw.get("kind", "runs")
        cols = [Column(**c) for c in raw.get("columns", [])]
        spec = TableSpec(
            key=key, paper=raw["paper"], title=raw["title"], kind=kind, experiment=raw.get("experiment"),
            seeds={b: int(n) for b, n in (raw.get("seeds") or {b: 1 for b in BUDGETS}).items()},
            rows=[Row(**r) for r in raw.get("rows", [])], columns=cols,
            budget_notes=raw.get("budget_notes", {}), analysis=raw.get("analysis", {}), post=raw.get("post", {}),
            source=raw.get("source", ""), path=path, budget_map=dict(raw.get("budget_map") or {}),
            match=dict(raw.get("match") or {}), formats=dict(raw.get("formats") or {}),
        )
    except KeyError as err:
        raise SpecError(f"table spec {path}: required key {err} missing") from None
    except (TypeError, ValueError, AttributeError, yaml.YAMLError, OmegaConfBaseException) as err:
        # an unknown or misplaced field (``Column(**c)``), a non-number seed count, YAML that does not parse
        raise SpecError(f"table spec {path}: {' '.join(str(err).split())}") from None
    _validate(spec)
    return spec


def _validate(spec: TableSpec) -> None:
    where = f"table spec {spec.path}"
    if spec.kind not in ("runs", "analysis"):
        raise SpecError(f"{where}: kind={spec.kind!r}; valid: runs, analysis")
    if spec.kind == "analysis":
        if "_target_" not in spec.analysis:
            raise SpecError(f"{where}: analysis tables need analysis._target_")
        return
    if not spec.rows or not spec.columns:
        raise SpecError(f"{where}: runs tables need rows and columns")
    for r in spec.rows:
        for c in spec.columns:
            if c.delta is None and not (c.experiment or r.experiment or spec.experiment):
                raise SpecError(f"{where}: no experiment for cell ({r.label!r}, {c.name!r})")
    bad = {k: v for k, v in spec.budget_map.items() if k not in BUDGETS or v not in BUDGETS}
    if bad:
        raise SpecError(f"{where}: budget_map {bad}: budgets are {', '.join(BUDGETS)}")
    if spec.match:
        unknown_keys = set(spec.match) - {"knob", "reference", "tolerance"}
        labels = [r.label for r in spec.rows]
        if unknown_keys or "knob" not in spec.match or spec.match.get("reference") not in labels:
            raise SpecError(f"{where}: match needs knob (e.g. model.d_ff) and reference (a row label: "
                            f"{', '.join(labels)}); got {spec.match}")
    missing = [b for b in BUDGETS if b not in spec.seeds]
    if missing:
        raise SpecError(f"{where}: seeds missing for budgets {missing}")
    names = {c.name for c in spec.columns}
    for c in spec.columns:
        kinds = sum(x is not None for x in (c.metric, c.delta, c.count_below))
        if kinds != 1:
            raise SpecError(f"{where}: column {c.name!r} needs exactly one of metric, delta, count_below")
        if c.delta and not set(c.delta) <= names:
            raise SpecError(f"{where}: column {c.name!r} deltas unknown columns {set(c.delta) - names}")
    for r in spec.rows:
        unknown = set(r.paper) - names
        if unknown:
            raise SpecError(f"{where}: row {r.label!r} has paper values for unknown columns {sorted(unknown)}")

