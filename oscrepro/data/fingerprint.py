"""Content fingerprints of dataset source files, for run records and cache keys.

``fingerprint_files(paths)`` = first 16 hex digits of

    sha256( for each file in sorted(relative name):  name + "\\0" + sha256(content) + "\\n" )

i.e. a hash over the sorted relative names and the contents (through each file's own sha256, so that a file's
digest can be cached). Names are taken relative to ``root`` (default: the common parent directory of the files),
so the same dataset copied to another place has the same fingerprint, while renaming, adding, removing or
editing any file changes it.

Per-file digests are cached by ``(absolute path, size, mtime_ns)``: in memory for the process and in a JSON file
under :func:`oscrepro.data.paths.cache_dir` across processes, so that a 10 MB corpus (or 1,500 wavs) is hashed
once, not on every run. A file whose size or mtime changed is rehashed. Inside
:func:`oscrepro.data.integrity.verifying` every digest is also checked against the published one.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

from oscrepro.data.integrity import check as check_published
from oscrepro.data.paths import cache_dir

FINGERPRINT_HEX = 16
_CHUNK = 1 << 20
_CACHE_NAME = "file_sha256.json"

_memory: dict[str, tuple[int, int, str]] = {}  # abs path -> (size, mtime_ns, sha256 hex)


def _cache_file(override: str | os.PathLike[str] | None) -> Path:
    return cache_dir("fingerprints", override) / _CACHE_NAME


def _load_disk_cache(path: Path) -> dict[str, list]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _store_disk_cache(path: Path, entries: dict[str, list]) -> None:
    """Atomic write (tmp + rename): concurrent runs never read a half-written cache."""
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".fp_", suffix=".json")
        with os.fdopen(fd, "w") as f:
            json.dump(entries, f)
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only cache dir only costs rehashing next time


def file_sha256(path: Path) -> str:
    """sha256 hex digest of one file's content (streamed in 1 MiB chunks)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def cached_file_digests(paths: list[Path], cache_override: str | os.PathLike[str] | None = None) -> list[str]:
    """sha256 of each file, reusing digests whose (path, size, mtime_ns) is unchanged."""
    disk_path = _cache_file(cache_override)
    disk: dict[str, list] | None = None
    dirty = False
    out: list[str] = []
    for p in paths:
        ap = str(Path(p).resolve())
        st = os.stat(ap)
        key = (st.st_size, st.st_mtime_ns)
        hit = _memory.get(ap)
        if hit is None or hit[:2] != key:
            if disk is None:
                disk = _load_disk_cache(disk_path)
            entry = disk.get(ap)
            if entry is not None and tuple(entry[:2]) == key:
                hit = (key[0], key[1], entry[2])
            else:
                hit = (key[0], key[1], file_sha256(Path(ap)))
                disk[ap] = list(hit)
                dirty = True
            _memory[ap] = hit
        check_published(Path(ap), hit[0], hit[2])  # inside integrity.verifying(): refuse a corrupted copy
        out.append(hit[2])
    if dirty and disk is not None:
        _store_disk_cache(disk_path, disk)
    return out


def fingerprint_files(
    paths: list[Path], root: Path | None = None, cache_override: str | os.PathLike[str] | None = None
) -> str:
    """16-hex sha256 over the sorted relative names and contents of ``paths`` (see module docstring).

    Args:
        paths: the dataset's source files (order does not matter; duplicates are an error).
        root: names are taken relative to it; default = common parent directory of all files.
        cache_override: cache directory for the per-file digest cache (default: ``paths.cache_dir()``).
    """
    if not paths:
        raise ValueError("fingerprint_files needs at least one file")
    abs_paths = [Path(p).resolve() for p in paths]
    if root is None:
        root = Path(os.path.commonpath([str(p.parent) for p in abs_paths]))
    names = [p.relative_to(Path(root).resolve()).as_posix() for p in abs_paths]
    if len(set(names)) != len(names):
        raise ValueError("fingerprint_files got the same file twice")
    digests = cached_file_digests(abs_paths, cache_override)
    h = hashlib.sha256()
    for name, digest in sorted(zip(names, digests, strict=True)):
        h.update(name.encode("utf-8") + b"\0" + digest.encode("ascii") + b"\n")
    return h.hexdigest()[:FINGERPRINT_HEX]


def fingerprint_params(**params: object) -> str:
    """16-hex sha256 of keyword parameters (sorted JSON) — the front-end / tokenizer half of a cache key."""
    blob = json.dumps(params, sort_keys=True, default=str).encode("utf-8")
    return hashlib.sha256(blob).hexdigest()[:FINGERPRINT_HEX]
