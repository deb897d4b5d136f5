"""Writing figures: one way for every paper's plots (tight layout, parent folder created, figure closed)."""

from __future__ import annotations

from pathlib import Path

from matplotlib.figure import Figure


def save_figure(fig: Figure, path: str | Path, dpi: int = 120) -> Path:
    """Lay out, save (creating the folder) and close ``fig``; returns the path. Closing matters in table builds
    that draw many figures in one process (pyplot keeps every open figure alive)."""
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path
