"""Verify real datasets against their published sizes and digests before a run trains on them.

A copy of WikiText-2 with ``train.txt`` cut to 100 KB used to train to ``status: ok`` (with a 3,672-word vocabulary
where 10,000 was asked for); only enwik8 was checked. Now every file of a known dataset is checked when a run
builds its data (:func:`verifying`, entered by ``oscrepro.train.build`` unless ``data.verify=false``):

* the reference is ``oscrepro/data/digests.json``: per dataset folder (``wikitext-2``, ``uea_small``, ...) the
  relative path, byte size and sha256 of every file whose digest its provider published: the SOURCE.md tables,
  MANIFEST.txt and SHA256SUMS of the shared copies, each recomputed from the file and kept only when it equals the
  published value (``python -m oscrepro.data.integrity --build <shared data dir>``);
* a file is checked when one of its parent folders is named like a dataset of the manifest and its path below that
  folder is listed; its sha256 comes from :func:`oscrepro.data.fingerprint.cached_file_digests`, cached by
  (path, size, mtime, ctime, inode, device), so a verified file is hashed once, not on every run, while a same-size
  edit with its mtime restored is hashed again (and refused); every data module verifies its files before it
  parses them (:func:`oscrepro.data.fingerprint.verify_files`), so a damaged file is never reported as a parse error;
* a mismatch raises :class:`DataIntegrityError`: which file, its size and digest against the published ones, and
  how to fix it (copy the published file again) or to train on a modified copy on purpose (``data.verify=false``:
  the run's data source then says "NOT verified", and so does every table header built from it).

Files of other folders (a user's own corpus, the tests' small fixtures) are not checked: there is nothing to
check them against.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

MANIFEST = Path(__file__).with_name("digests.json")
NOT_VERIFIED = "NOT verified against the published digests (data.verify=false)"
log = logging.getLogger("oscrepro.data")
_active = False
_manifest: dict[str, dict[str, list]] | None = None


class DataIntegrityError(ValueError):
    """A dataset file differs from the published one (size or sha256)."""


def manifest() -> dict[str, dict[str, list]]:
    """``{dataset folder: {relative path: [bytes, sha256]}}`` (loaded once)."""
    global _manifest
    if _manifest is None:
        _manifest = json.loads(MANIFEST.read_text()) if MANIFEST.exists() else {}
    return _manifest


@contextlib.contextmanager
def verifying(enabled: bool = True) -> Iterator[None]:
    """While the block runs, every file digested by :mod:`oscrepro.data.fingerprint` is checked (module docstring)."""
    global _active
    before, _active = _active, enabled
    try:
        yield
    finally:
        _active = before


def published(path: Path) -> tuple[str, str, int, str] | None:
    """``(dataset, relative path, bytes, sha256)`` of the published file ``path`` claims to be, or None."""
    parts = Path(path).resolve().parts
    table = manifest()
    for i in range(len(parts) - 2, -1, -1):  # the nearest dataset-named ancestor
        entries = table.get(parts[i])
        if entries is not None:
            rel = "/".join(parts[i + 1 :])
            if rel in entries:
                size, digest = entries[rel]
                return parts[i], rel, int(size), str(digest)
            return None
    return None


def check(path: Path, size: int, digest: str) -> None:
    """Raise :class:`DataIntegrityError` if ``path`` (``size`` bytes, sha256 ``digest``) is a known published file
    with other content; no-op outside :func:`verifying` or for files the manifest does not list."""
    if not _active:
        return
    ref = published(path)
    if ref is None or ref[3] == digest:
        return
    dataset, rel, ref_size, ref_digest = ref
    what = (f"{size:,} bytes where the published file has {ref_size:,} (truncated?)" if size < ref_size else
            f"{size:,} bytes where the published file has {ref_size:,}" if size != ref_size else
            f"the published size ({size:,} bytes) but other content")
    raise DataIntegrityError(
        f"dataset file {path} differs from the published {dataset}/{rel}: {what}; sha256 {digest[:16]}... instead "
        f"of {ref_digest[:16]}.... Copy the published file again (see its SOURCE.md, e.g. ../shared/data/{dataset}/"
        f"SOURCE.md, or the dataset's public source); to train on a modified copy on purpose, set data.verify=false "
        f"(its runs and tables are then labelled '{NOT_VERIFIED}').")


def instantiate_data(data_cfg: Any) -> tuple[Any, bool]:
    """The data module of a ``data`` config node and whether to verify it: the node without its ``verify`` key
    (which no data module takes), resolved against its root config first.

    This is how a run is rebuilt from its record (``load_run``, the analyses), and a record may come from another
    machine: a ``data_dir`` that does not exist here is the location where that machine read its copy (a location
    key, hashed as null in the run id: :data:`oscrepro.runs.record.LOCATION_KEYS`), so it is replaced by the
    default lookup, and a console line says so; the caller compares fingerprints. A ``data_dir`` that exists here
    is used, and is authoritative (:mod:`oscrepro.data.paths`). Training uses :func:`setup_data`, which never
    relocates: there an explicit ``data_dir`` that lacks the dataset is an error.
    """
    return _instantiate(data_cfg, relocate=True)


def _instantiate(data_cfg: Any, relocate: bool) -> tuple[Any, bool]:
    from hydra.utils import instantiate
    from omegaconf import DictConfig, OmegaConf

    verify = bool(data_cfg.get("verify", True))
    absent = relocate and _absent_location(data_cfg.get("data_dir"))
    if isinstance(data_cfg, DictConfig) and ("verify" in data_cfg or absent):
        plain = OmegaConf.to_container(data_cfg, resolve=True)
        plain.pop("verify", None)
        if absent:
            log.warning("data: recorded data_dir %s does not exist here: the default data roots are searched "
                        "(a location of the machine that trained the run)", plain["data_dir"])
            plain["data_dir"] = None
        data_cfg = OmegaConf.create(plain)
    return instantiate(data_cfg), verify


def _absent_location(data_dir: Any) -> bool:
    """True for a ``data_dir`` that is given but exists neither as written nor below the repository root."""
    from oscrepro.data.paths import REPO_ROOT

    if data_dir in (None, ""):
        return False
    path = Path(str(data_dir)).expanduser()
    return not path.exists() and not (not path.is_absolute() and (REPO_ROOT / path).exists())


def setup_data(data_cfg: Any) -> Any:
    """The data module of a ``data`` config node, set up for fit exactly as a training run sets it up: verified
    against the published digests unless ``verify`` is false, and then labelled :data:`NOT_VERIFIED` in its
    ``source``. Shared by training and by what must see the data as training does (parameter matching). An
    explicit ``data_dir`` is authoritative here: one that lacks the dataset is an error, whether or not it exists."""
    datamodule, verify = _instantiate(data_cfg, relocate=False)
    with verifying(verify):  # a corrupted copy of a published dataset is refused here
        datamodule.setup("fit")
    if not verify:
        datamodule.source = f"{datamodule.source} ({NOT_VERIFIED})"
    return datamodule


def build_manifest(shared: Path) -> dict[str, dict[str, list]]:
    """From the shared copies: every file whose recomputed sha256 appears in its folder's SOURCE.md, MANIFEST.txt or
    SHA256SUMS (the provider's published digests)."""
    out: dict[str, dict[str, list]] = {}
    for folder in sorted(p for p in shared.iterdir() if p.is_dir()):
        text = " ".join(f.read_text(errors="replace") for f in folder.glob("*")
                        if f.name in ("SOURCE.md", "MANIFEST.txt", "SHA256SUMS"))
        published_digests = set(re.findall(r"\b[0-9a-f]{64}\b", text))
        entries = {}
        for f in sorted(p for p in folder.rglob("*") if p.is_file()):
            if f.name in ("SOURCE.md", "MANIFEST.txt", "SHA256SUMS") or not published_digests:
                continue
            digest = hashlib.sha256(f.read_bytes()).hexdigest()
            if digest in published_digests:
                entries[f.relative_to(folder).as_posix()] = [f.stat().st_size, digest]
        if entries:
            out[folder.name] = entries
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m oscrepro.data.integrity", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", type=Path, required=True, help="the shared data folder (../shared/data)")
    args = parser.parse_args(argv)
    table = build_manifest(args.build)
    MANIFEST.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
    print(f"wrote {MANIFEST}: " + ", ".join(f"{k} ({len(v)} files)" for k, v in table.items()))


if __name__ == "__main__":
    main()
