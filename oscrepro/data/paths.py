"""Where datasets and derived caches live on disk.

Every data module resolves its dataset folder with :func:`find_dataset`, so one lookup order holds for the whole
framework (a laptop, a developer machine and CI see the same rules):

1. the explicit ``data_dir`` argument (Hydra ``paths.data_dir`` / ``data.data_dir``),
2. the environment variable ``OSCREPRO_DATA_DIR``,
3. ``<repo root>/data`` (repo root = the parent of the ``oscrepro`` package directory),
4. ``<repo root>/../shared/data`` (the read-only shared copies next to the checkout).

Each of these is a *root* that holds one folder per dataset (``<root>/<name>/...``). A folder counts as a hit only
if it exists and, when ``marker`` is given, contains that file (so an empty or half-extracted folder is skipped).

When nothing is found the module raises :func:`missing_dataset_error`, whose message lists what is missing, every
place looked and how to supply it. Derived artefacts (feature caches, tokenizers, fingerprints) go to
:func:`cache_dir`, never into the dataset folders, which may be read-only.
"""

from __future__ import annotations

import os
from pathlib import Path

DATA_DIR_ENV = "OSCREPRO_DATA_DIR"
CACHE_DIR_ENV = "OSCREPRO_CACHE_DIR"

# <repo root> = parent of the ``oscrepro`` package directory (this file is oscrepro/data/paths.py).
REPO_ROOT: Path = Path(__file__).resolve().parents[2]


class DatasetNotFoundError(FileNotFoundError):
    """A dataset is neither on disk nor obtainable (offline / download disabled)."""


def search_roots(data_dir: str | os.PathLike[str] | None = None) -> list[Path]:
    """The roots :func:`find_dataset` searches, in priority order (duplicates removed, missing ones kept).

    Missing roots are kept so that error messages can list them; ``find_dataset`` simply finds nothing there.
    """
    roots: list[Path] = []
    if data_dir not in (None, ""):
        roots.append(Path(os.fspath(data_dir)).expanduser())
    env = os.environ.get(DATA_DIR_ENV)
    if env:
        roots.append(Path(env).expanduser())
    roots.append(REPO_ROOT / "data")
    roots.append(REPO_ROOT.parent / "shared" / "data")
    unique: list[Path] = []
    for r in roots:
        if r not in unique:
            unique.append(r)
    return unique


def candidate_dirs(name: str, data_dir: str | os.PathLike[str] | None = None) -> list[Path]:
    """``<root>/<name>`` for every search root, in lookup order (what an error message reports)."""
    return [root / name for root in search_roots(data_dir)]


def find_dataset(name: str, data_dir: str | os.PathLike[str] | None = None, marker: str | None = None) -> Path | None:
    """First existing ``<root>/<name>`` (containing ``marker`` if given) in lookup order, else ``None``.

    Args:
        name: dataset folder name, e.g. ``"speech_commands"`` or ``"wikitext-2"``.
        data_dir: explicit root that takes priority over everything else (``None``/``""`` = not given).
        marker: a file (relative path) that must exist inside the folder for it to count.
    """
    for cand in candidate_dirs(name, data_dir):
        if cand.is_dir() and (marker is None or (cand / marker).exists()):
            return cand
    return None


def download_root(data_dir: str | os.PathLike[str] | None = None) -> Path:
    """Root a download writes into: ``data_dir`` if given, else ``$OSCREPRO_DATA_DIR``, else ``<repo>/data``.

    ``<repo>/data`` is the third lookup root, so a downloaded dataset is found by the next ``find_dataset``.
    """
    return search_roots(data_dir)[0]


def cache_dir(sub: str = "", override: str | os.PathLike[str] | None = None) -> Path:
    """Directory for derived artefacts (created): ``override`` > ``$OSCREPRO_CACHE_DIR`` > ``~/.cache/oscrepro``.

    Kept outside the repository so caches never show up as untracked files and survive a fresh work tree.
    """
    if override not in (None, ""):
        base = Path(os.fspath(override)).expanduser()
    elif os.environ.get(CACHE_DIR_ENV):
        base = Path(os.environ[CACHE_DIR_ENV]).expanduser()
    else:
        base = Path.home() / ".cache" / "oscrepro"
    path = base / sub if sub else base
    path.mkdir(parents=True, exist_ok=True)
    return path


def missing_dataset_error(name: str, looked_in: list[Path], how_to_supply: str) -> DatasetNotFoundError:
    """Build (not raise) the error for a dataset that is not on disk.

    The message says what is missing, lists every place looked, and how to supply the data: the explicit
    ``data_dir``, the ``OSCREPRO_DATA_DIR`` variable, and the dataset-specific ``how_to_supply`` text
    (download command / URL / hub name).
    """
    places = "\n".join(f"  - {p}{'' if p.exists() else '  (does not exist)'}" for p in looked_in) or "  (none)"
    msg = (
        f"Dataset '{name}' not found.\n"
        f"Looked in (in this order):\n{places}\n"
        f"How to supply it:\n"
        f"  - put the folder '{name}' under a directory D and pass data_dir=D (Hydra: paths.data_dir=D or "
        f"data.data_dir=D),\n"
        f"  - or export {DATA_DIR_ENV}=D,\n"
        f"  - or place it at {REPO_ROOT / 'data' / name}.\n"
        f"{how_to_supply.rstrip()}"
    )
    return DatasetNotFoundError(msg)
