"""Where datasets and derived caches live on disk.

Every data module resolves its dataset folder with :func:`find_dataset` / :func:`candidate_dirs`, so one lookup
order holds for the whole framework (a laptop, a developer machine and CI see the same rules):

* an explicit ``data_dir`` argument (Hydra ``paths.data_dir`` / ``data.data_dir``) is *authoritative*: it is the
  only root searched. A dataset it lacks (an empty, partial or mistyped directory) is an error naming what is
  missing and where it looked, never a silent read of another copy (an explicit directory that lacked WikiText-2
  used to train on ``../shared/data`` and record that copy);
* without one, the *default roots*, first hit wins:

  1. the environment variable ``OSCREPRO_DATA_DIR``,
  2. ``<repo root>/data`` (repo root = the parent of the ``oscrepro`` package directory),
  3. ``<repo root>/../shared/data`` (the read-only shared copies next to the checkout).

  ``conf/paths/default.yaml`` sets ``paths.data_dir`` to ``$OSCREPRO_DATA_DIR`` when that is set, so a ``data_dir``
  equal to it counts as the default root it echoes, not as an explicit one (:func:`explicit_root`).

Each of these is a *root* that holds one folder per dataset (``<root>/<name>/...``). A folder counts as a hit only
if it exists and, when ``marker`` is given, contains that file (so an empty or half-extracted folder is skipped).
A hit that was reached only after passing over a default root the user set (``OSCREPRO_DATA_DIR``) or a root
holding an incomplete copy is a *fall-through*: :func:`fallthrough_note` logs it as one console line and returns
the text the data module appends to its ``source`` (recorded as the run's ``data_source``). Reaching
``../shared/data`` because ``<repo>/data`` has no folder of that dataset is the ordinary layout, not a fall-through.

When nothing is found the module raises :func:`missing_dataset_error`, whose message lists what is missing, every
place looked and how to supply it. Derived artefacts (feature caches, tokenizers, fingerprints) go to
:func:`cache_dir`, never into the dataset folders, which may be read-only.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from pathlib import Path

DATA_DIR_ENV = "OSCREPRO_DATA_DIR"
CACHE_DIR_ENV = "OSCREPRO_CACHE_DIR"

# <repo root> = parent of the ``oscrepro`` package directory (this file is oscrepro/data/paths.py).
REPO_ROOT: Path = Path(__file__).resolve().parents[2]

log = logging.getLogger("oscrepro.data")

# fall-through notes already on the console: a table build sets up one data module per run (18 for osciformer's
# UEA tables), and the same line 18 times hides the rest of the log; each record still keeps it in its source
_SAID: set[str] = set()


class DatasetNotFoundError(FileNotFoundError):
    """A dataset is neither on disk nor obtainable (offline / download disabled)."""


def _absolute(path: str | os.PathLike[str]) -> Path:
    """``path`` made absolute (``~`` expanded, ``..`` folded) without resolving links, for comparing roots."""
    return Path(os.path.abspath(Path(os.fspath(path)).expanduser()))


def explicit_root(data_dir: str | os.PathLike[str] | None) -> Path | None:
    """The explicit root ``data_dir`` names, or ``None`` when none was given (``None``/``""``) or when it only
    echoes ``$OSCREPRO_DATA_DIR`` (the default of ``paths.data_dir``, conf/paths/default.yaml): the same directory
    set by the environment is the first default root, not an explicit choice."""
    if data_dir in (None, ""):
        return None
    path = Path(os.fspath(data_dir)).expanduser()
    env = os.environ.get(DATA_DIR_ENV)
    if env and _absolute(env) == _absolute(path):
        return None
    return path


def default_roots() -> list[Path]:
    """``$OSCREPRO_DATA_DIR`` (when set), ``<repo>/data``, ``<repo>/../shared/data``: the roots searched without an
    explicit ``data_dir``, in priority order (duplicates removed, missing ones kept)."""
    roots: list[Path] = []
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


def search_roots(data_dir: str | os.PathLike[str] | None = None) -> list[Path]:
    """The roots :func:`find_dataset` searches, in priority order: the explicit ``data_dir`` alone when one is
    given (it is authoritative: module docstring), else :func:`default_roots`. Missing roots are kept so that error
    messages can list them; ``find_dataset`` simply finds nothing there."""
    explicit = explicit_root(data_dir)
    return [explicit] if explicit is not None else default_roots()


def candidate_dirs(name: str, data_dir: str | os.PathLike[str] | None = None) -> list[Path]:
    """``<root>/<name>`` for every search root, in lookup order (what an error message reports)."""
    return [root / name for root in search_roots(data_dir)]


def find_dataset(name: str, data_dir: str | os.PathLike[str] | None = None, marker: str | None = None) -> Path | None:
    """First existing ``<root>/<name>`` (containing ``marker`` if given) in lookup order, else ``None``.

    Args:
        name: dataset folder name, e.g. ``"speech_commands"`` or ``"wikitext-2"``.
        data_dir: explicit root, the only one searched when given (``None``/``""`` = not given).
        marker: a file (relative path) that must exist inside the folder for it to count.
    """
    for cand in candidate_dirs(name, data_dir):
        if cand.is_dir() and (marker is None or (cand / marker).exists()):
            return cand
    return None


def fallthrough_note(name: str, found: Path, data_dir: str | os.PathLike[str] | None = None,
                     partial: Iterable[Path] | None = None) -> str:
    """Say a fall-through between the default roots (module docstring): ``""`` when there was none, else one
    warning line on the console (logger ``oscrepro.data``; once per process for the same fall-through) and
    ``"; <what was passed over>"`` for the data module to append to its ``source``, so the run record says which
    copy it read and why (every run's, though the console says it once).

    Args:
        name: the dataset as its folder names it (``"wikitext-2"``, ``"event_seq_tpp/rmtpp_raw/so"``).
        found: the folder or file that was used.
        data_dir: the module's ``data_dir``; an explicit one is the only root searched, so nothing falls through.
        partial: the places, earlier in lookup order than ``found``, that hold part of the dataset (a module with
            its own notion of complete passes them); default: every ``<root>/<name>`` folder that exists under a
            root before ``found``'s (it was passed over: it lacked the files).
    """
    if explicit_root(data_dir) is not None:
        return ""
    roots = default_roots()
    where = _absolute(found)
    index = next((i for i, r in enumerate(roots) if where.is_relative_to(_absolute(r))), len(roots))
    earlier = roots[:index]
    partial = [r / name for r in earlier if (r / name).exists()] if partial is None else list(partial)
    passed = [f"{p} (incomplete: passed over)" for p in partial]
    env = os.environ.get(DATA_DIR_ENV)
    if env and any(_absolute(r) == _absolute(env) for r in earlier) and not any(
            _absolute(p).is_relative_to(_absolute(env)) for p in partial):
        passed.insert(0, f"${DATA_DIR_ENV}={env} (has no {name})")
    if not passed:
        return ""
    root = roots[index] if index < len(roots) else found.parent
    note = f"{name} fell through to {root} after {'; '.join(passed)}"
    if note not in _SAID:  # once per process and fall-through (the returned note goes into every run's source)
        _SAID.add(note)
        log.warning("data: %s", note)
    return f"; {note}"


def download_root(data_dir: str | os.PathLike[str] | None = None) -> Path:
    """Root a download writes into: ``data_dir`` if given, else ``$OSCREPRO_DATA_DIR``, else ``<repo>/data``.

    It is the first root searched, so a downloaded dataset is found by the next ``find_dataset``.
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
        f"data.data_dir=D; an explicit data_dir is the only root searched, so it must hold the dataset),\n"
        f"  - or export {DATA_DIR_ENV}=D,\n"
        f"  - or place it at {REPO_ROOT / 'data' / name}.\n"
        f"{how_to_supply.rstrip()}"
    )
    return DatasetNotFoundError(msg)
