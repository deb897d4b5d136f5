"""Read an offline wandb run's transaction log (``offline-run-*/run-<id>.wandb``) without the network.

wandb 0.31 writes an offline run's config only into this log (its ``files/config.yaml`` appears when the run is
synced), and ships no Python reader for it: the format is wandb's leveldb-style log (a 7-byte file header, 32 KiB
blocks of records with a 7-byte ``crc32, length, type`` header, types full/first/middle/last), each record a
``wandb_internal_pb2.Record`` protobuf.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

from wandb.proto import wandb_internal_pb2

BLOCK = 32768
HEADER = 7  # file header (":W&B", magic, version) and record header ("<IHB": crc32, length, type) alike
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def records(path: Path) -> list[wandb_internal_pb2.Record]:
    """Every record of the log at ``path``, in order."""
    data = Path(path).read_bytes()
    assert data[:4] == b":W&B", f"{path} is not a wandb transaction log"
    out, pos, chunk = [], HEADER, b""
    while pos + HEADER <= len(data):
        room = BLOCK - pos % BLOCK
        if room < HEADER:  # the block's tail is padding
            pos += room
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + HEADER])
        pos += HEADER
        chunk += data[pos : pos + length]
        pos += length
        if kind in (FULL, LAST):
            out.append(wandb_internal_pb2.Record.FromString(chunk))
            chunk = b""
    return out


def run_record(path: Path) -> dict[str, Any]:
    """The run's id, group, job type, tags and config (top-level keys, values decoded from JSON)."""
    (run,) = [r.run for r in records(path) if r.WhichOneof("record_type") == "run"]
    config = {item.key: json.loads(item.value_json) for item in run.config.update}
    return {
        "id": run.run_id,
        "group": run.run_group,
        "job_type": run.job_type,
        "tags": list(run.tags),
        "project": run.project,
        "config": config,
    }
