"""Content fingerprints of dataset source files, for run records and cache keys.

``fingerprint_files(paths)`` = first 16 hex digits of

    sha256( for each file in sorted(relative name):  name + "\\0" + sha256(content) + "\\n" )

i.e. a hash over the sorted relative names and the contents (through each file's own sha256, so that a file's
digest can be cached). Names are taken relative to ``root`` (default: the common parent directory of the files),
so the same dataset copied to another place has the same fingerprint, while renaming, adding, removing or
editing any file changes it.

Per-file digests are cached by the file's identity and change times, ``(absolute path, size, mtime_ns,
ctime_ns, inode, device)``: in memory for the process and in a JSON file under
:func:`oscrepro.data.paths.cache_dir` across processes, so that a 10 MB corpus (or 1,500 wavs) is hashed once, not
on every run. The key used to be ``(path, size, mtime_ns)``, which a same-size edit followed by ``os.utime``
(restoring the mtime) keeps: an altered WikiText-2 ``train.txt`` then trained ``ok`` under the clean digest. A
write, a ``utime`` call, a rename or a copy over the file sets its ctime to the current time, and ctime cannot be
set by a user; replacing the file changes its inode. So any content change gives a new key and a rehash.

A key is trusted only when it could not have been reused by a later change: file timestamps are coarse (a clock
tick of a few ms), so two same-size writes within one tick can leave an identical key. A digest whose file
changed less than :data:`RACY_NS` before it was read is therefore used once and not cached (the "racy" rule git
applies to its index): the next run hashes that file again. The key costs nothing over the old one (the same
``stat``). Measured here (2 shared CPU cores, page cache warm), ``fingerprint_files`` inside ``verifying()``:
speech_commands (the largest shared dataset, 1,505 files, 48 MB) 190-580 ms hashing everything vs 140-250 ms from
the cache (per-file stat and manifest lookup dominate); event_seq_tpp (42 files, 47 MB) 48 ms vs 6 ms.

Every file is stat'ed before it is read: a missing file or a directory in its place is a
:class:`~oscrepro.data.paths.DatasetNotFoundError` naming it (not a traceback from the parser). Inside
:func:`oscrepro.data.integrity.verifying` every digest is also checked against the published one;
:func:`verify_files` does that before a data module parses its files, so a corrupted copy is reported as such,
never as a parse error.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

from oscrepro.data.integrity import check as check_published
from oscrepro.data.paths import DatasetNotFoundError, cache_dir

FINGERPRINT_HEX = 16
RACY_NS = 2 * 10**9  # a file changed less than 2 s before it was read: its digest is not cached (module docstring)
_CHUNK = 1 << 20
_CACHE_NAME = "file_sha256.v2.json"  # v2: keyed by (size, mtime, ctime, inode, device); v1 files are ignored

Key = tuple[int, int, int, int, int]  # (size, mtime_ns, ctime_ns, inode, device)
_memory: dict[str, tuple[Key, str]] = {}  # abs path -> (key, sha256 hex)


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


def file_key(path: Path) -> Key:
    """The cache key of one dataset file: ``(size, mtime_ns, ctime_ns, inode, device)``, from one ``stat``.

    Raises :class:`~oscrepro.data.paths.DatasetNotFoundError` naming the path when it is missing or not a regular
    file (a directory in place of ``train.txt``), before any reader opens it.
    """
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise DatasetNotFoundError(
            f"dataset file {path} does not exist: copy the dataset again (every file of it) or point data_dir at a "
            f"complete copy") from None
    if not stat.S_ISREG(st.st_mode):
        kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
        raise DatasetNotFoundError(
            f"dataset file {path} is {kind}, not a file: replace it with the dataset's file of that name (copy the "
            f"dataset again) or point data_dir at a complete copy")
    return st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev


def cached_file_digests(paths: list[Path], cache_override: str | os.PathLike[str] | None = None) -> list[str]:
    """sha256 of each file, reusing a cached digest only while the file's key (:func:`file_key`) is unchanged;
    inside :func:`oscrepro.data.integrity.verifying` each digest is checked against the published one."""
    disk_path = _cache_file(cache_override)
    disk: dict[str, list] | None = None
    dirty = False
    out: list[str] = []
    for p in paths:
        ap = str(Path(p).resolve())
        key = file_key(Path(ap))
        hit = _memory.get(ap)
        digest = hit[1] if hit is not None and hit[0] == key else None
        if digest is None:
            if disk is None:
                disk = _load_disk_cache(disk_path)
            entry = disk.get(ap)
            if entry is not None and tuple(entry[:-1]) == key:
                digest = str(entry[-1])
                _memory[ap] = (key, digest)
            else:
                read_at = time.time_ns()
                digest = file_sha256(Path(ap))
                if read_at - key[2] >= RACY_NS:  # else changed just before: used now, not cached (module docstring)
                    _memory[ap] = (key, digest)
                    disk[ap] = [*key, digest]
                    dirty = True
        check_published(Path(ap), key[0], digest)  # inside integrity.verifying(): refuse a corrupted copy
        out.append(digest)
    if dirty and disk is not None:
        _store_disk_cache(disk_path, disk)
    return out


def verify_files(paths: Iterable[Path], cache_override: str | os.PathLike[str] | None = None) -> None:
    """Check every file before a data module parses it: present and a regular file (else
    :class:`~oscrepro.data.paths.DatasetNotFoundError`), and, inside :func:`oscrepro.data.integrity.verifying`,
    equal to the published file (else :class:`~oscrepro.data.integrity.DataIntegrityError`). A damaged copy is
    then reported as damaged, not as whatever error its parser raises; the digests are cached, so the fingerprint
    taken afterwards costs no second read."""
    cached_file_digests([Path(p) for p in paths], cache_override)


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
