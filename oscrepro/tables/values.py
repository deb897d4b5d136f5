"""Typed cell values for analysis tables: a statistic over seeds carries its numbers, not only its rendering.

An analysis adapter (``kind: analysis`` specs, a function returning ``(columns, rows, notes)``) used to put
``f"{mean:.1f} ± {std:.1f}"`` into a cell; the claims engine then had only the rendered text and read it as one
value (n = 1). A :class:`SeedStat` keeps mean, sample std and n apart: the renderer
(:func:`oscrepro.tables.render.render_analysis_table`) prints it in the .md exactly as the adapters printed it, and
writes its numbers to the csv (``<column>``, ``<column>__std``, ``<column>__n``), which the claims engine reads.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

STAT_FIELDS = ("std", "n", "flags")  # a SeedStat column's numeric columns in a csv: <column>__<field>


@dataclass(frozen=True)
class SeedStat:
    """Mean, sample standard deviation (ddof = 1; nan below two seeds) and count of a quantity over seeds.

    ``digits``, ``show_n`` and ``flags`` only say how the .md shows it: ``27.6 ± 2.8``, one seed ``27.6``, with
    ``show_n`` ``27.6 ± 2.8 (n=3)``, with flags ``… [diverged 1]``; no seed at all renders "—".
    """

    mean: float
    std: float
    n: int
    digits: int = 4
    show_n: bool = False
    flags: tuple[str, ...] = ()

    @classmethod
    def of(cls, values: Sequence[float], digits: int, show_n: bool = False,
           flags: Sequence[str] = ()) -> SeedStat:
        """The statistic of one value per seed (the seeds' order does not matter)."""
        v = np.asarray(values, dtype=float)
        mean = float(v.mean()) if len(v) else math.nan
        std = float(v.std(ddof=1)) if len(v) > 1 else math.nan
        return cls(mean, std, len(v), digits, show_n, tuple(flags))

    def text(self) -> str:
        """The rendering of the .md cell (byte-identical to the adapters' former f-strings)."""
        if self.n == 0:
            text = "—"
        else:
            text = f"{self.mean:.{self.digits}f}"
            if self.n > 1:
                text += f" ± {self.std:.{self.digits}f}"
            if self.show_n:
                text += f" (n={self.n})"
        return text + (f" [{', '.join(self.flags)}]" if self.flags else "")

    def __str__(self) -> str:
        return self.text()
