"""Census of bad inputs (issue 31): try each one as a hostile user would and classify what happened.

    .venv/bin/python scripts/bad_inputs_census.py --out results/bad_inputs.md     # every case, a pool of 2
    .venv/bin/python scripts/bad_inputs_census.py --out /tmp/c.md --only 'seed|lr'  # a subset (regex on names)
    .venv/bin/python scripts/bad_inputs_census.py --list                           # the cases, nothing run

Each case is a shell-free command line (``python -m oscrepro.train ...`` or ``python -m oscrepro.table ...``), an
optional setup that prepares the case's own temp tree (a dataset copy, a planted checkpoint, a corrupted file, a
read-only dir) and what the right outcome is (:class:`Expect`). Every case runs in its own temp dir: its results
dir (``paths.results_dir`` / ``--results-dir``), its Hydra output dirs (``hydra.run.dir`` / ``hydra.sweep.dir``,
outside the results dir) and its data dir; the repo's results/ is never written. Derived caches go to one temp
cache dir per census (``OSCREPRO_CACHE_DIR``).

What happened is read from the process and the files (:func:`observe`): the exit code, whether the output holds a
Python traceback, the message (output lines that are not progress or INFO logging), the files created or changed
under the results dir, the run records and their status, ``*.tmp`` litter, and the numbers of every ``ok`` record
(a non-finite metric, 0 epochs, a case whose ``ok`` would state something false). :func:`classify` turns that
and the case's expectation into one category (:data:`CATEGORIES`). The report (``--out``) is a markdown table:
counts per category, then case, issue item, command, exit, message, what was written, category.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import csv
import dataclasses
import datetime
import json
import math
import os
import pickle
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data"
PY = sys.executable

# Categories, best first. "refused cleanly": the right outcome (a one-message refusal with nothing written, or the
# run-time record the case expects); "worked": a case that must work did.
CATEGORIES = ("refused cleanly", "worked", "refused, other reason", "recorded failed", "refused with traceback",
              "wrongly refused", "silently accepted", "wrong record", "code ran", "timed out", "setup failed")
TRACEBACK = "Traceback (most recent call last)"
# Output lines that are progress or INFO logging, not the message (Hydra's log format, the table engine's progress)
NOISE = [re.compile(p) for p in (
    r"^\[\d{4}-\d\d-\d\d [\d:,]+\]\[[^\]]+\]\[(INFO|DEBUG)\]",
    r"^\[table [^\]]+\] (budget=|\d+/\d+ runs|wrote |\d+ worker|submitit)",
    r"^(GPU|TPU|HPU|IPU) available", r"^Seed set to", r"^LOCAL_RANK", r"^💡",
)]


@dataclasses.dataclass(frozen=True)
class Expect:
    """The right outcome of a case.

    ``refuse``: non-zero exit, no traceback, nothing written under the results dir (and ``say``, a regex, found in
    the message). ``record``: a run-time outcome: run records whose statuses are all in ``statuses`` (``say``
    found in their reasons), exit code non-zero when ``nonzero`` (zero when False, either when None), no litter.
    ``work``: exit 0, no traceback, an ``ok`` record or a table written.
    """

    kind: str = "refuse"
    say: str | None = None
    statuses: frozenset[str] = frozenset()
    nonzero: bool | None = True

    def label(self) -> str:
        """Short text for the report's "expected" column."""
        if self.kind == "record":
            code = {True: ", exit≠0", False: ", exit 0", None: ""}[self.nonzero]
            return f"{'/'.join(sorted(self.statuses))} record{code}"
        return self.kind


REFUSE = Expect()


@dataclasses.dataclass
class Dirs:
    """One case's temp tree: ``root`` holds ``results`` (the results dir), ``data``, ``hydra``, ``sweep``."""

    root: Path
    results: Path
    cache: Path

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def hydra(self) -> Path:
        return self.root / "hydra"

    @property
    def sweep(self) -> Path:
        return self.root / "sweep"


Setup = Callable[[Dirs], None]
Check = Callable[[Dirs, "Observed"], list[str]]


@dataclasses.dataclass
class Case:
    """A bad input: ``argv`` (placeholders ``{py}``, ``{results}``, ``{data}``, ``{root}``, ``{hydra}``, ``{sweep}``,
    ``{repo}``, replaced per case), the issue item it belongs to, how to prepare it and what is right.

    ``check``: extra problems of what was written (a table header that lies, a record that hides a fall-through);
    any makes the case a ``wrong record``. ``ok_is_wrong``: an ``ok`` record of this case states something false
    (another run's checkpoint, altered data). ``fsize``: RLIMIT_FSIZE in bytes for the command (an I/O error in the
    middle of a run). ``results_name``: the results dir's name inside the case's root.
    """

    name: str
    item: str
    argv: list[str]
    expect: Expect = REFUSE
    show: str = ""
    setup: Setup | None = None
    teardown: Setup | None = None
    check: Check | None = None
    ok_is_wrong: bool = False
    env: dict[str, str] = dataclasses.field(default_factory=dict)
    fsize: int | None = None
    results_name: str = "results"
    cost: float = 8.0  # seconds, roughly: the pool starts the costly cases first
    timeout: float = 300.0


@dataclasses.dataclass
class Observed:
    """What one command did (see :func:`observe`)."""

    exit: int | None
    seconds: float
    output: str
    traceback: bool
    message: list[str]
    written: list[str]
    records: dict[str, str]  # run dir (relative) -> status, for records created or changed
    reasons: dict[str, str]  # run dir -> the record's reason
    litter: list[str]
    problems: list[str]
    code_ran: bool = False
    timed_out: bool = False


@dataclasses.dataclass
class Result:
    case: Case
    observed: Observed | None
    category: str
    note: str = ""


# -- command lines ------------------------------------------------------------------------------------------------

SVA = ["experiment=fqo/sva", "budget=smoke", "trainer.max_epochs=1", "trainer.limit_train_batches=2"]
WT2 = ["experiment=fqo/lm_wikitext2", "budget=smoke", "trainer.limit_train_batches=2", "paths.data_dir={data}"]
UEA = ["experiment=osciformer/uea", "budget=smoke", "data.standin=Epilepsy", "data.time_stride=4",
       "trainer.limit_train_batches=1", "paths.data_dir={data}"]
TPP = ["experiment=osciformer/tpp", "budget=smoke", "data=tpp_stackoverflow", "data.name=stackoverflow_nhp",
       "trainer.limit_train_batches=1", "paths.data_dir={data}"]
BASES = {"sva": SVA, "wt2": WT2, "uea": UEA, "tpp": TPP, "none": []}
TRAIN_DIRS = ["paths.results_dir={results}", "hydra.run.dir={hydra}", "hydra.sweep.dir={sweep}"]


def train(*overrides: str, base: str = "sva", results: bool = True) -> tuple[list[str], str]:
    """``python -m oscrepro.train`` on a base config (:data:`BASES`) with ``overrides``; (argv, shown command)."""
    dirs = TRAIN_DIRS if results else TRAIN_DIRS[1:]
    argv = ["{py}", "-m", "oscrepro.train", *[o for o in overrides if o == "-m"], *BASES[base],
            *[o for o in overrides if o != "-m"], *dirs]
    return argv, f"train[{base}] " + " ".join(overrides)


def table(*args: str, results: bool = True) -> tuple[list[str], str]:
    """``python -m oscrepro.table`` with ``args`` (``--results-dir {results}`` added); (argv, shown command)."""
    argv = ["{py}", "-m", "oscrepro.table", *args, *(["--results-dir", "{results}"] if results else [])]
    return argv, "table " + " ".join(args)


def case(name: str, item: str, cmd: tuple[list[str], str], expect: Expect = REFUSE, **kw: Any) -> Case:
    """A :class:`Case` from a :func:`train` / :func:`table` command."""
    return Case(name=name, item=item, argv=cmd[0], show=cmd[1], expect=expect, **kw)


# -- setups -------------------------------------------------------------------------------------------------------

def copy_files(src: Path, dst: Path, names: list[str] | None = None) -> None:
    """Copy ``names`` (default: every file) of the folder ``src`` into ``dst``, writable (the shared copy is
    read-only)."""
    dst.mkdir(parents=True, exist_ok=True)
    for p in sorted(src.iterdir()) if names is None else [src / n for n in names]:
        if p.is_file():
            shutil.copyfile(p, dst / p.name)
            os.chmod(dst / p.name, 0o644)


def wikitext(d: Dirs) -> Path:
    """A writable copy of the published WikiText-2 in the case's data dir."""
    dst = d.data / "wikitext-2"
    copy_files(SHARED / "wikitext-2", dst)
    return dst


def uea(d: Dirs) -> Path:
    """The published Epilepsy TRAIN/TEST .ts files in ``<data>/uea_small``."""
    dst = d.data / "uea_small"
    copy_files(SHARED / "uea_small", dst, ["Epilepsy_TRAIN.ts", "Epilepsy_TEST.ts"])
    return dst


def nhp(d: Dirs) -> Path:
    """The published NHP StackOverflow subset (fold 1 pickles) in the case's data dir."""
    sub = Path("event_seq_tpp/nhp_format/data_so_nhp_subset/fold1")
    copy_files(SHARED / sub, d.data / sub)
    return d.data / sub


def same_size_alteration(path: Path, at: float = 0.5) -> None:
    """Change one letter or digit of ``path`` in place (same size, still parses), then restore its atime and
    mtime: what a cache keyed by (size, mtime) cannot see."""
    st = os.stat(path)
    with open(path, "r+b") as f:
        f.seek(int(st.st_size * at))
        chunk = f.read(4096)
        i = next(k for k, b in enumerate(chunk) if chr(b).isalnum())
        old = chr(chunk[i])
        new = str((int(old) + 1) % 10) if old.isdigit() else ("z" if old == "q" else "q")
        f.seek(int(st.st_size * at) + i)
        f.write(new.encode())
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def truncate(path: Path, keep: float = 0.5) -> None:
    path.write_bytes(path.read_bytes()[: int(path.stat().st_size * keep)])


def primed_then_altered(d: Dirs) -> None:
    """A clean WikiText-2 copy whose digests are in the census cache (as after a run on it), then a same-size
    alteration of train.txt with its mtime restored: a cache keyed by (size, mtime) would trust the old digest."""
    from oscrepro.data.fingerprint import cached_file_digests

    dst = wikitext(d)
    files = [dst / n for n in ("train.txt", "valid.txt", "test.txt")]
    time.sleep(2.2)  # a file changed < 2 s ago is hashed but not cached (fingerprint.RACY_NS): let the copy age
    cached_file_digests(files, d.cache)
    same_size_alteration(dst / "train.txt")


def read_only(path: Path) -> None:
    """Make ``path`` (a dir) unwritable, for root too: ``chattr +i`` as root (a mode does not stop root)."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        subprocess.run(["chattr", "+i", str(path)], check=True, capture_output=True)
    else:
        path.chmod(0o555)


def writable_again(path: Path) -> None:
    if os.geteuid() == 0:
        subprocess.run(["chattr", "-i", str(path)], check=False, capture_output=True)
    path.chmod(0o755)


class RunsTemplate:
    """Two finished SVA runs (seed 0 and seed 1, same shapes), trained once per census and copied into each
    checkpoint case; built by the first case that needs it (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.root: Path | None = None
        self.results: Path | None = None
        self.runs: dict[str, Path] = {}

    def get(self, census: Path, cache: Path) -> dict[str, Path]:
        with self._lock:
            if self.root is None:
                root = census / "_template"
                for seed in ("0", "1"):
                    argv = [PY, "-m", "oscrepro.train", *SVA, f"seed={seed}", f"paths.results_dir={root / 'results'}",
                            f"hydra.run.dir={root / 'hydra' / seed}"]
                    before = set((root / "results").rglob("status.json"))
                    proc = subprocess.run(argv, cwd=REPO, env=case_env({}, cache), capture_output=True, text=True,
                                          timeout=300)
                    new = sorted(set((root / "results").rglob("status.json")) - before)
                    if proc.returncode != 0 or len(new) != 1:
                        raise RuntimeError(f"template run seed={seed} failed (exit {proc.returncode}): "
                                           f"{proc.stderr.strip()[-400:]}")
                    self.runs[seed] = new[0].parent
                self.root, self.results = root, root / "results"
            return dict(self.runs)


TEMPLATE = RunsTemplate()
CENSUS: dict[str, Path] = {}  # "root", "cache": set by run_census


def interrupted_run(d: Dirs) -> Path:
    """The seed-0 SVA run copied into the case's results dir as a killed run leaves it: status ``running``, its
    epoch checkpoint, no metrics; ``last.ckpt`` made a plain file (the setups replace it)."""
    runs = TEMPLATE.get(CENSUS["root"], CENSUS["cache"])
    src = runs["0"]
    dst = d.results / src.relative_to(TEMPLATE.results)
    shutil.copytree(src, dst, symlinks=True)
    for name in ("metrics.json", "history.csv"):
        (dst / name).unlink(missing_ok=True)
    status = json.loads((dst / "status.json").read_text())
    status["status"] = "running"
    (dst / "status.json").write_text(json.dumps(status, indent=2))
    last = dst / "checkpoints" / "last.ckpt"
    target = last.resolve()
    last.unlink()
    shutil.copyfile(target, last)
    return last


def planted_other_run(d: Dirs) -> None:
    last = interrupted_run(d)
    other = TEMPLATE.get(CENSUS["root"], CENSUS["cache"])["1"] / "checkpoints" / "last.ckpt"
    shutil.copyfile(other.resolve(), last)


def garbage_checkpoint(d: Dirs) -> None:
    interrupted_run(d).write_bytes(os.urandom(4096))


def truncated_checkpoint(d: Dirs) -> None:
    truncate(interrupted_run(d), 0.6)


class Payload:
    """Unpickling it runs ``touch <marker>``: a checkpoint that would run code."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, tuple[str, ...]]:
        return os.system, (f"touch '{self.marker}'",)


def marker(d: Dirs) -> Path:
    return d.root / "PLANTED_CODE_RAN"


def pickle_checkpoint(d: Dirs) -> None:
    """A raw pickle as last.ckpt (any unsafe loader runs it: torch's legacy format unpickles its first object)."""
    interrupted_run(d).write_bytes(pickle.dumps(Payload(marker(d)), protocol=2))


def torch_pickle_checkpoint(d: Dirs) -> None:
    """A torch zip checkpoint whose data.pkl runs code when loaded without ``weights_only``."""
    import torch

    last = interrupted_run(d)
    ckpt = torch.load(last, map_location="cpu", weights_only=True)
    ckpt["callbacks"] = {"evil": Payload(marker(d))}
    torch.save(ckpt, last)


def malicious_event_pickle(d: Dirs) -> None:
    """The NHP subset with train.pkl replaced by a pickle that runs code (must be refused before unpickling)."""
    folder = nhp(d)
    (folder / "train.pkl").write_bytes(pickle.dumps({"train": [], "evil": Payload(marker(d))}, protocol=2))


def data_dir_file(d: Dirs) -> None:
    d.data.parent.mkdir(parents=True, exist_ok=True)
    d.data.write_text("not a directory\n")


# -- checks of what was written -----------------------------------------------------------------------------------

def header_lies_about_seed(d: Dirs, obs: Observed) -> list[str]:
    """A table written with ``seed=-3`` whose header says the override applied (it cannot have: seeds are >= 0)."""
    return [f"{p} says the runs had seed=-3" for p in obs.written
            if p.endswith(".md") and "seed=-3" in (d.results / p).read_text(errors="replace")]


def fallthrough_recorded(d: Dirs, obs: Observed) -> list[str]:
    """An ``ok`` run that read another root than $OSCREPRO_DATA_DIR must say so in its record."""
    out = []
    for run, status in obs.records.items():
        if status == "ok":
            source = json.loads((d.results / run / "status.json").read_text()).get("data_source", "")
            if "fell through" not in source:
                out.append(f"{run}: data_source does not say it fell through ({source[:80]})")
    return out


# -- the cases ----------------------------------------------------------------------------------------------------

def cases() -> list[Case]:
    """Every bad input of the census (issue 31 items 1-6 and the variants a hostile user tries)."""
    diverged = Expect("record", statuses=frozenset({"diverged"}), nonzero=None)
    failed_io = Expect("record", statuses=frozenset({"failed"}), say=r"File too large|EFBIG|Errno 27|No space")
    out = [
        # 2. config values, train CLI
        case("seed -1", "2", train("seed=-1"), Expect(say="seed")),
        case("seed 1.5", "2", train("seed=1.5"), Expect(say="seed")),
        case("seed true", "2", train("seed=true"), Expect(say="seed")),
        case("seed abc", "2", train("seed=abc"), Expect(say="seed")),
        case("seed '7' (a string)", "2", train("seed='7'"), Expect(say="seed")),
        case("seed 2**32", "2", train("seed=4294967296"), Expect(say="seed")),
        case("seed empty", "2", train("seed="), Expect(say="seed")),
        case("lr 0", "2", train("task.optimizer.lr=0"), Expect(say="lr")),
        case("lr -1", "2", train("task.optimizer.lr=-1"), Expect(say="lr")),
        case("lr nan, 1 batch", "2", train("task.optimizer.lr=nan", "trainer.limit_train_batches=1"),
             Expect(say="lr")),
        case("lr inf", "2", train("task.optimizer.lr=inf"), Expect(say="lr")),
        case("lr abc", "2", train("task.optimizer.lr=abc"), Expect(say="lr")),
        case("d_model 0", "2", train("model.d_model=0"), Expect(say="d_model")),
        case("d_model -4", "2", train("model.d_model=-4"), Expect(say="d_model")),
        case("d_model 7, 2 heads", "2", train("model.d_model=7", "model.n_heads=2"), Expect(say="d_model|n_heads")),
        case("n_heads 0", "2", train("model.n_heads=0"), Expect(say="n_heads")),
        case("n_heads 3 on d_model 32", "2", train("model.n_heads=3"), Expect(say="n_heads|divisible")),
        case("n_layers 0", "2", train("model.n_layers=0"), Expect(say="n_layers")),
        case("batch_size 0", "2", train("data.batch_size=0"), Expect(say="batch_size")),
        case("batch_size 1e3 (float)", "2", train("data.batch_size=1e3"), Expect(say="batch_size")),
        case("dropout 1.0", "2", train("model.dropout=1.0"), Expect(say="dropout")),
        case("dropout -0.1", "2", train("model.dropout=-0.1"), Expect(say="dropout")),
        case("max_epochs 0", "2", train("trainer.max_epochs=0"), Expect(say="max_epochs"), ok_is_wrong=True),
        case("max_epochs -2", "2", train("trainer.max_epochs=-2"), Expect(say="max_epochs")),
        case("max_epochs 1.5", "2", train("trainer.max_epochs=1.5"), Expect(say="max_epochs")),
        case("max_steps 0, max_epochs -1", "2", train("+trainer.max_steps=0", "trainer.max_epochs=-1"),
             Expect(say="max_steps|max_epochs"), ok_is_wrong=True),
        case("limit_train_batches 0", "2", train("trainer.limit_train_batches=0"), Expect(say="limit_train_batches"),
             ok_is_wrong=True),
        case("n_train -5", "2", train("data.n_train=-5"), Expect(say="n_train")),
        case("weight_decay -0.1", "2", train("task.optimizer.weight_decay=-0.1"), Expect(say="weight_decay")),
        case("gradient_clip_val -1", "2", train("trainer.gradient_clip_val=-1"), Expect(say="gradient_clip")),
        case("accumulate_grad_batches 0", "2", train("+trainer.accumulate_grad_batches=0"),
             Expect(say="accumulate_grad_batches")),
        case("num_workers -1", "2", train("data.num_workers=-1", base="wt2"), Expect(say="num_workers")),
        case("precision bogus", "2", train("trainer.precision=bogus"), Expect(say="precision")),
        # 2. keys and groups
        case("unknown key model.d_modle", "2", train("model.d_modle=32"), Expect(say="d_model")),
        case("unknown top-level key lr", "2", train("lr=0.1"), Expect(say="lr")),
        case("new key +model.foo=1", "2", train("+model.foo=1"), Expect(say="foo")),
        case("misspelled group attention=softmx", "2", train("attention=softmx"), Expect(say="softmx|softmax")),
        case("experiment=nope", "2", train("experiment=nope"), Expect(say="nope")),
        # 2. mechanisms: shape rules and backbone compatibility
        case("fqo d_osc 1", "2", train("attention=fqo", "model.attention.d_osc=1"), Expect(say="d_osc")),
        case("fqo mode bogus", "2", train("attention=fqo", "model.attention.mode=bogus"), Expect(say="mode")),
        case("gqa 6 heads, 4 kv heads", "2",
             train("attention=gqa", "model.d_model=36", "model.n_heads=6", "model.attention.n_kv_heads=4"),
             Expect(say="n_kv_heads")),
        case("fqo on fsn/charlm", "2",
             train("experiment=fsn/charlm", "budget=smoke", "attention=fqo", "paths.data_dir={repo}/tests/fixtures",
                   base="none"),
             Expect(say="backbone|contract")),
        # 5. multirun
        case("multirun seed=0,-1", "2,5", train("-m", "seed=0,-1"), Expect(say="seed")),
        case("multirun seed=-1,-2", "2,5", train("-m", "seed=-1,-2"), Expect(say="seed")),
        case("multirun d_model=7,9 n_heads=2", "2,5", train("-m", "model.d_model=7,9", "model.n_heads=2"),
             Expect(say="d_model|n_heads")),
        case("multirun where every job fails (I/O)", "5,6", train("-m", "seed=0,1"),
             Expect("record", statuses=frozenset({"failed"}), say=failed_io.say), fsize=150_000, cost=20),
        case("multirun where every job diverges", "1,5",
             train("-m", "seed=0,1", "task.optimizer.lr=1e30", "trainer.limit_train_batches=1"),
             Expect("record", statuses=frozenset({"diverged"}), say="non-finite|nan|diverg"), cost=20),
        # 1. records ok only when right
        case("lr 1e30, 1 batch (NaN val/test)", "1",
             train("task.optimizer.lr=1e30", "trainer.limit_train_batches=1"),
             dataclasses.replace(diverged, say="non-finite|nan"), cost=12),
        # 6. faults
        case("I/O error mid-run (file size limit)", "6", train(), failed_io, fsize=150_000, cost=12),
        # train CLI: results dir
        case("train: read-only results dir", "5,6", train(), Expect(say="results|writ|Permission|Read-only"),
             setup=lambda d: read_only(d.results), teardown=lambda d: writable_again(d.results)),
        case("train: results dir is a file", "5", train(), Expect(say="results|directory"),
             setup=lambda d: (d.results.parent.mkdir(parents=True, exist_ok=True), d.results.write_text("x"))),
        case("train: non-ASCII and spaces in results dir (must work)", "5",
             (["{py}", "-m", "oscrepro.train", *SVA, "paths.results_dir='{results}'", "hydra.run.dir={hydra}"],
              "train[sva] paths.results_dir='…/résultats ü dir'"),
             Expect("work"), results_name="résultats ü dir", cost=10),
        # 3. data: checked by content, explicit dirs authoritative
        case("WikiText-2 missing (explicit data dir does not exist)", "3", train(base="wt2"),
             Expect(say="wikitext-2")),
        case("explicit empty data dir", "3", train(base="wt2"), Expect(say="wikitext-2"),
             setup=lambda d: d.data.mkdir(parents=True)),
        case("data dir is a file", "3", train(base="wt2"), Expect(say="wikitext-2|data"), setup=data_dir_file),
        case("partial data dir (train.txt only)", "3", train(base="wt2"), Expect(say="valid.txt|test.txt"),
             setup=lambda d: copy_files(SHARED / "wikitext-2", d.data / "wikitext-2", ["train.txt"])),
        case("directory in place of train.txt", "3", train(base="wt2"), Expect(say="train.txt"),
             setup=lambda d: (wikitext(d) / "train.txt").unlink() or (d.data / "wikitext-2" / "train.txt").mkdir()),
        case("same-size altered train.txt, mtime restored", "3", train(base="wt2"), Expect(say="train.txt"),
             setup=primed_then_altered, ok_is_wrong=True, cost=30),
        case("truncated train.txt", "3", train(base="wt2"), Expect(say="train.txt"),
             setup=lambda d: truncate(wikitext(d) / "train.txt"), ok_is_wrong=True),
        case("empty train.txt", "3", train(base="wt2"), Expect(say="train.txt"),
             setup=lambda d: (wikitext(d) / "train.txt").write_bytes(b""), ok_is_wrong=True),
        case("$OSCREPRO_DATA_DIR without the dataset (fall-through, must work and say so)", "3",
             (["{py}", "-m", "oscrepro.train", *WT2[:3], *TRAIN_DIRS], "train[wt2] OSCREPRO_DATA_DIR={root}/empty"),
             Expect("work"), env={"OSCREPRO_DATA_DIR": "{root}/empty"},
             setup=lambda d: (d.root / "empty").mkdir(), check=fallthrough_recorded, cost=40),
        case("UEA: corrupted .ts (same size)", "3", train(base="uea"), Expect(say="Epilepsy_TRAIN.ts"),
             setup=lambda d: same_size_alteration(uea(d) / "Epilepsy_TRAIN.ts", 0.3), ok_is_wrong=True),
        case("UEA: truncated .ts", "3", train(base="uea"), Expect(say="Epilepsy_TEST.ts"),
             setup=lambda d: truncate(uea(d) / "Epilepsy_TEST.ts", 0.7), ok_is_wrong=True),
        case("UEA: explicit empty data dir", "3", train(base="uea"), Expect(say="Epilepsy"),
             setup=lambda d: d.data.mkdir(parents=True)),
        case("UEA: paper set missing everywhere", "3",
             train("experiment=osciformer/uea", "budget=smoke", "data.standin=null", base="none"),
             Expect(say="SelfRegulationSCP1")),
        case("events: train.pkl replaced by a code-running pickle", "3", train(base="tpp"), Expect(say="train.pkl"),
             setup=malicious_event_pickle, ok_is_wrong=True),
        # 4. checkpoints belong to their run
        case("planted checkpoint of another run", "4", train(), Expect(say="checkpoint"), setup=planted_other_run,
             ok_is_wrong=True, cost=15),
        case("garbage bytes as last.ckpt", "4", train(), Expect(say="checkpoint|last.ckpt"),
             setup=garbage_checkpoint, ok_is_wrong=True, cost=15),
        case("truncated last.ckpt", "4", train(), Expect(say="checkpoint|last.ckpt"), setup=truncated_checkpoint,
             ok_is_wrong=True, cost=15),
        case("raw pickle as last.ckpt (would run code)", "4", train(), Expect(say="checkpoint|last.ckpt"),
             setup=pickle_checkpoint, ok_is_wrong=True, cost=15),
        case("torch checkpoint with a code-running pickle", "4", train(), Expect(say="checkpoint|last.ckpt"),
             setup=torch_pickle_checkpoint, ok_is_wrong=True, cost=15),
        # 2, 5. table CLI
        case("table: unknown table", "5", table("fqo/table99", "--budget", "smoke"), Expect(say="table99")),
        case("table: path traversal as table name", "5", table("../../etc/passwd", "--budget", "smoke"),
             Expect(say="passwd|table")),
        case("table: bad budget", "5", table("fqo/table2", "--budget", "huge"), Expect(say="budget")),
        case("table: bad launcher", "5", table("fqo/table2", "--budget", "smoke", "--launcher", "bogus"),
             Expect(say="launcher")),
        case("table: --workers 0", "5", table("fqo/table2", "--budget", "smoke", "--launcher", "joblib",
                                              "--workers", "0"), Expect(say="workers")),
        case("table: bad override value d_model=-4", "2,5", table("fqo/table2", "--budget", "smoke",
                                                                  "model.d_model=-4"), Expect(say="d_model")),
        case("table: max_epochs=0 override", "2,5", table("fqo/table2", "--budget", "smoke", "trainer.max_epochs=0"),
             Expect(say="max_epochs")),
        case("table: unknown key override", "2,5", table("fqo/table2", "--budget", "smoke", "model.d_modle=4"),
             Expect(say="d_model")),
        case("table: misspelled group override", "2,5", table("fqo/table2", "--budget", "smoke",
                                                              "attention=softmx"), Expect(say="softmx|attention")),
        case("table: seed=-3 override", "2,5", table("fqo/table2", "--budget", "smoke", "seed=-3"),
             Expect(say="seed"), check=header_lies_about_seed),
        case("table: seed=5 override (spec owns seeds)", "2,5", table("fqo/table2", "--budget", "smoke", "seed=5"),
             Expect(say="seed"), check=header_lies_about_seed),
        case("table: owned key attention=softmax", "2,5", table("fqo/table2", "--budget", "smoke",
                                                                "attention=softmax"), Expect(say="attention")),
        case("table: read-only results dir", "5", table("fqo/table2", "--budget", "smoke"),
             Expect(say="results dir|writ"), setup=lambda d: read_only(d.results),
             teardown=lambda d: writable_again(d.results)),
        case("table: results dir is a file", "5", table("fqo/table2", "--budget", "smoke"),
             Expect(say="results dir|directory"),
             setup=lambda d: (d.results.parent.mkdir(parents=True, exist_ok=True), d.results.write_text("x"))),
        case("table: non-ASCII and spaces in --results-dir (must work)", "5",
             table("fqo/table2", "--budget", "smoke"), Expect("work"), results_name="résultats ü dir", cost=25),
        case("table over diverged runs (lr 1e30)", "1",
             table("fqo/table2", "--budget", "smoke", "--variant", "census", "task.optimizer.lr=1e30",
                   "trainer.limit_train_batches=1"),
             Expect("record", statuses=frozenset({"diverged"}), nonzero=None), cost=25),
    ]
    return out


# -- running and observing ----------------------------------------------------------------------------------------

def case_env(extra: dict[str, str], cache: Path) -> dict[str, str]:
    """The environment of a case's command: this one without the oscrepro path variables, the census cache dir,
    and the case's own variables."""
    env = {k: v for k, v in os.environ.items() if k not in ("OSCREPRO_RESULTS_DIR", "OSCREPRO_DATA_DIR")}
    env.update({"OSCREPRO_CACHE_DIR": str(cache), "PYTHONUNBUFFERED": "1", **extra})
    return env


def fill(text: str, d: Dirs) -> str:
    """Replace the placeholders of a case's argv or env value."""
    for key, value in (("{py}", PY), ("{results}", d.results), ("{data}", d.data), ("{hydra}", d.hydra),
                       ("{sweep}", d.sweep), ("{root}", d.root), ("{repo}", REPO)):
        text = text.replace(key, str(value))
    return text


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """relative path -> (size, mtime_ns) of every file and link under ``root`` (nothing when it is not a dir)."""
    out: dict[str, tuple[int, int]] = {}
    if not root.is_dir():
        return out
    for dirpath, dirnames, filenames in os.walk(root):
        for name in filenames + [n for n in dirnames if os.path.islink(os.path.join(dirpath, n))]:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            out[os.path.relpath(p, root)] = (st.st_size, st.st_mtime_ns)
    return out


def message_lines(output: str) -> list[str]:
    """The lines of ``output`` that are neither empty nor progress / INFO logging (:data:`NOISE`)."""
    return [ln.rstrip() for ln in output.splitlines() if ln.strip() and not any(p.search(ln) for p in NOISE)]


def headline(obs: Observed) -> str:
    """The line that says what happened: a traceback's exception line, else the first message line, else the
    last output line."""
    lines = [ln for ln in obs.output.splitlines() if ln.strip()]
    if obs.traceback:
        after = obs.output.split(TRACEBACK)[-1].splitlines()
        exc = [ln for ln in after if re.match(r"^[\w.]+(Error|Exception|Exit|Interrupt)\b", ln)]
        if exc:
            return exc[-1]
    if obs.message:  # a line ending in ":" introduces the next one (a list of problems)
        first = obs.message[0]
        return first + " " + obs.message[1] if first.endswith(":") and len(obs.message) > 1 else first
    return lines[-1] if lines else ""


def _finite_problems(run: str, metrics: dict[str, Any]) -> list[str]:
    out = [f"{run}: {k}={v}" for k, v in metrics.items()
           if isinstance(v, float) and not math.isfinite(v)]
    if metrics.get("epochs") == 0:
        out.append(f"{run}: epochs=0 (nothing trained)")
    return out


def _number(text: str | None) -> float | None:
    try:
        return float(text) if text not in (None, "") else None
    except ValueError:
        return None


def _table_problems(d: Dirs, written: list[str]) -> list[str]:
    """Cells of a written runs-table csv that aggregate a non-finite value (runs counted, ``n`` > 0, but no finite
    mean or count) or that give a number without a run (``n`` = 0, a finite mean). ``nan`` where no number exists
    (the std of one seed, a cell without ok runs) is the engine's way to leave a cell empty, not a problem."""
    out = []
    for rel in written:
        if not rel.endswith(".csv") or rel.startswith("runs/"):
            continue
        with open(d.results / rel, newline="", errors="replace") as fh:
            rows = list(csv.DictReader(fh))
        for row in rows:
            if "ours_mean" not in row or "n" not in row:
                break
            n, mean = _number(row.get("n")) or 0, _number(row.get("ours_mean"))
            values = [v for v in (mean, _number(row.get("ours_count"))) if v is not None]
            if n > 0 and not any(math.isfinite(v) for v in values):
                out.append(f"{rel}: {row.get('row')} / {row.get('column')}: {int(n)} run(s), value not finite")
                break
            if n == 0 and mean is not None and math.isfinite(mean):
                out.append(f"{rel}: {row.get('row')} / {row.get('column')}: a number from 0 runs")
                break
    return out


def observe(c: Case, d: Dirs, before: dict[str, tuple[int, int]]) -> Observed:
    """Run the case's command and read what it did (module docstring)."""
    argv = [fill(a, d) for a in c.argv]
    if c.fsize is not None:  # RLIMIT_FSIZE for the command only (Python ignores SIGXFSZ: a write gets EFBIG)
        argv = [PY, "-c", "import os, resource, sys; n = int(sys.argv[1]); "
                "resource.setrlimit(resource.RLIMIT_FSIZE, (n, n)); os.execv(sys.argv[2], sys.argv[2:])",
                str(c.fsize), *argv]
    env = case_env({k: fill(v, d) for k, v in c.env.items()}, d.cache)
    t0 = time.time()
    timed_out = False
    try:
        proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, errors="replace",
                              timeout=c.timeout)
        code, output = proc.returncode, (proc.stderr or "") + (proc.stdout or "")
    except subprocess.TimeoutExpired as err:
        timed_out, code = True, None
        output = "".join(x.decode(errors="replace") if isinstance(x, bytes) else (x or "")
                         for x in (err.stderr, err.stdout))
    seconds = time.time() - t0
    after = snapshot(d.results)
    # created or changed; a run's existing ``lock`` file taken again is not a write of the run (a new one is)
    written = sorted(p for p, v in after.items() if before.get(p) != v and not (Path(p).name == "lock" and p in before))
    records: dict[str, str] = {}
    reasons: dict[str, str] = {}
    problems: list[str] = []
    for rel in written:
        if Path(rel).name == "status.json":
            run = str(Path(rel).parent)
            try:
                status = json.loads((d.results / rel).read_text())
            except (OSError, ValueError) as err:
                problems.append(f"{rel} does not parse: {err}")
                continue
            records[run] = str(status.get("status"))
            reasons[run] = str(status.get("reason", ""))
            if records[run] == "ok":
                try:
                    metrics = json.loads((d.results / run / "metrics.json").read_text())
                except (OSError, ValueError) as err:
                    problems.append(f"{run}: ok without a readable metrics.json ({err})")
                    continue
                problems += _finite_problems(run, metrics)
                if c.ok_is_wrong:
                    problems.append(f"{run}: recorded ok from the bad input")
    problems += _table_problems(d, written)
    litter = sorted(str(p.relative_to(d.root)) for p in d.root.rglob("*.tmp"))
    message = message_lines(output)
    obs = Observed(exit=code, seconds=seconds, output=output, traceback=TRACEBACK in output, message=message,
                   written=written, records=records, reasons=reasons, litter=litter, problems=problems,
                   code_ran=marker(d).exists(), timed_out=timed_out)
    if c.check is not None:
        obs.problems += c.check(d, obs)
    return obs


def classify(expect: Expect, obs: Observed) -> tuple[str, str]:
    """(category, note) of an observed outcome against the case's expectation (module docstring)."""
    text = "\n".join(obs.message)
    if obs.code_ran:
        return "code ran", "the planted pickle ran its code"
    if obs.timed_out:
        return "timed out", ""
    if obs.problems:
        return "wrong record", "; ".join(obs.problems[:2])
    statuses = set(obs.records.values())
    if expect.kind == "work":
        produced = "ok" in statuses or any(p.endswith(".md") and not p.startswith("runs/") for p in obs.written)
        if obs.exit == 0 and not obs.traceback and produced:
            return "worked", ""
        if obs.exit == 0:
            return "wrong record", "exit 0 but no ok record or table written"
        return ("refused with traceback" if obs.traceback else "wrongly refused"), ""
    if expect.kind == "record":
        exit_ok = expect.nonzero is None or (obs.exit != 0) == expect.nonzero
        if statuses and statuses <= expect.statuses and exit_ok and not obs.litter:
            said = not expect.say or all(re.search(expect.say, r) for r in obs.reasons.values())
            if said:
                return "refused cleanly", ""
            return "wrong record", f"the record's reason does not name the error ({expect.say})"
        if "ok" in statuses or (obs.exit == 0 and not statuses):
            return "silently accepted", ""
        note = (f"statuses {sorted(statuses)}" if statuses else "no record") + (
            "" if exit_ok else f", exit {obs.exit}") + (f", litter {obs.litter[:2]}" if obs.litter else "")
        return ("refused with traceback" if obs.traceback and not statuses else "recorded failed"), note
    if obs.exit == 0:
        return "silently accepted", ""
    if obs.traceback:
        return "refused with traceback", ""
    if obs.written or obs.litter:
        what = f"records {dict(Counter(statuses))}" if statuses else f"{len(obs.written)} file(s) written"
        return "recorded failed", what
    if expect.say and not re.search(expect.say, text, re.IGNORECASE):
        return "refused, other reason", f"the message does not match /{expect.say}/"
    return "refused cleanly", ""


def run_case(c: Case, census: Path, cache: Path, index: int) -> Result:
    """Prepare, run, observe and classify one case in its own temp dir ``<census>/<index>``."""
    root = census / f"{index:03d}"
    d = Dirs(root=root, results=root / c.results_name, cache=cache)
    root.mkdir(parents=True)
    try:
        if c.setup is not None:
            c.setup(d)
    except Exception as err:  # noqa: BLE001 -- reported as the case's outcome
        return Result(c, None, "setup failed", f"{type(err).__name__}: {err}")
    try:
        before = snapshot(d.results)
        obs = observe(c, d, before)
    finally:
        if c.teardown is not None:
            c.teardown(d)
    category, note = classify(c.expect, obs)
    return Result(c, obs, category, note)


# -- the report ---------------------------------------------------------------------------------------------------

def cell(text: str, width: int = 150) -> str:
    """``text`` as one markdown table cell (pipes escaped, cut to ``width``)."""
    text = " ".join(str(text).split())
    text = text if len(text) <= width else text[: width - 1] + "…"
    return text.replace("|", "\\|")


def written_summary(obs: Observed | None) -> str:
    if obs is None:
        return ""
    if not obs.written and not obs.litter:
        return "nothing"
    parts = []
    if obs.records:
        parts.append("records " + ", ".join(f"{s}×{n}" for s, n in Counter(obs.records.values()).items()))
    other = [p for p in obs.written if not p.startswith("runs/")]
    runs = [p for p in obs.written if p.startswith("runs/")]
    if runs and not obs.records:
        parts.append(f"{len(runs)} file(s) under runs/ ({', '.join(sorted({Path(p).name for p in runs})[:3])})")
    if other:
        parts.append(", ".join(other[:3]) + (f" +{len(other) - 3}" if len(other) > 3 else ""))
    if obs.litter:
        parts.append(f"litter: {', '.join(obs.litter[:2])}")
    return "; ".join(parts)


def git_state() -> str:
    """The commit the census ran on (``+dirty`` with uncommitted changes), from read-only git commands."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                               capture_output=True, text=True, check=True).stdout.strip()
        return head + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def report(results: list[Result], seconds: float, jobs: int, cpu: float | None = None) -> str:
    """The census as markdown: counts per category, then one row per case."""
    counts = Counter(r.category for r in results)
    tried = sum(1 for r in results if r.category != "setup failed")
    safe_not_clean = counts["recorded failed"] + counts["refused with traceback"] + counts["refused, other reason"]
    multi = sum(1 for r in results if r.category == "refused cleanly" and r.observed and r.case.expect.kind == "refuse"
                and len(r.observed.message) > 1)
    lines = [
        "# Bad inputs census (issue 31)",
        "",
        f"`scripts/bad_inputs_census.py` on {git_state()}, "
        f"{datetime.datetime.now(datetime.UTC).strftime('%Y-%m-%d %H:%M UTC')}: {len(results)} cases "
        f"({tried} tried) in {seconds:.0f} s wall, a pool of {jobs}"
        + (f" ({cpu:.0f} CPU-seconds in the commands: about {cpu / jobs:.0f} s on {jobs} idle cores)" if cpu else "")
        + "; every case in its own temp results, data and Hydra dirs.",
        "",
        f"**{tried} bad inputs tried: {counts['refused cleanly'] + counts['worked']} handled right "
        f"({counts['refused cleanly']} refused cleanly or recorded as expected, {counts['worked']} that must work "
        f"worked), {safe_not_clean} refused safely but not cleanly (traceback, a record, or another reason), "
        f"{counts['silently accepted']} silently accepted, {counts['wrong record']} wrong records.**"
        + (f" {multi} clean refusals took more than one line." if multi else ""),
        "",
        "| category | cases |",
        "|---|---|",
        *[f"| {c} | {counts[c]} |" for c in CATEGORIES if counts[c] or c in CATEGORIES[:8]],
        "",
        "Bases: `train[sva]` = `python -m oscrepro.train " + " ".join(SVA) + "`; `train[wt2]` = `"
        + " ".join(WT2) + "`; `train[uea]` = `" + " ".join(UEA) + "`; `train[tpp]` = `" + " ".join(TPP)
        + "`; each with `paths.results_dir=<case>/results hydra.run.dir=… hydra.sweep.dir=…`. `table` = "
        "`python -m oscrepro.table … --results-dir <case>/results`. *lines*: output lines that are not progress or "
        "INFO logging. *written*: files created or changed under the case's results dir (Hydra's own dirs are "
        "elsewhere and not counted).",
        "",
        "| # | case | item | command | expected | exit | lines | message (first line) | written | category | s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for i, r in enumerate(results, 1):
        obs = r.observed
        exit_ = "" if obs is None else ("timeout" if obs.timed_out else str(obs.exit))
        msg = r.note if obs is None else headline(obs)
        cat = r.category + (f" ({r.note})" if r.note and obs is not None else "")
        lines.append(f"| {i} | {cell(r.case.name, 60)} | {r.case.item} | `{cell(r.case.show, 90)}` | "
                     f"{r.case.expect.label()} | {exit_} | {'' if obs is None else len(obs.message)} | "
                     f"{cell(msg)} | {cell(written_summary(obs), 90)} | {cell(cat, 120)} | "
                     f"{'' if obs is None else f'{obs.seconds:.0f}'} |")
    return "\n".join(lines) + "\n"


def children_cpu() -> float:
    """CPU seconds (user + system) of this process's finished child processes."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_census(selected: list[Case], jobs: int, keep: bool = False,
               progress: Callable[[str], None] = print) -> tuple[list[Result], float, float]:
    """Run ``selected`` in a pool of ``jobs`` threads (each case a subprocess), costly cases first; results in the
    cases' order, the wall time and the CPU time of the commands (the census's cost on an idle machine)."""
    census = Path(tempfile.mkdtemp(prefix="oscrepro_census_"))
    cache = census / "_cache"
    CENSUS.update(root=census, cache=cache)
    t0, cpu0 = time.time(), children_cpu()
    order = sorted(range(len(selected)), key=lambda i: -selected[i].cost)
    results: dict[int, Result] = {}
    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
            futures = {pool.submit(run_case, selected[i], census, cache, i): i for i in order}
            for fut in concurrent.futures.as_completed(futures):
                i = futures[fut]
                results[i] = fut.result()
                r = results[i]
                took = "" if r.observed is None else f" {r.observed.seconds:.0f}s"
                progress(f"[census] {len(results)}/{len(selected)} {r.case.name}: {r.category}{took}")
    finally:
        if keep:
            progress(f"[census] case dirs kept under {census}")
        else:
            shutil.rmtree(census, ignore_errors=True)
    return [results[i] for i in range(len(selected))], time.time() - t0, children_cpu() - cpu0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, help="write the markdown report here")
    parser.add_argument("--jobs", type=int, default=2, help="cases run at a time (default 2)")
    parser.add_argument("--only", default=None, help="regex: run the cases whose name matches")
    parser.add_argument("--keep", action="store_true", help="keep the cases' temp dirs (their path is printed)")
    parser.add_argument("--list", action="store_true", help="list the cases and exit")
    args = parser.parse_args(argv)
    selected = [c for c in cases() if args.only is None or re.search(args.only, c.name)]
    if args.list:
        for i, c in enumerate(selected, 1):
            print(f"{i:3d}. [{c.item}] {c.name}: {c.show} -> {c.expect.label()}")
        return
    if args.out is None:
        parser.error("--out is required (or --list)")
    if not selected:
        parser.error(f"no case matches --only {args.only!r}")
    results, seconds, cpu = run_census(selected, args.jobs, args.keep)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(report(results, seconds, args.jobs, cpu))
    counts = Counter(r.category for r in results)
    print(f"[census] {len(results)} cases in {seconds:.0f} s ({cpu:.0f} CPU-s): "
          + ", ".join(f"{c} {counts[c]}" for c in CATEGORIES if counts[c]) + f"; wrote {args.out}")


if __name__ == "__main__":
    main()
