"""The claims scoreboard: every claim written in a table spec, checked against that table's committed results.

A table spec (``conf/table/<paper>/<name>.yaml``) may carry ``claims:``, each the paper's sentence, where it
stands, and a checkable form over the table's cells (``row`` label x ``column`` name)::

    claims:
      - id: fsn-t1-fsn-below-transformer
        text: "FSN reaches lower validation bpc than the matched transformer"
        where: "§4.2, Table 1"
        check: {kind: difference, a: {row: "enwik8 — FSN", column: bpc},
                b: {row: "enwik8 — Transformer (RoPE, SwiGLU)", column: bpc}, sign: "<"}

Check kinds (:mod:`oscrepro.claims.verdict`): ``difference`` (a, b, sign, margin), ``ordering`` (cells,
direction), ``trend`` (cells, x, direction), ``within`` (a, target: a number or ``paper`` = the row's reference
value, tol, exact), ``spread_ratio`` (a, b, sign). An optional ``budgets: [paper]`` keeps a claim from being judged on
runs that cannot answer it (e.g. cpu runs still in the unigram regime). Each claim is checked at every budget whose
table is committed
(``results/<paper>/<name>.csv`` for ``paper``, ``results/<paper>/<budget>/<name>.csv`` otherwise): nothing is
trained. ``python -m oscrepro.claims`` (``make claims``) writes ``results/CLAIMS.md``.
"""

from __future__ import annotations

import csv
import math
import os
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from oscrepro.claims import verdict as V
from oscrepro.tables.spec import BUDGETS, CONF_DIR, available_tables
from oscrepro.utils.run_record import atomic_write_text

KINDS = ("difference", "ordering", "trend", "within", "spread_ratio")


class ClaimError(ValueError):
    """A claim that cannot be checked as written (unknown kind, row or column); names the spec and the claim."""


@dataclass(frozen=True)
class Claim:
    table: str  # <paper>/<name>
    id: str
    text: str
    where: str
    check: dict[str, Any]
    budgets: tuple[str, ...] = ("cpu", "paper")  # where a verdict means something (e.g. not on unigram-regime runs)


@dataclass(frozen=True)
class Checked:
    claim: Claim
    budget: str
    verdict: V.Verdict
    table_md: Path
    variant: str | None = None  # a variant build's table (its own .md only; CLAIMS.md judges the plain tables)


Cells = dict[tuple[str, str], dict[str, str]]  # (row, column) -> the csv line


def load_claims(key: str, conf_dir: Path = CONF_DIR) -> list[Claim]:
    """The claims of ``conf/table/<key>.yaml`` (empty when it has none); a malformed claim raises ClaimError."""
    raw = OmegaConf.to_container(OmegaConf.load(conf_dir / "table" / f"{key}.yaml"), resolve=True)
    claims = []
    for i, c in enumerate(raw.get("claims") or []):
        missing = {"id", "text", "where", "check"} - set(c)
        if missing:
            raise ClaimError(f"{key}: claim #{i} lacks {sorted(missing)}")
        if c["check"].get("kind") not in KINDS:
            raise ClaimError(f"{key}: claim {c['id']!r} kind={c['check'].get('kind')!r}; valid: {', '.join(KINDS)}")
        budgets = tuple(c.get("budgets") or ("cpu", "paper"))
        if not set(budgets) <= set(BUDGETS) - {"smoke"}:
            raise ClaimError(f"{key}: claim {c['id']!r} budgets={list(budgets)}; valid: cpu, paper")
        claims.append(Claim(key, str(c["id"]), str(c["text"]), str(c["where"]), dict(c["check"]), budgets))
    return claims


def table_csv(results: Path, key: str, budget: str, variant: str | None = None) -> Path:
    """Where the table engine writes ``key`` at ``budget`` (``variant``: a ``--variant`` build of it)."""
    paper, name = key.split("/", 1)
    base = results / paper if budget == "paper" else results / paper / budget
    return (base / variant if variant else base) / f"{name}.csv"


def read_cells(path: Path) -> Cells:
    """Cells of a runs table (row, column, ours_mean, ours_std, n) or of an analysis table (any header: the row is
    the first column's value, or "first | second" where the first repeats; every other column is a one-value cell,
    n = 1, checkable by ``exact`` claims only)."""
    with path.open(newline="") as f:
        lines = list(csv.DictReader(line for line in f if not line.startswith("#")))  # provenance comment lines
    if not lines or "ours_mean" in lines[0]:
        return {(r["row"], r["column"]): r for r in lines}
    first, *rest = list(lines[0])
    keys = [r[first] for r in lines]
    if len(set(keys)) < len(keys) and rest:
        keys = [f"{r[first]} | {r[rest[0]]}" for r in lines]
    return {(k, col): {"ours_mean": r[col], "ours_std": "", "n": "1"} for k, r in zip(keys, lines, strict=True)
            for col in rest}


NUMBER = re.compile(r"\s*[-+−]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")


def _float(v: str | None) -> float:
    """A cell's number: plain floats, and rendered ones ("1,011,834", "+0", "+0.11 %", "−3.2")."""
    if v in (None, ""):
        return math.nan
    try:
        return float(v)
    except ValueError:
        m = NUMBER.match(str(v).replace(",", ""))  # a leading number only: "not reached (0/1)" is no number
        return float(m.group().strip().replace("−", "-")) if m else math.nan


def _cell(cells: Cells, ref: dict[str, str], claim: Claim) -> dict[str, str]:
    key = (str(ref["row"]), str(ref["column"]))
    if key not in cells:
        rows = sorted({r for r, _ in cells})
        raise ClaimError(f"{claim.table}: claim {claim.id!r} names cell {key}, not in the table (rows: {rows})")
    return cells[key]


def _stats(cells: Cells, ref: dict[str, str], claim: Claim) -> V.CellStats:
    line = _cell(cells, ref, claim)
    n = int(_float(line.get("n")) if not math.isnan(_float(line.get("n"))) else 0)
    return V.CellStats(_float(line.get("ours_mean")), _float(line.get("ours_std")), n)


def check_claim(claim: Claim, cells: Cells) -> V.Verdict:
    """The verdict of one claim on one table's cells."""
    c = claim.check
    level = float(c.get("level", 0.95))
    kind = c["kind"]
    if kind == "difference":
        return V.difference(_stats(cells, c["a"], claim), _stats(cells, c["b"], claim), c["sign"], level,
                            float(c.get("margin", 0.0)))
    if kind == "spread_ratio":
        return V.spread_ratio(_stats(cells, c["a"], claim), _stats(cells, c["b"], claim), c["sign"], level)
    if kind == "ordering":
        return V.ordering([_stats(cells, r, claim) for r in c["cells"]], c["direction"], level)
    if kind == "trend":
        return V.trend([float(x) for x in c["x"]], [_stats(cells, r, claim) for r in c["cells"]], c["direction"],
                       level)
    target = c["target"]
    if target == "paper":
        target = _float(_cell(cells, c["a"], claim).get("paper_mean"))
        if math.isnan(target):
            raise ClaimError(f"{claim.table}: claim {claim.id!r} has target: paper, but row {c['a']['row']!r} has no "
                             "paper value for that column in the table")
    return V.within(_stats(cells, c["a"], claim), float(target), float(c["tol"]), level, bool(c.get("exact", False)))


def check_table(key: str, budget: str, results: Path, conf_dir: Path = CONF_DIR,
                variant: str | None = None) -> list[Checked]:
    """The claims of table ``key`` judged at ``budget`` (a claim's ``budgets`` say where a verdict means something),
    checked on its committed csv (``variant``: that variant build's csv); none at smoke or where the csv does not
    exist."""
    path = table_csv(results, key, budget, variant)
    claims = [cl for cl in load_claims(key, conf_dir) if budget in cl.budgets]
    if not claims or budget == "smoke" or not path.exists():
        return []
    cells = read_cells(path)
    return [Checked(cl, budget, check_claim(cl, cells), path.with_suffix(".md"), variant) for cl in claims]


def check_variants(results: Path, conf_dir: Path = CONF_DIR) -> list[Checked]:
    """The claims of every committed variant build (``results/<paper>[/<budget>]/<variant>/<table>.csv``, e.g. fsn
    Table 1's ``anneal`` at cpu), judged on the variant's numbers. Their verdicts go into the variant's own .md:
    the scoreboard (CLAIMS.md) judges the plain tables, built with each paper's recipe."""
    out: list[Checked] = []
    for key in available_tables(conf_dir):
        for budget in BUDGETS:  # check_table judges nothing at smoke
            base = table_csv(results, key, budget)
            for csv_path in sorted(base.parent.glob(f"*/{base.name}")):
                if csv_path.parent.name not in BUDGETS:  # results/<paper>/cpu/ is a budget, not a variant
                    out += check_table(key, budget, results, conf_dir, variant=csv_path.parent.name)
    return out


def check_all(results: Path, conf_dir: Path = CONF_DIR) -> list[Checked]:
    """Every claim of every table spec at every budget whose table csv exists."""
    return [c for key in available_tables(conf_dir) for budget in BUDGETS for c in check_table(key, budget, results,
                                                                                                 conf_dir)]


def unchecked(results: Path, conf_dir: Path = CONF_DIR) -> list[Claim]:
    """Claims whose table is committed at no budget (they are listed, not silently dropped)."""
    return [cl for key in available_tables(conf_dir) for cl in load_claims(key, conf_dir)
            if not any(table_csv(results, key, b).exists() for b in cl.budgets)]


MARK = {"holds": "✅ holds", "contradicted": "❌ contradicted", "inconclusive": "❔ inconclusive"}


BEGIN, END = "<!-- claims: make claims -->", "<!-- /claims -->"


def table_section(rows: list[Checked], scoreboard: Path) -> str:
    """The claims section of one table's .md (between BEGIN and END markers, rewritten by every ``make claims``)."""
    link = f"[CLAIMS.md]({os.path.relpath(scoreboard, rows[0].table_md.parent)})"
    intro = (f"The paper's claims on this variant (`{rows[0].variant}`), checked on the numbers above (`make claims`; "
             f"{link} judges the plain tables only)." if rows[0].variant else
             f"The paper's claims on this table, checked on the numbers above (`make claims`; all papers: {link}).")
    lines = [BEGIN, "", "## Claims", "", intro, "",
             "| claim | where | verdict | numbers |", "|---|---|---|---|"]
    lines += [f"| {c.claim.text} | {c.claim.where} | {MARK[c.verdict.status]} | {c.verdict.detail} |" for c in rows]
    return "\n".join([*lines, "", END])


def strip_section(md: Path) -> None:
    """Remove a claims section left in a table's .md whose spec no longer has claims."""
    text = md.read_text()
    if BEGIN in text:
        atomic_write_text(md, text[: text.index(BEGIN)].rstrip("\n") + text[text.index(END) + len(END):].rstrip("\n")
                          + "\n")


def write_table_sections(checked: list[Checked], scoreboard: Path) -> None:
    """Put (or replace) each checked table's claims section at the end of its .md."""
    by_md: dict[Path, list[Checked]] = defaultdict(list)
    for c in checked:
        by_md[c.table_md].append(c)
    for md, rows in by_md.items():
        if not md.exists():
            continue
        text = md.read_text()
        if BEGIN in text:
            text = text[: text.index(BEGIN)].rstrip("\n") + text[text.index(END) + len(END):]
        atomic_write_text(md, text.rstrip("\n") + "\n\n" + table_section(rows, scoreboard) + "\n")
