"""Bad config input to the train CLI (issue 31): refused in one message with exit 2 before anything is written
(no run record, no Hydra output dir), every job of a multirun checked before the first starts, and a multirun
with a job that is not ``ok`` exits non-zero with one summary line. Each test fails on the code before issue 31:
there these inputs trained (``max_epochs=0``: an untrained model recorded ``ok``), failed at run time with a
traceback and a ``failed`` record, trained job 0 before refusing job 1, exited 1, or exited 0 after a failed job.
"""

from __future__ import annotations

import json
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

from oscrepro import train as train_cli
from oscrepro.data import integrity
from oscrepro.data.paths import DatasetNotFoundError

ROOT = Path(__file__).resolve().parents[2]
SMOKE = ["experiment=fqo/sva", "budget=smoke", "trainer.enable_progress_bar=false"]
HEAD = "invalid config, nothing was run or written: "

CASES = {  # case: (command line after the smoke overrides, what the one message says)
    "max_epochs=0": (["trainer.max_epochs=0"], "trainer.max_epochs=0: trains nothing; must be >= 1"),
    "seed=2**32": (["seed=4294967296"], "seed=4294967296: must be an integer in [0, 4294967295]"),
    "d_model % n_heads": (["model.d_model=7", "model.n_heads=2"],
                          "model.attention (FixedQueryOscillatorAttention; model.d_model=7, model.n_heads=2): "
                          "d_model=7 is not divisible by n_heads=2"),
    "mechanism vs backbone": (["experiment=fsn/charlm", "attention=fqo"],
                              "attention=fqo (FixedQueryOscillatorAttention) implements the vector contract, but "
                              "TorusLM (oscrepro.papers.fsn.torus_lm) builds its attention with the 'phase' contract: "
                              "choose attention=fsn, fsn_nophase or kuramoto; experiments that fit fqo: "),
    "multirun job 2 of 2": (["-m", "seed=0,-1"], "job seed=-1: seed=-1: must be an integer in [0, 4294967295]"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_cli_refuses_in_one_line_with_exit_2_and_writes_nothing(case, tmp_path):
    extra, says = CASES[case]
    flags = [a for a in extra if a.startswith("-")]  # Hydra's flags come before the overrides
    results = tmp_path / "results"
    proc = subprocess.run([sys.executable, "-m", "oscrepro.train", *flags, *SMOKE, f"paths.results_dir={results}",
                           *[a for a in extra if a not in flags]], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr[-3000:]  # train_cli.EXIT_REFUSED
    assert len(lines) == 1 and lines[0].startswith(HEAD) and says in lines[0], proc.stderr[-3000:]
    assert not results.exists(), sorted(results.rglob("*"))  # no record, no Hydra output dir (results/hydra)
    if case == "mechanism vs backbone":  # the experiments that fit are computed from conf/experiment
        fits = lines[0].split("experiments that fit fqo: ")[1].split(", ")
        assert "fqo/sva" in fits and "coupledqk/lm" in fits and not any(f.startswith("fsn/") for f in fits)


def _cli(monkeypatch, argv: list[str]) -> int:
    """Run ``python -m oscrepro.train`` in this process, as a script (Hydra finds conf/ next to it), so that a
    failure can be injected into the modules it imports; its exit code."""
    monkeypatch.setattr(sys, "argv", [train_cli.__file__, *argv])
    try:
        runpy.run_path(train_cli.__file__, run_name="__main__")
    except SystemExit as done:
        if isinstance(done.code, str):  # as the interpreter does: the message on stderr, exit status 1
            print(done.code, file=sys.stderr)
            return 1
        return int(done.code or 0)
    return 0


def test_a_multirun_with_a_failed_job_exits_1_with_one_summary_line(monkeypatch, capsys, tmp_path):
    """Job data.batch_size=9 fails at run time (an error injected into its data setup), job 8 trains. Hydra's own
    exit was 0, with nothing said."""
    real = integrity.setup_data

    def setup_or_fail(data_cfg, *args, **kwargs):
        if int(data_cfg.batch_size) == 9:
            raise RuntimeError("injected run-time failure")
        return real(data_cfg, *args, **kwargs)

    monkeypatch.setattr(integrity, "setup_data", setup_or_fail)
    code = _cli(monkeypatch, ["-m", *SMOKE, f"paths.results_dir={tmp_path}", "data.batch_size=8,9"])
    err = capsys.readouterr().err.strip().splitlines()
    records = {json.loads(p.read_text())["status"]: p.parent for p in (tmp_path / "runs").rglob("status.json")}
    assert sorted(records) == ["failed", "ok"]
    assert code == 1  # train_cli.EXIT_FAILED
    summary = [line for line in err if line.startswith("multirun: ")]
    assert summary == [f"multirun: 2 job(s): 1 ok, 1 failed, 0 diverged; not ok: {records['failed']} (failed)"], err


def test_a_refused_dataset_exits_2_in_one_line_without_a_record(monkeypatch, capsys, tmp_path):
    """A refusal of the data (``REFUSALS``) exits 2 (it exited 1), one line, no run record."""
    def missing(*args, **kwargs):
        raise DatasetNotFoundError("Dataset 'sva' not found. Looked in: /nowhere")

    monkeypatch.setattr(integrity, "setup_data", missing)
    code = _cli(monkeypatch, [*SMOKE, f"paths.results_dir={tmp_path}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2  # train_cli.EXIT_REFUSED
    assert err[-1] == "Dataset 'sva' not found. Looked in: /nowhere" and "Traceback" not in "\n".join(err)
    assert not (tmp_path / "runs").exists()
