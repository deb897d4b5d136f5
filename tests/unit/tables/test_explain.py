"""``python -m oscrepro.tables.explain``: what a budget changes for a table, key by key, with the file that sets it.

The values are checked against the configs the engine composes (``compose_run``), the sources against the files
they name, and a change planted in a copy of ``conf/`` must show up (and a row override that hides it must not).
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest
import yaml
from hydra import initialize_config_dir
from omegaconf import OmegaConf

from oscrepro.runs.compose import CONF_DIR, compose_run
from oscrepro.runs.record import hashed_payload
from oscrepro.tables.explain import Change, _compose, cell_changes, explain_budget, main
from oscrepro.tables.spec import load_spec

REPO = CONF_DIR.parent
SVA_CPU = "conf/budget_scale/experiment/fqo/sva/cpu.yaml"


def _all_changes(groups: dict[tuple[Change, ...], list[tuple[int, str]]]) -> dict[str, set[Change]]:
    """{key: the changes of that key over every cell group}."""
    out: dict[str, set[Change]] = {}
    for changes in groups:
        for c in changes:
            out.setdefault(c.key, set()).add(c)
    return out


def test_fqo_table2_at_cpu_names_the_epochs_with_both_values_and_their_file() -> None:
    spec = load_spec("fqo/table2")
    groups = cell_changes(spec, "cpu")
    overrides = spec.cell_overrides(0, "overall", "cpu", [])
    paper = compose_run([*spec.cell_overrides(0, "overall", "paper", []), "seed=0"])
    cpu = compose_run([*overrides, "seed=0"])
    assert paper.trainer.max_epochs != cpu.trainer.max_epochs  # the key really differs between the budgets
    (change,) = _all_changes(groups)["trainer.max_epochs"]
    assert (change.paper, change.budget) == (str(paper.trainer.max_epochs), str(cpu.trainer.max_epochs))
    assert change.source == SVA_CPU
    assert yaml.safe_load((REPO / change.source).read_text())["trainer"]["max_epochs"] == cpu.trainer.max_epochs
    # every cell shares the change, and nothing else but the budget's name differs here
    assert len(groups) == 1 and {c.key for c in next(iter(groups))} == {"budget_name", "trainer.max_epochs"}


def test_every_listed_difference_is_a_real_one_and_nothing_is_missed() -> None:
    """Against a direct comparison of the two composed configs of one cell of a stand-in table (fsn Table 1's
    enwik8 transformer: a data node replaced by a stand-in, keys removed, nested includes)."""
    full = load_spec("fsn/table1")
    ri, column = 0, next(c for c in full.columns if c.delta is None)
    spec, col = dataclasses.replace(full, rows=full.rows[:1], columns=[column]), column.name  # one cell: fast
    a = OmegaConf.to_container(compose_run([*spec.cell_overrides(ri, col, "paper", []), "seed=0"]), resolve=True)
    b = OmegaConf.to_container(compose_run([*spec.cell_overrides(ri, col, "cpu", []), "seed=0"]), resolve=True)

    absent = object()

    def differing(x: object, y: object, prefix: str = "") -> set[str]:  # a node on one side only is one key
        if isinstance(x, dict) and isinstance(y, dict) and x and y:
            keys = set(x) | set(y)
            return set().union(*(differing(x.get(k, absent), y.get(k, absent), f"{prefix}{k}.") for k in keys))
        return {prefix.rstrip(".")} if (x, type(x)) != (y, type(y)) else set()

    expected = differing(a, b)
    groups = cell_changes(spec, "cpu")
    (changes,) = [ch for ch, members in groups.items() if (ri, col) in members]
    assert {c.key for c in changes} == expected
    by_key = {c.key: c for c in changes}
    assert by_key["data._target_"].source == (
        "conf/data/standin/enwik8.yaml (via conf/budget_scale/data/enwik8/cpu.yaml)"
    )
    assert by_key["data.batch_size"].source == "conf/budget_scale/experiment/fsn/charlm/cpu.yaml"
    # a key of the real corpus that the stand-in lacks was removed by the node that clear.yaml nulls
    removed = [c for c in changes if c.budget == "(not set)"]
    assert removed and all(c.source.startswith("conf/budget_scale/data/clear.yaml") for c in removed)


def test_at_budget_paper_nothing_changes() -> None:
    text = explain_budget("fqo/table2", "paper")
    assert "nothing changes" in text and "->" not in text
    assert all(not changes for changes in cell_changes(load_spec("fqo/table2"), "paper"))


def test_a_budget_map_to_paper_changes_no_key() -> None:
    """leaderboard/sva builds its cpu runs at the paper budget (budget_map): no key differs, and it says why."""
    text = explain_budget("leaderboard/sva", "cpu")
    assert "budget_map" in text and "nothing changes" in text and "->" not in text


@pytest.fixture
def conf_copy(tmp_path: Path) -> Path:
    conf = tmp_path / "conf"
    shutil.copytree(CONF_DIR, conf)
    return conf


def test_a_planted_change_shows_up_with_its_file_and_a_row_override_hides_it(conf_copy: Path) -> None:
    """Planted in copies of conf/budget/cpu.yaml and the SVA cpu scale: a new trainer key (source: budget/cpu), an
    epoch count that the later budget_scale file overrides (the last writer is named), and an attention key that
    Table 2's frozen-W_V row sets itself (so its cells do not change and form their own group)."""
    (conf_copy / "budget" / "cpu.yaml").write_text(
        (CONF_DIR / "budget" / "cpu.yaml").read_text() + "trainer:\n  min_epochs: 1\n  max_epochs: 7\n"
    )
    (conf_copy / "budget_scale/experiment/fqo/sva/cpu.yaml").write_text(
        (REPO / SVA_CPU).read_text() + "model:\n  attention:\n    freeze_value: true\n"
    )
    full = load_spec("fqo/table2", conf_copy)
    spec = dataclasses.replace(full, columns=full.columns[:1])  # one cell per row: fast
    groups = cell_changes(spec, "cpu", conf_copy)
    changes = _all_changes(groups)
    assert {(c.paper, c.budget, c.source) for c in changes["trainer.min_epochs"]} == {
        ("(not set)", "1", "conf/budget/cpu.yaml")
    }
    assert {(c.paper, c.budget, c.source) for c in changes["trainer.max_epochs"]} == {("20", "10", SVA_CPU)}
    frozen = [i for i, r in enumerate(spec.rows) if "freeze_value=true" in " ".join(r.overrides)]
    assert frozen
    for ch, members in groups.items():
        sets_freeze = any(c.key == "model.attention.freeze_value" for c in ch)
        assert sets_freeze == (not any(ri in frozen for ri, _ in members)), (ch, members)
        if sets_freeze:
            assert {c.source for c in ch if c.key == "model.attention.freeze_value"} == {SVA_CPU}


def test_explain_composes_the_run_config_the_engine_does() -> None:
    """explain's own composition (one Hydra initialisation per call) gives the engine's config of a cell."""
    spec = load_spec("fqo/table2")
    overrides = [*spec.cell_overrides(1, "hard", "cpu", []), "seed=0"]
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg, choices = _compose(overrides)
    assert hashed_payload(cfg) == hashed_payload(compose_run(overrides))
    assert choices["budget_scale/experiment"] == "fqo/sva/cpu"


def test_analysis_table_lists_its_budget_arguments() -> None:
    text = explain_budget("coupledqk/table7", "cpu")
    assert "analysis.launcher" in text and "conf/table/coupledqk/table7.yaml analysis.budgets.cpu" in text


def test_command_line_prints_the_changes_by_file_and_the_budget_note(capsys: pytest.CaptureFixture[str]) -> None:
    main(["fqo/table2", "--budget", "cpu"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[lines.index(f"    {SVA_CPU}") + 1].split() == ["trainer.max_epochs", "20", "->", "10"]
    assert any(load_spec("fqo/table2").budget_notes["cpu"] in line for line in lines)
    with pytest.raises(SystemExit) as err:
        main(["fqo/table99", "--budget", "cpu"])
    assert err.value.code == 2 and "fqo/table2" in capsys.readouterr().err


def test_the_table_cli_explains_and_trains_nothing(tmp_path, capsys, monkeypatch):
    """``python -m oscrepro.table <t> --budget cpu --explain`` prints the explanation and writes nothing."""
    from oscrepro import table as table_cli

    monkeypatch.chdir(tmp_path)
    table_cli.main(["fqo/table2", "--budget", "cpu", "--explain"])
    out = capsys.readouterr().out
    assert "trainer.max_epochs" in out and "conf/budget_scale/experiment/fqo/sva/cpu.yaml" in out
    assert not any(tmp_path.iterdir())
