"""Typed cell values for analysis tables: a statistic over seeds carries its numbers, not only its rendering, and
a number carries how it is shown (:class:`Num`); the renderer (:mod:`oscrepro.tables.render`) does the formatting.

An analysis adapter (``kind: analysis`` specs, a function returning ``(columns, rows, notes)``) used to put
``f"{mean:.1f} ± {std:.1f}"`` into a cell; the claims engine then had only the rendered text and read it as one
value (n = 1). A :class:`SeedStat` keeps mean, sample std and n apart: the renderer
(:func:`oscrepro.tables.render.render_analysis_table`) prints it in the .md exactly as the adapters printed it, and
writes its numbers to the csv (``<column>``, ``<column>__std``, ``<column>__n``), which the claims engine reads.

A statistic may also keep its value per *unit* (the run, or the timing trial, each value was measured on:
``units``, written as ``<column>__units``, :func:`encode_units`). Two cells measured on the same units (fqo
Table 6's random and sequential initialisation on the same models, Table 3's a_vs and a_vd of the same runs) are
paired observations, and the claims engine judges their difference by the paired t on the per-unit differences
(:func:`oscrepro.claims.verdict.difference`): Welch's t assumes independent cells, which such cells are not.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

STAT_FIELDS = ("std", "n", "flags", "units")  # a SeedStat column's numeric columns in a csv: <column>__<field>
MISSING = "—"  # a cell the analysis has no value for, written so to the .md and the csv (None: "—" and empty)


@dataclass(frozen=True)
class SeedStat:
    """Mean, sample standard deviation (ddof = 1; nan below two seeds) and count of a quantity over seeds.

    ``digits``, ``show_n`` and ``flags`` only say how the .md shows it: ``27.6 ± 2.8``, one seed ``27.6``, with
    ``show_n`` ``27.6 ± 2.8 (n=3)``, with flags ``… [diverged 1]``; no seed at all renders "—". A spec ``formats``
    entry for the column, where there is one, replaces ``digits`` (:meth:`text`).
    """

    mean: float
    std: float
    n: int
    digits: int = 4
    show_n: bool = False
    flags: tuple[str, ...] = ()
    units: tuple[tuple[str, float], ...] = ()  # (unit, value) per seed: the run (or trial) each value is of

    @classmethod
    def of(cls, values: Sequence[float], digits: int, show_n: bool = False,
           flags: Sequence[str] = (), units: Sequence[str] | None = None) -> SeedStat:
        """The statistic of one value per seed (the seeds' order does not matter). ``units``: the run id (or trial)
        of each value, in the same order, so that a claim comparing two cells of the same units pairs them."""
        v = np.asarray(values, dtype=float)
        mean = float(v.mean()) if len(v) else math.nan
        std = float(v.std(ddof=1)) if len(v) > 1 else math.nan
        if units is not None and len(units) != len(v):
            raise ValueError(f"SeedStat.of: {len(units)} units for {len(v)} values")
        keyed = tuple(zip((str(u) for u in units), (float(x) for x in v), strict=True)) if units is not None else ()
        return cls(mean, std, len(v), digits, show_n, tuple(flags), keyed)

    def text(self, fmt: str | None = None) -> str:
        """The rendering of the .md cell (byte-identical to the adapters' former f-strings). ``fmt``: a column's
        template from the spec's ``formats`` (:func:`column_format`, e.g. ``"{:.2e}"``), applied to the mean and
        the std alike instead of ``digits`` (a column of errors spanning decades reads in scientific notation)."""
        def show(x: float) -> str:
            return fmt.format(x) if fmt else f"{x:.{self.digits}f}"

        if self.n == 0:
            text = "—"
        else:
            text = show(self.mean)
            if self.n > 1:
                text += f" ± {show(self.std)}"
            if self.show_n:
                text += f" (n={self.n})"
        return text + (f" [{', '.join(self.flags)}]" if self.flags else "")

    def __str__(self) -> str:
        return self.text()


@dataclass(frozen=True)
class Num:
    """A number, and the numbers shown with it (``more``: an interval's ends, a range), with how the table shows
    them: ``fmt`` is a :meth:`str.format` template of ``(value, *more)``, e.g. ``"{:+.4f} [{:+.4f}, {:+.4f}]"`` or
    ``"{:.2f}×"``. For cells whose precision or shape differs by row; a column that is one plain number per row
    takes its format from the spec's ``formats`` instead (:func:`oscrepro.tables.render.cell_text`)."""

    value: float
    fmt: str = "{:.4f}"
    more: tuple[float, ...] = ()

    def text(self) -> str:
        """The cell as the .md and the csv show it."""
        return self.fmt.format(self.value, *self.more)

    def __float__(self) -> float:
        return float(self.value)

    def __str__(self) -> str:
        return self.text()


UNIT_SEP, VALUE_SEP = ";", "="


def encode_units(units: Sequence[tuple[str, float]]) -> str:
    """``units`` as one csv field, ``"<unit>=<value>;..."`` (values as ``repr``: they read back exactly)."""
    for u, _ in units:
        if UNIT_SEP in u or VALUE_SEP in u:
            raise ValueError(f"unit {u!r} holds {UNIT_SEP!r} or {VALUE_SEP!r}")
    return UNIT_SEP.join(f"{u}{VALUE_SEP}{float(v)!r}" for u, v in units)


def decode_units(text: str | None) -> tuple[tuple[str, float], ...]:
    """The inverse of :func:`encode_units` (an empty or missing field: no units)."""
    if not text:
        return ()
    return tuple((u, float(v)) for u, v in (item.rsplit(VALUE_SEP, 1) for item in text.split(UNIT_SEP)))


def unit_differences(a: Sequence[tuple[str, float]], b: Sequence[tuple[str, float]],
                     min_units: int = 1) -> list[tuple[str, float]] | None:
    """``(unit, a − b)`` per unit, in ``a``'s order, when ``a`` and ``b`` hold values of the same set of units (each
    once, at least ``min_units``); None otherwise. Two cells measured on the same runs are paired observations: the
    table's delta columns and the claims' paired t both read them through here."""
    ua, ub = dict(a), dict(b)
    if len(ua) < max(1, min_units) or set(ua) != set(ub) or len(ua) != len(a) or len(ub) != len(b):
        return None
    return [(u, ua[u] - ub[u]) for u, _ in a]


def column_format(fmt: int | str) -> str:
    """A spec's column format as a :meth:`str.format` template: digits (``2`` -> ``"{:.2f}"``), a format spec
    (``"+.4f"``, ``",d"``) or a template (``"{:.2f} %"``)."""
    if isinstance(fmt, bool) or not isinstance(fmt, (int, str)):
        raise ValueError(f"column format {fmt!r}: digits (int), a format spec ('+.4f') or a template ('{{:.2f}} %')")
    if isinstance(fmt, int):
        return f"{{:.{fmt}f}}"
    return fmt if "{" in fmt else f"{{:{fmt}}}"
