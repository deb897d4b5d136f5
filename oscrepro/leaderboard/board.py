"""The cross-paper leaderboard (issue 17): every vector-contract mechanism on the same tasks at matched parameter
counts and equal budgets, ranked per task, with the block benchmark's cost ratios beside the scores.

Each task is a runs table, ``conf/table/leaderboard/<task>.yaml``, whose ``match`` has the table engine set
``model.d_ff`` per mechanism (``oscrepro.tables.match``) and whose ``leaderboard:`` block names the task, its
score column and whether higher or lower is better. :func:`build_leaderboard` plans every task, trains all missing
runs in ONE pool (no worker idles at the tail of a task), renders each task's table
(``results/leaderboard[/<budget>]/<task>.md``) and then the board: ``results/leaderboard.md`` and the rank heatmap
``results/leaderboard.png`` (:mod:`oscrepro.leaderboard.figure`). The cost columns come from
``results/bench/leaderboard.csv`` (``python -m oscrepro.leaderboard.bench``), never from training wall times (those
depend on the machine's load).
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import OmegaConf

from oscrepro.runs.compose import CONF_DIR, path_override
from oscrepro.runs.record import results_root
from oscrepro.tables.spec import load_spec

if TYPE_CHECKING:
    from oscrepro.tables.launch import LaunchConfig

TASKS = ("sva", "mqar", "wt2", "charlm", "uea")


@dataclass
class Entry:
    """One mechanism on one task: the score's seed mean and std, seeds finished, and its parameter count."""

    mean: float
    std: float
    n: int
    n_missing: int
    params: float
    rank: int | None = None


@dataclass
class Task:
    key: str  # leaderboard/<task>
    name: str
    score: str  # column name of the score
    label: str  # the score column's label
    better: str  # higher | lower
    budget_note: str
    digits: int = 2  # the score column's digits in the task's table
    left_out: dict[str, str] = field(default_factory=dict)  # mechanism -> why it is not on this task
    entries: dict[str, Entry] = field(default_factory=dict)


def mechanisms(tasks: tuple[str, ...] = TASKS) -> dict[str, str]:
    """``{row label: attention config}`` of every mechanism on the leaderboard, read from the task specs' rows
    (``attention=<name>`` in a row's overrides), in one order that respects each task's row order (a new mechanism
    goes right after the row it follows in its task). A new mechanism is a row in the specs: no list in code."""
    order: list[str] = []
    configs: dict[str, str] = {}
    for task in tasks:
        prev = None
        for row in load_spec(f"leaderboard/{task}").rows:
            if row.attention is not None:
                configs.setdefault(row.label, row.attention)
            if row.label not in order:
                order.insert(order.index(prev) + 1 if prev is not None else len(order), row.label)
            prev = row.label
    return {label: configs.get(label, label) for label in order}


def _mechanisms_with_entries(tasks: list[Task]) -> list[str]:
    """The leaderboard's mechanisms (:func:`mechanisms`, over the tasks shown) that have a score on some task."""
    return [m for m in mechanisms(tuple(t.key.split("/", 1)[1] for t in tasks)) if any(m in t.entries for t in tasks)]


def task_meta(key: str, conf_dir: Path = CONF_DIR) -> dict[str, Any]:
    """The ``leaderboard:`` block of a task's table spec (task name, score column, better)."""
    raw = OmegaConf.to_container(OmegaConf.load(conf_dir / "table" / f"{key}.yaml"), resolve=True)
    meta = dict(raw.get("leaderboard") or {})
    if meta.get("better") not in ("higher", "lower") or "score" not in meta:
        raise ValueError(f"conf/table/{key}.yaml: leaderboard needs score: <column> and better: higher|lower")
    return meta


def rank(entries: dict[str, Entry], better: str) -> None:
    """Competition ranks (1 = best; ties share the better rank) on the seed means; entries without a finished run
    get none."""
    scored = [(e.mean, m) for m, e in entries.items() if e.n > 0 and not math.isnan(e.mean)]
    sign = -1.0 if better == "higher" else 1.0
    for e in entries.values():
        e.rank = None if (e.n == 0 or math.isnan(e.mean)) else 1 + sum(sign * v < sign * e.mean for v, _ in scored)


def read_task(key: str, csv_path: Path, budget: str) -> Task:
    """One task's rendered table csv -> its entries, ranked."""
    spec = load_spec(key)
    meta = task_meta(key)
    score = meta["score"]
    col = next(c for c in spec.columns if c.name == score)
    task = Task(key, str(meta.get("task", key)), score, col.label, meta["better"], spec.budget_notes.get(budget, ""),
                col.digits, dict(meta.get("left_out") or {}))
    if not csv_path.exists():
        return task
    with open(csv_path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    by = {(r["row"], r["column"]): r for r in rows}
    for row in spec.rows:
        s, p = by.get((row.label, score)), by.get((row.label, "params"))
        if s is None:
            continue
        # n = seeds with a finished, finite value (oscrepro.tables.aggregate.Cell); missing / failed counted apart
        task.entries[row.label] = Entry(float(s["ours_mean"]), float(s["ours_std"] or "nan"), int(s["n"]),
                                        int(s["n_missing"] or 0), float(p["ours_mean"]) if p else math.nan)
    rank(task.entries, task.better)
    return task


def read_bench(path: Path) -> dict[str, tuple[float, float]]:
    """mechanism -> (forward+backward time ratio, peak memory ratio) vs the softmax block; {} without the file."""
    if not path.exists():
        return {}
    with open(path, newline="") as fh:
        rows = [r for r in csv.DictReader(line for line in fh if not line.startswith("#"))]
    return {r["mechanism"]: (float(r["ratio_fwdbwd_time"]), float(r["ratio_mem_fwdbwd"])) for r in rows}


def _fmt(e: Entry, digits: int) -> str:
    if e.n == 0 or math.isnan(e.mean):
        return "—" + (f" ({e.n_missing} missing)" if e.n_missing else "")
    std = "" if math.isnan(e.std) else f" ± {e.std:.{digits}f}"
    return f"{e.mean:.{digits}f}{std} (n={e.n}) **#{e.rank}**"


def render_board(tasks: list[Task], bench: dict[str, tuple[float, float]], budget: str, header: list[str]) -> str:
    """The leaderboard markdown: one row per mechanism, per task its score (± std over seeds, n) and rank, its
    parameter count per task, mean rank over the tasks it ran, and the bench's cost ratios."""
    mechs = _mechanisms_with_entries(tasks)
    lines = [f"# Leaderboard — every mechanism, every task, matched parameters (budget `{budget}`)", "", *header, ""]
    head = ["Mechanism", *[f"{t.name}: {t.label} ({'↑' if t.better == 'higher' else '↓'})" for t in tasks],
            "Mean rank (tasks)", "Fwd+bwd time ×softmax", "Peak memory ×softmax"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for m in mechs:
        cells, ranks = [m], []
        for t in tasks:
            e = t.entries.get(m)
            cells.append(("left out" if m in t.left_out else "—") if e is None else _fmt(e, t.digits))
            if e is not None and e.rank is not None:
                ranks.append(e.rank)
        cells.append(f"{sum(ranks) / len(ranks):.2f} ({len(ranks)})" if ranks else "—")
        ratios = bench.get(m)
        cells += [f"{ratios[0]:.2f}", f"{ratios[1]:.2f}"] if ratios else ["—", "—"]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "## Parameter counts (matched within 1 % of softmax per task)", "",
              "| Mechanism | " + " | ".join(t.name for t in tasks) + " |", "|" + "---|" * (len(tasks) + 1)]
    for m in mechs:
        counts = [f"{int(t.entries[m].params):,}" if m in t.entries and not math.isnan(t.entries[m].params)
                  else "—" for t in tasks]
        lines.append(f"| {m} | " + " | ".join(counts) + " |")
    lines += ["", "## Tasks", ""]
    for t in tasks:
        lines.append(f"- **{t.name}** ([table](leaderboard/{'' if budget == 'paper' else budget + '/'}"
                     f"{t.key.split('/')[-1]}.md)): {t.budget_note}")
        lines += [f"  - left out: **{m}** — {why}" for m, why in t.left_out.items()]
    return "\n".join(lines) + "\n"


def training_time(runs: list[Any]) -> str:
    """The board's build time from its run records: runs finished, and the sum of their training wall times per
    machine (core-hours: every run trains on one core), so a build split over machines and sessions adds up."""
    from collections import defaultdict

    per: dict[str, list[float]] = defaultdict(list)
    for r in runs:
        st = r.record.status()
        if st.get("status") in ("ok", "diverged"):
            per[str(st.get("device", "unknown"))].append(float(st.get("wall_time_s") or 0.0))
    done = sum(len(v) for v in per.values())
    parts = "; ".join(f"{len(v)} on {d}: {sum(v) / 3600:.2f} h" for d, v in sorted(per.items()))
    total = sum(map(sum, per.values())) / 3600
    return (f"{done} of {len(runs)} runs finished, training time summed over runs {total:.2f} h ({parts}); "
            "runs train one per core, in parallel")


def board_tasks(budget: str, results: Path, tasks: tuple[str, ...] = TASKS) -> list[Task]:
    """Each task read from its rendered table csv (``results/leaderboard[/<budget>]/<task>.csv``)."""
    folder = results / "leaderboard" if budget == "paper" else results / "leaderboard" / budget
    return [read_task(f"leaderboard/{t}", folder / f"{t}.csv", budget) for t in tasks]


def redraw_board(budget: str, results: Path, tasks: tuple[str, ...] = TASKS, out: Path | None = None) -> Path:
    """Redraw the board's figure from the task csvs, training and rendering nothing else."""
    from oscrepro.leaderboard.figure import plot_board

    return plot_board(board_tasks(budget, results, tasks), out or results / "leaderboard.png",
                      tuple(mechanisms(tuple(tasks))), budget)


def build_leaderboard(budget: str = "cpu", launcher: str | LaunchConfig = "joblib", workers: int | None = None,
                      render_only: bool = False, results_dir: str | Path | None = None,
                      extra: list[str] | None = None, tasks: tuple[str, ...] = TASKS) -> Path:
    """Plan every task, train the missing runs in one pool, render each task's table, then the board.
    ``hydra.launcher.<key>=<value>`` in ``extra`` configure the pool (oscrepro.tables.launch), the rest every run."""

    from oscrepro.runs.lookup import serve_from_variants
    from oscrepro.tables.build import build_table, matched_widths
    from oscrepro.tables.launch import Progress, launch, resolve_launcher, split_launcher_overrides
    from oscrepro.tables.plan import plan, unique_runs
    from oscrepro.utils.provenance import provenance

    extra, launcher_overrides = split_launcher_overrides(list(extra or []))
    launcher = resolve_launcher(launcher, launcher_overrides)
    results = results_root(results_dir)
    keys = [f"leaderboard/{t}" for t in tasks]
    run_extra = [path_override("paths.results_dir", results), "trainer.enable_progress_bar=false", *(extra or [])]
    runs = []
    for key in keys:
        spec, _ = matched_widths(load_spec(key), budget, list(extra or []))
        runs += unique_runs(plan(spec, budget, run_extra))
    serve_from_variants(runs)  # a finished device-only variant serves its cell
    if not render_only:
        missing = [r for r in runs if not r.record.finished()]
        print(f"[leaderboard] budget={budget}: {len(runs)} runs over {len(keys)} tasks, {len(missing)} to train",
              flush=True)
        launch(missing, launcher, Progress("leaderboard", len(runs), len(runs) - len(missing)), max_workers=workers)
    parsed = []
    for key in keys:
        md = build_table(key, budget, launcher, list(extra or []), results, render_only=True)
        parsed.append(read_task(key, md.with_suffix(".csv"), budget))
    bench = read_bench(results / "bench" / "leaderboard.csv")
    prov = provenance()
    header = [f"- **Built:** `make leaderboard` (budget `{budget}`), commit `{prov.get('git_commit')}`; "
              + training_time(runs),
              "- **Matched parameters:** per task, `model.d_ff` of every mechanism set by the table engine so that "
              "its model's count is within 1 % of the softmax model's (counted on the built model; counts below)",
              "- **Equal budgets:** per task, every mechanism trains with the same recipe, steps and seeds",
              "- **Scores:** mean ± std over seeds, n = finished seeds, **#rank** within the task by the mean (1 = "
              "best; read the ± before reading a rank); *left out* cells give their reason under Tasks; — = not "
              "finished yet",
              "- **Costs:** forward+backward time and peak memory of one block vs the softmax block, measured in one "
              "process (`results/bench/leaderboard.md`)",
              "- Mean rank compares mechanisms only over the tasks each ran: read it with the count beside it"]
    board = results / "leaderboard.md"
    board.write_text(render_board(parsed, bench, budget, header) + "\n![leaderboard](leaderboard.png)\n")
    from oscrepro.leaderboard.figure import plot_board

    plot_board(parsed, results / "leaderboard.png", tuple(mechanisms(tuple(tasks))), budget)
    print(f"[leaderboard] wrote {board} and {results / 'leaderboard.png'}", flush=True)
    return board
