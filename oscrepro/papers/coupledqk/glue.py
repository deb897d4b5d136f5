"""coupledqk Table 7 (Sec. 3.4): GLUE validation accuracy of Table 1's pretrained LMs after fine-tuning.

For each row (a Table 1 variant: Standard, GQA, Diff Attention, Hamiltonian = the paper's "Coupled QK") the finished
LM run of seed ``lm_seed`` is fine-tuned on each task over ``n_seeds`` fine-tuning seeds. One fine-tuning run =
``conf/experiment/coupledqk/glue.yaml`` + the row's mechanism overrides (``attention=...``, ``model.attention.*``:
the classifier refuses a mechanism other than the pretrained run's, and the run is labelled with what it
fine-tunes) + the task's overrides + ``model.pretrained_run=<LM run dir>`` + ``seed``. Both are declared
(:func:`table7_runs`: the LM cells, then the fine-tuning runs composed from them) and trained by the engine in its
pool (:mod:`oscrepro.tables.sources`); missing LM runs raise :class:`~oscrepro.tables.runs.MissingRunsError` naming
the command that trains Table 1 where the spec's ``train_missing`` is false.

Choices where the paper is silent:
* One pretrained checkpoint per variant: Table 1's seed 0 (``lm_seed``), its final checkpoint (``last.ckpt``). The
  paper fine-tunes "each pretrained checkpoint ... across 3 seeds" without saying which of its 3 LM seeds; the
  spread in a cell is then the fine-tuning seeds' only.
* The reported value is ``val/acc`` at the end of fine-tuning (last epoch), not the best epoch: the validation set
  is the reported set, so choosing an epoch on it would flatter every row.
* A task whose data is not on disk (MNLI here) is not an error for the table: its cells read "not run: <reason>".
  Whether it is there is decided by setting up its data module once (the same code path as a run).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import OmegaConf

from oscrepro.data.integrity import instantiate_data
from oscrepro.data.paths import DatasetNotFoundError
from oscrepro.runs.compose import path_override
from oscrepro.runs.lookup import RunRequest, find_record
from oscrepro.runs.record import RunRecord
from oscrepro.tables.recover import recovered_note
from oscrepro.tables.sources import OwnRuns, RunNeeds, SourceCell, SourceRuns, reads_runs
from oscrepro.tables.spec import SpecError, cell_key, load_spec
from oscrepro.tables.values import MISSING, Num, SeedStat

MECHANISM_KEYS = ("attention", "model.attention.")  # override keys that pick or configure the mechanism


def mechanism_overrides(overrides: list[str]) -> list[str]:
    """The overrides of a Table 1 row that choose its mechanism (``attention=gqa``, ``model.attention.x=y``)."""
    keep = []
    for o in overrides:
        key = o.lstrip("+~").split("=", 1)[0]
        if key == MECHANISM_KEYS[0] or key.startswith(MECHANISM_KEYS[1]):
            keep.append(o)
    return keep


@dataclass
class FineTunePlan:
    """Everything Table 7 reads: LM run per row, fine-tuning requests per (row, task), tasks not run and why."""

    lm_runs: dict[str, Path | None]
    requests: dict[tuple[str, str], list[RunRequest]] = field(default_factory=dict)
    not_run: dict[tuple[str, str], str] = field(default_factory=dict)  # (row, task) -> reason, for the cell
    skipped: dict[str, str] = field(default_factory=dict)  # task -> why its data module cannot be set up
    data: dict[str, str] = field(default_factory=dict)  # task -> data source text
    notes: list[str] = field(default_factory=list)


def _probe_data(cfg: Any) -> tuple[str | None, str]:
    """(None, data source text), or (why the task cannot run, None) when its data is not on disk: the run's data
    module set up once."""
    try:
        dm = instantiate_data(cfg.data)[0]
        dm.setup("fit")
    except DatasetNotFoundError as err:
        return " ".join(line.strip() for line in str(err).splitlines()), None
    return None, dm.source


def table7_runs(budget: str, results_dir: Path, name: str, source: str, experiment: str, rows: list[str],
                tasks: list[dict[str, Any]], lm_seed: int = 0, n_seeds: int = 3,
                cell_seeds: dict[str, int] | None = None, **_: Any) -> RunNeeds:
    """Table 7's runs: the LM run (seed ``lm_seed``) of each row of ``source``, then every fine-tuning run composed
    from them (:func:`plan_finetuning`; missing or failed ones are flagged in their cells)."""

    def finetuning(lms: SourceRuns) -> OwnRuns:
        plan = plan_finetuning(name, source, budget, Path(results_dir), experiment, rows, tasks, lms, lm_seed,
                               n_seeds, cell_seeds)
        return OwnRuns({f"{row}|{t}": reqs for (row, t), reqs in plan.requests.items()}, what="fine-tuning runs",
                       optional=True, context=plan, weights=_weights_to_load(plan))

    # the LMs' weights are loaded only by fine-tuning runs still to train (OwnRuns.weights): a build whose
    # fine-tuning records are all in git retrains no LM, and one that adds seeds to some rows (the claims planner's
    # per-cell raise) recovers those rows' LMs only
    return RunNeeds(name, {r: SourceCell(source, r, None, seeds=(lm_seed,), checkpoints=False) for r in rows},
                    then=finetuning)


def _weights_to_load(plan: FineTunePlan) -> tuple[Path, ...]:
    """The LM runs whose weights a fine-tuning run still to train loads: rows with a request that has no record
    (recovering another row's LM retrains it for nothing: Table 7's QNLI looks retrained GQA's, 2026-11-27)."""
    missing = {row for (row, _t), reqs in plan.requests.items() if any(find_record(r) is None for r in reqs)}
    return tuple(lm for row, lm in plan.lm_runs.items() if lm is not None and row in missing)


def plan_finetuning(name: str, source: str, budget: str, results_dir: Path, experiment: str, rows: list[str],
                    tasks: list[dict[str, Any]], lms: SourceRuns, lm_seed: int = 0, n_seeds: int = 3,
                    cell_seeds: dict[str, int] | None = None) -> FineTunePlan:
    """Compose every fine-tuning run of Table 7 (rows x tasks x seeds) from the LM runs ``lms`` of table
    ``source``. ``cell_seeds``: the claims planner's per-cell raises (``{"<row> | <task> (ours)": n}``,
    :meth:`~oscrepro.tables.spec.TableSpec.analysis_cell_seeds`): that cell trains seeds 0..n-1, the others
    ``n_seeds``."""
    found, notes = lms.runs, list(lms.notes)
    spec = load_spec(source)
    row_overrides = {r.label: r.overrides for r in spec.rows}
    plan = FineTunePlan({r: (found[r][0] if found[r] else None) for r in rows}, notes=notes)
    for task in tasks:
        t = task["name"]
        for row in rows:
            lm = plan.lm_runs[row]
            if lm is None:
                plan.not_run[(row, t)] = f"LM seed {lm_seed} of {row} did not finish ok"
                continue
            base = [f"experiment={experiment}", f"budget={budget}", f"table_name={name}",
                    *mechanism_overrides(row_overrides[row]), *task.get("overrides", []),
                    f"model.pretrained_run={lm}", path_override("paths.results_dir", results_dir),
                    "trainer.enable_progress_bar=false"]
            n = max(n_seeds, int((cell_seeds or {}).get(cell_key(row, f"{t} (ours)"), 0)))
            reqs = [RunRequest.compose([*base, f"seed={s}"]) for s in range(n)]
            _check_mechanism(reqs[0].cfg, lm, row)
            if t not in plan.data and t not in plan.skipped:  # one probe per task: the rows share its data
                reason, src = _probe_data(reqs[0].cfg)
                if reason is not None:
                    plan.skipped[t] = reason
                elif reqs[0].cfg.data.get("split_protocol") == "dev_holdout":  # trained and scored on GLUE dev
                    plan.data[t] = f"(dev hold-out: NOT comparable to the paper's dev accuracy) {src}"
                else:
                    plan.data[t] = src
            if t in plan.skipped:
                plan.not_run[(row, t)] = f"no {t} data here ({plan.skipped[t].split('.')[0]}; see notes)"
            else:
                plan.requests[(row, t)] = reqs
    return plan


def _check_mechanism(cfg: Any, lm_run: Path, row: str) -> None:
    """Fail before training if the composed run's mechanism is not the pretrained run's (the classifier would)."""
    want = OmegaConf.select(OmegaConf.load(Path(lm_run) / "config.yaml"), "model.attention._target_")
    got = OmegaConf.select(cfg, "model.attention._target_")
    if want is not None and got != want:
        raise SpecError(f"Table 7 row {row!r}: the fine-tuning config's attention is {got}, but its LM run {lm_run} "
                        f"was trained with {want}; give the row an attention= override")


def _cell(reqs: list[RunRequest], metric: str) -> tuple[list[float], dict[str, int]]:
    """Metric of every finished-ok seed, and counts of the other outcomes."""
    values, flags = [], {"diverged": 0, "failed": 0, "missing": 0}
    for r in reqs:
        rec = find_record(r)
        status = RunRecord(rec).status()["status"] if rec else r.record.status().get("status", "missing")
        if status == "ok":
            values.append(float(RunRecord(rec).metrics()[metric]))
        else:  # a run still 'running' after the pool returned died without a record: failed
            flags[status if status in flags else "failed"] += 1
    return values, flags


def _stat(values: list[float], flags: dict[str, int], scale: float = 100.0) -> SeedStat:
    """The cell over fine-tuning seeds: '72.7 ± 0.8 (n=3)' (+ ' [diverged 1]') in the .md, numbers in the csv."""
    v = scale * np.asarray(values, dtype=float)
    return SeedStat.of(v, 1, show_n=True, flags=[f"{k} {n}" for k, n in flags.items() if n])


@reads_runs(table7_runs)
def coupledqk_table7(out_dir: Path, budget: str, results_dir: Path, runs: SourceRuns, name: str, source: str,
                     experiment: str, rows: list[str], tasks: list[dict[str, Any]], paper: dict[str, dict[str, Any]],
                     lm_seed: int = 0, n_seeds: int = 3, metric: str = "val/acc",
                     cell_seeds: dict[str, int] | None = None
                     ) -> tuple[list[str], list[dict[str, Any]], list[str]]:
    """coupledqk Table 7: val accuracy (%) mean ± std over fine-tuning seeds per (variant, task), the paper's beside
    (the runs: :func:`table7_runs`, trained by the engine)."""
    plan: FineTunePlan = runs.context
    raised = {k: v for k, v in sorted((cell_seeds or {}).items()) if v > n_seeds}

    names = [t["name"] for t in tasks]
    columns = ["Attention", "LM run"] + [f"{t} {s}" for t in names for s in ("(ours)", "(paper)", "Δ")]
    out = []
    for row in rows:
        lm = plan.lm_runs[row]
        line: dict[str, Any] = {"Attention": row, "LM run": MISSING if lm is None else f"seed {lm_seed} ({lm.name})"}
        ref = paper.get(row, {})
        for t in names:
            p = ref.get(t)
            line[f"{t} (paper)"] = MISSING if p is None else Num(p[0], "{:.1f} ± {:.1f}", (p[1],))
            if (row, t) in plan.not_run:
                line[f"{t} (ours)"], line[f"{t} Δ"] = f"not run: {plan.not_run[(row, t)]}", MISSING
                continue
            stat = _stat(*_cell(plan.requests[(row, t)], metric))
            line[f"{t} (ours)"] = stat
            line[f"{t} Δ"] = MISSING if p is None or np.isnan(stat.mean) else Num(stat.mean - p[0], "{:+.1f}")
        out.append(line)

    notes = [*plan.notes,
             f"**Pretrained LMs:** table {source} at budget={budget}, seed {lm_seed} of each row, final checkpoint "
             "(the paper does not say which of its LM seeds it fine-tunes): "
             + "; ".join(f"{r} → `{p}`" for r, p in plan.lm_runs.items() if p is not None) + ".",
             f"**Fine-tuning:** `experiment={experiment}` at budget={budget}, {n_seeds} seeds per cell"
             + ("" if not raised else " (raised by the claims planner to decide a claim, `conf/decide/"
                f"{budget}.yaml`: " + ", ".join(f"{k} {v}" for k, v in raised.items()) + ")")
             + f"; value = `{metric}` × 100 at the end of fine-tuning (last epoch), mean ± std over seeds."]
    # an LM whose weights were retrained (no checkpoint in git): fine-tuning runs trained since start from those
    notes += [f"{note} (fine-tuning runs trained after that date start from the retrained weights; earlier ones "
              "from the original)" for p in plan.lm_runs.values()
              if p is not None and (note := recovered_note(p)) is not None]
    notes += [f"**Data, {t}:** {src}" for t, src in plan.data.items()]
    notes += [f"**{t} not run:** {why}" for t, why in plan.skipped.items()]
    named = {r: ref["name"] for r, ref in paper.items() if ref.get("name", r) != r}
    if named:
        notes.append("**Paper rows:** " + ", ".join(f"{r} = the paper's “{n}”" for r, n in named.items()) + ".")
    return columns, out, notes

