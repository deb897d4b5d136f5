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
value, tol, exact), ``spread_ratio`` (a, b, sign), ``equivalent`` (a, b, tol: |mean(a) − mean(b)| ≤ tol, judged by
the Welch interval of a − b, which must lie inside [−tol, tol] to hold and wholly outside it to contradict; a claim
that two of our own cells are "indistinguishable"). An optional ``budgets: [paper]`` keeps a claim from being judged
on runs that cannot answer it (e.g. cpu runs still in the unigram regime). Each claim is checked at every budget
whose table is committed
(``results/<paper>/<name>.csv`` for ``paper``, ``results/<paper>/<budget>/<name>.csv`` otherwise): nothing is
trained. ``python -m oscrepro.claims`` (``make claims``) writes ``results/CLAIMS.md`` and one ``REPORT.md`` per
paper (:mod:`oscrepro.claims.report`).

Optional fields of a claim, read by the counting (:mod:`oscrepro.claims.tally`) and the reports:

* ``quote``: the paper's sentence, verbatim, that the claim encodes (``text`` is our checkable reading of it);
* ``weight``: ``central`` (a headline claim: abstract, contributions), ``supporting`` (default) or ``detail``;
* ``kind_of_claim``: ``empirical`` (default: a property of trained models or measurements) or ``exact`` (a
  parameter count, an identity such as S_ii = 1, a closed form checked by Monte Carlo): exact checks are counted
  apart from empirical claims, since they say nothing about how a mechanism performs;
* ``not_answerable: {<budget>: "<measured reason>"}``: at that budget the evidence is an artefact of the budget (a
  parameter that never left its initialisation, timings taken under load, a data set too small to train on), so
  the verdict is shown with the reason but counted neither for nor against the paper. With ``budgets: [paper]`` it
  says why the other budget is not judged;
* ``was: ["<earlier text>", ...]``: the claim's earlier wordings, when its ``text`` was changed (to say what its
  check reads, say): the census of inconclusive verdicts (:mod:`oscrepro.claims.census`) follows it through them.
"""

from __future__ import annotations

import csv
import math
import os
import re
from collections import defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from oscrepro.claims import seed_pairs
from oscrepro.claims import verdict as V
from oscrepro.claims.ledger import ledger_verdict, load_ledger
from oscrepro.runs.compose import CONF_DIR
from oscrepro.runs.record import atomic_write_text
from oscrepro.tables.spec import BUDGETS, available_tables
from oscrepro.tables.values import STAT_FIELDS, decode_units

KINDS = ("difference", "ordering", "trend", "within", "spread_ratio", "equivalent")
WEIGHTS = ("central", "supporting", "detail")  # how central a claim is to its paper (the reports' scope)
CLAIM_KINDS = ("empirical", "exact")  # exact: counts, identities, closed forms (counted apart)
NOT_ANSWERABLE = "not answerable"  # the shown status of a verdict whose budget cannot answer the claim


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
    quote: str | None = None  # the paper's sentence, verbatim
    weight: str = "supporting"  # one of WEIGHTS
    kind_of_claim: str = "empirical"  # one of CLAIM_KINDS
    not_answerable: dict[str, str] = field(default_factory=dict)  # budget -> the measured reason
    was: tuple[str, ...] = ()  # earlier wordings of ``text`` (spec ``was:``): the census follows the claim through them

    @property
    def paper(self) -> str:
        """The paper key (``fqo``, ``fsn`` ...)."""
        return self.table.split("/")[0]


@dataclass(frozen=True)
class Checked:
    claim: Claim
    budget: str
    verdict: V.Verdict
    table_md: Path
    variant: str | None = None  # a variant build's table (its own .md only; CLAIMS.md judges the plain tables)

    @property
    def reason(self) -> str | None:
        """Why this budget cannot answer the claim (the spec's ``not_answerable``), or None."""
        return self.claim.not_answerable.get(self.budget)

    @property
    def status(self) -> str:
        """The status shown and counted: the verdict's, or ``not answerable`` where the spec gives a reason."""
        return NOT_ANSWERABLE if self.reason else self.verdict.status

    def shown_detail(self) -> str:
        """The numbers column: the verdict's detail, after the reason when the budget cannot answer the claim."""
        if self.reason:
            return (f"not answerable at `{self.budget}`: {self.reason} (the numbers, for the record: "
                    f"{self.verdict.status}; {self.verdict.detail})")
        return self.verdict.detail


@dataclass(frozen=True)
class CheckError:
    """A claim that could not be checked at one budget (a ClaimError or a ValueError from the verdict): listed in
    CLAIMS.md and on stderr, and ``make claims`` exits non-zero, never dropped."""

    claim: Claim
    budget: str
    message: str


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
        weight = str(c.get("weight", "supporting"))
        if weight not in WEIGHTS:
            raise ClaimError(f"{key}: claim {c['id']!r} weight={weight!r}; valid: {', '.join(WEIGHTS)}")
        kind_of_claim = str(c.get("kind_of_claim", "empirical"))
        if kind_of_claim not in CLAIM_KINDS:
            raise ClaimError(f"{key}: claim {c['id']!r} kind_of_claim={kind_of_claim!r}; valid: "
                             f"{', '.join(CLAIM_KINDS)}")
        not_answerable = c.get("not_answerable") or {}
        if not isinstance(not_answerable, dict) or not set(not_answerable) <= set(BUDGETS) - {"smoke"} or not all(
                isinstance(v, str) and v.strip() for v in not_answerable.values()):
            raise ClaimError(f"{key}: claim {c['id']!r} not_answerable={not_answerable!r}; write it as "
                             "{<cpu|paper>: \"<the measured reason>\"}")
        bad_pairing = seed_pairs.validate(c["check"])
        if bad_pairing:
            raise ClaimError(f"{key}: claim {c['id']!r}: {bad_pairing}")
        quote, was = c.get("quote"), c.get("was") or []
        if isinstance(was, str):
            was = [was]
        if not isinstance(was, list) or not all(isinstance(w, str) and w.strip() and w != c["text"] for w in was):
            raise ClaimError(f"{key}: claim {c['id']!r} was={was!r}; write it as a list of the claim's earlier "
                             "texts (each non-empty and unlike today's)")
        claims.append(Claim(key, str(c["id"]), str(c["text"]), str(c["where"]), dict(c["check"]), budgets,
                            None if quote is None else " ".join(str(quote).split()), weight, kind_of_claim,
                            {str(b): " ".join(str(r).split()) for b, r in not_answerable.items()}, tuple(was)))
    return claims


def table_csv(results: Path, key: str, budget: str, variant: str | None = None) -> Path:
    """Where the table engine writes ``key`` at ``budget`` (``variant``: a ``--variant`` build of it)."""
    paper, name = key.split("/", 1)
    base = results / paper if budget == "paper" else results / paper / budget
    return (base / variant if variant else base) / f"{name}.csv"


def read_cells(path: Path) -> Cells:
    """Cells of a runs table (row, column, ours_mean, ours_std, n) or of an analysis table (any header: the row is
    the first column's value, or "first | second" where the first repeats).

    An analysis cell with numeric columns (``<column>__std``, ``<column>__n``: a statistic over seeds, written by
    :func:`oscrepro.tables.render.analysis_csv`) is read from them: mean, std and n. Each cell's ``units`` is its
    per-run values where the csv keeps them (``ours_units`` / ``<column>__units``; empty otherwise): the claims
    judge two cells of the same runs as paired (:func:`oscrepro.claims.verdict.difference`). Any other cell is one
    value, n = 1, checkable by ``exact`` claims only (a cell with no number, such as "not run: ...", has n = 0); but a
    rendered "mean ± std" without numeric columns (a csv written
    before they existed) is no number: its line carries ``refused`` (the reason), and a claim that reads it fails
    with a ClaimError instead of reading its leading number as one seed."""
    with path.open(newline="") as f:
        lines = list(csv.DictReader(line for line in f if not line.startswith("#")))  # provenance comment lines
    if not lines or "ours_mean" in lines[0]:
        return {(r["row"], r["column"]): {**r, "units": r.get("ours_units") or ""} for r in lines}
    header = list(lines[0])
    budget = next((b for b in (path.parent.name, path.parent.parent.name) if b in BUDGETS), "paper")  # table_csv
    stat_cols = {c for c in header if f"{c}__n" in header}
    numeric = {f"{c}__{s}" for c in stat_cols for s in STAT_FIELDS}
    first, *rest = [c for c in header if c not in numeric]
    keys = [r[first] for r in lines]
    if len(set(keys)) < len(keys) and rest:
        keys = [f"{r[first]} | {r[rest[0]]}" for r in lines]
    cells: Cells = {}
    for k, r in zip(keys, lines, strict=True):
        for col in rest:
            if col in stat_cols and r[f"{col}__n"] not in (None, ""):
                cells[(k, col)] = {"ours_mean": r[col], "ours_std": r[f"{col}__std"], "n": r[f"{col}__n"],
                                   "units": r.get(f"{col}__units") or ""}
                continue
            # one value (n = 1); a cell without a number ("not run: no MNLI data here", "—") has none (n = 0)
            numeric_cell = SPREAD in (r[col] or "") or not math.isnan(_float(r[col]))
            cells[(k, col)] = {"ours_mean": r[col], "ours_std": "", "n": "1" if numeric_cell else "0"}
            if SPREAD in (r[col] or ""):
                cells[(k, col)]["refused"] = (
                    f"cell ({k!r}, {col!r}) of {path} is {r[col]!r}, a rendered mean ± std without its numeric "
                    f"columns ({col}__std, {col}__n), so its number of seeds is unknown")
                cells[(k, col)]["budget"] = budget
    return cells


SPREAD = "±"  # a rendered "mean ± std": never parsed into a number (its n is not in the text)
NUMBER = re.compile(r"\s*[-+−]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")


def _float(v: str | None) -> float:
    """A cell's number: plain floats, and rendered ones ("1,011,834", "+0", "+0.11 %", "−3.2"); a rendered
    "mean ± std" raises ClaimError (read its numeric columns instead: :func:`read_cells`)."""
    if v in (None, ""):
        return math.nan
    try:
        return float(v)
    except ValueError:
        if SPREAD in str(v):
            raise ClaimError(f"{v!r} is a rendered mean ± std, not one number: read the cell's numeric columns "
                             "(<column>__std, <column>__n) instead") from None
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
    if "refused" in line:
        raise ClaimError(f"{claim.table}: claim {claim.id!r}: {line['refused']}; rebuild the table (python -m "
                         f"oscrepro.table {claim.table} --budget {line['budget']}): its csv then carries them")
    n = int(_float(line.get("n")) if not math.isnan(_float(line.get("n"))) else 0)
    return V.CellStats(_float(line.get("ours_mean")), _float(line.get("ours_std")), n, decode_units(line.get("units")))


def _pair(claim: Claim, cells: Cells, results: Path | None) -> tuple[V.CellStats, V.CellStats]:
    """The claim's cells a and b keyed by seed (its spec's ``pair_seeds``: :mod:`oscrepro.claims.seed_pairs`)."""
    if results is None:
        raise ClaimError(f"{claim.table}: claim {claim.id!r} pairs by seed: judging it needs the results directory "
                         "(the runs' records hold their seeds)")
    got = seed_pairs.seed_matched(_stats(cells, claim.check["a"], claim), _stats(cells, claim.check["b"], claim),
                                  results)
    if isinstance(got, str):
        raise ClaimError(f"{claim.table}: claim {claim.id!r} declares seed-matched runs ({seed_pairs.FIELD}) but "
                         f"{got}")
    return got


def _seed_matched(v: V.Verdict) -> V.Verdict:
    """A paired verdict's wording when its pairs are two models' runs of one seed, not cells of the same runs."""
    detail = v.detail.replace("paired t over the same runs", "paired t over seed-matched runs of the two models")
    return V.Verdict(v.status, "paired t (seed-matched)", v.effect, v.ci, detail)


def check_claim(claim: Claim, cells: Cells, results: Path | None = None, look: int | None = None) -> V.Verdict:
    """The verdict of one claim on one table's cells. ``look``: the group-sequential look it judges (None: a
    fixed-sample verdict), which says whether a check declaring ``pair_seeds`` pairs by seed yet (``results``: where
    the runs' records are, to read their seeds)."""
    c = claim.check
    level = float(c.get("level", 0.95))
    kind = c["kind"]
    if kind == "difference" and seed_pairs.applies(c, look):
        a, b = _pair(claim, cells, results)
        return _seed_matched(V.difference(a, b, c["sign"], level, float(c.get("margin", 0.0))))
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
    if kind == "equivalent":
        return equivalent(_stats(cells, c["a"], claim), _stats(cells, c["b"], claim), float(c["tol"]), level)
    target = c["target"]
    if target == "paper":
        target = _float(_cell(cells, c["a"], claim).get("paper_mean"))
        if math.isnan(target):
            raise ClaimError(f"{claim.table}: claim {claim.id!r} has target: paper, but row {c['a']['row']!r} has no "
                             "paper value for that column in the table")
    return V.within(_stats(cells, c["a"], claim), float(target), float(c["tol"]), level, bool(c.get("exact", False)))


def claim_refs(claim: Claim) -> list[dict[str, str]]:
    """The cells a claim reads (``a``/``b``, or ``cells``)."""
    c = claim.check
    return list(c.get("cells") or [c[k] for k in ("a", "b") if k in c])


def check_sibling(claim: Claim, cells: Cells, budget: str, results: Path, conf_dir: Path = CONF_DIR) -> V.Verdict:
    """:func:`check_claim`, at the group-sequential level of the look its seeds reached when any of its cells has
    more seeds than its spec's count (raised for another claim's look: :mod:`oscrepro.claims.siblings`). The look is
    the one its *largest* cell reached: one raised cell already changes the claim's data (osciformer Table 9's
    log-uniform row raised for log-above-harmonics, read at n 5/3 by log-above-linear), so the claim has been looked
    at again; the smallest would judge it at the fixed level. An exact check is not a test over seeds: its level
    stands."""
    from oscrepro.claims.siblings import sibling_level

    c = claim.check
    if c["kind"] == "within" and c.get("exact"):
        return check_claim(claim, cells, results)
    refs = claim_refs(claim)
    n = max(_stats(cells, r, claim).n for r in refs)
    sib = sibling_level(claim.table, budget, list(dict.fromkeys(str(r["row"]) for r in refs)), n, results, conf_dir)
    if sib is None:
        return check_claim(claim, cells, results)
    level, why = sib
    v = check_claim(replace(claim, check={**c, "level": level}), cells, results)
    return V.Verdict(v.status, v.test, v.effect, v.ci, f"{v.detail}; {why}")


def _g(v: float) -> str:
    """A number for a detail sentence: 3 significant digits, a true minus sign (as the verdicts write them)."""
    return f"{v:.3g}".replace("-", "−")


def equivalent(a: V.CellStats, b: V.CellStats, tol: float, level: float = 0.95) -> V.Verdict:
    """Claim ``|mean(a) − mean(b)| ≤ tol`` ("indistinguishable", "matches"): the Welch interval of a − b (the one
    :func:`oscrepro.claims.verdict.difference` computes) must lie inside [−tol, tol] to hold, wholly outside it to
    contradict; overlapping an edge, or no interval (fewer than 2 seeds), is inconclusive."""
    if not tol >= 0:
        raise ValueError(f"equivalent: tol must be ≥ 0, got {tol!r}")
    one_sided = V.difference(a, b, ">", level, -tol)  # its interval is two-sided at `level`, whatever the sign
    lo, hi = one_sided.ci
    claim = f"claim |a − b| ≤ {_g(tol)}"
    if math.isnan(lo):
        why = one_sided.detail.split("no interval: ", 1)[-1].split(" (", 1)[0]
        return V.Verdict("inconclusive", "Welch t (equivalence)", one_sided.effect, one_sided.ci,
                         f"a − b = {_g(one_sided.effect)}, no interval: {why} ({claim}, n {a.n}/{b.n})")
    if -tol <= lo and hi <= tol:
        status = "holds"
    elif hi < -tol or lo > tol:
        status = "contradicted"
    else:
        status = "inconclusive"
    detail = (f"a − b = {_g(one_sided.effect)} [{_g(lo)}, {_g(hi)}], {claim}: {status} (Welch t interval inside "
              f"[−tol, tol] to hold, level {level:g}, n {a.n}/{b.n})")
    return V.Verdict(status, "Welch t (equivalence)", one_sided.effect, one_sided.ci, detail)


def check_table(key: str, budget: str, results: Path, conf_dir: Path = CONF_DIR,
                variant: str | None = None, errors: list[CheckError] | None = None) -> list[Checked]:
    """The claims of table ``key`` judged at ``budget`` (a claim's ``budgets`` say where a verdict means something),
    checked on its committed csv (``variant``: that variant build's csv); none at smoke or where the csv does not
    exist. A claim that the seed planner extended (its ledger, :mod:`oscrepro.claims.ledger`) is judged by the
    group-sequential design, not the fixed-sample test. A claim that cannot be checked raises ClaimError /
    ValueError, or, with ``errors`` (``make claims``),
    is appended there so that every other claim is still judged."""
    path = table_csv(results, key, budget, variant)
    claims = [cl for cl in load_claims(key, conf_dir) if budget in cl.budgets]
    if not claims or budget == "smoke" or not path.exists():
        return []
    cells = read_cells(path)
    ledger = {} if variant else load_ledger(results, budget)  # claims extended by oscrepro.claims.decide
    out = []
    for cl in claims:
        try:
            entry = ledger.get(f"{cl.id}@{budget}")
            verdict = (ledger_verdict(entry) if entry and entry.get("looks")
                       else check_claim(cl, cells, results) if variant
                       else check_sibling(cl, cells, budget, results, conf_dir))
            out.append(Checked(cl, budget, verdict, path.with_suffix(".md"), variant))
        except ValueError as err:  # ClaimError is a ValueError; the verdict's ValueErrors are claim mistakes too
            if errors is None:
                raise
            errors.append(CheckError(cl, budget, str(err)))
    return out


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


def check_all(results: Path, conf_dir: Path = CONF_DIR, errors: list[CheckError] | None = None) -> list[Checked]:
    """Every claim of every table spec at every budget whose table csv exists (``errors``: see check_table)."""
    return [c for key in available_tables(conf_dir) for budget in BUDGETS
            for c in check_table(key, budget, results, conf_dir, errors=errors)]


def unchecked(results: Path, conf_dir: Path = CONF_DIR) -> list[Claim]:
    """Claims whose table is committed at none of their budgets (they are listed, not silently dropped)."""
    return [cl for key in available_tables(conf_dir) for cl in load_claims(key, conf_dir)
            if not any(table_csv(results, key, b).exists() for b in cl.budgets)]


def tables_outside_budgets(claim: Claim, results: Path) -> list[Path]:
    """Committed csvs of the claim's table at budgets its ``budgets`` exclude (e.g. the cpu table of a claim judged
    at paper budget only): such a claim is "judged at paper budget only", not "not built"."""
    return [p for b in BUDGETS if b != "smoke" and b not in claim.budgets
            if (p := table_csv(results, claim.table, b)).exists()]


MARK = {"holds": "✅ holds", "contradicted": "❌ contradicted", "inconclusive": "❔ inconclusive",
        NOT_ANSWERABLE: "➖ not answerable at this budget"}


BEGIN, END = "<!-- claims: make claims -->", "<!-- /claims -->"


def md_cell(text: str) -> str:
    """Text for a markdown table cell: a literal ``|`` (as in ``|A_ij − 1/N|``) is escaped so it does not split the
    cell."""
    return str(text).replace("|", "\\|")


def table_section(rows: list[Checked], scoreboard: Path) -> str:
    """The claims section of one table's .md (between BEGIN and END markers, rewritten by every ``make claims``)."""
    link = f"[CLAIMS.md]({os.path.relpath(scoreboard, rows[0].table_md.parent)})"
    intro = (f"The paper's claims on this variant (`{rows[0].variant}`), checked on the numbers above (`make claims`; "
             f"{link} judges the plain tables only)." if rows[0].variant else
             f"The paper's claims on this table, checked on the numbers above (`make claims`; all papers: {link}).")
    lines = [BEGIN, "", "## Claims", "", intro, "",
             "| claim | where | verdict | numbers |", "|---|---|---|---|"]
    lines += [f"| {md_cell(c.claim.text)} | {md_cell(c.claim.where)} | {MARK[c.status]} | {md_cell(c.shown_detail())} |"
              for c in rows]
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


def refresh_table_claims(key: str, budget: str, results: Path, variant: str | None = None) -> None:
    """Re-check the claims of the table just rendered that are judged at ``budget`` and write its claims section,
    as ``make claims`` does (which also rewrites results/CLAIMS.md; a variant's verdicts stay in its own .md).
    Called after a build by the table CLI, the leaderboard and the claims planner: the engine itself knows no
    claims."""
    write_table_sections(check_table(key, budget, results, variant=variant), results / "CLAIMS.md")
