"""plan() composes a cell once and derives its seeds by setting ``seed``: the result must equal composing each seed.

The golden-config test (tests/unit/conf/test_golden_configs.py) compares every cell against a fixture that was
written by composing every seed with Hydra; this test checks the equality directly on cells of two tables, resolved
config and run id both, so a config that made anything else depend on ``seed`` at composition time fails here.
"""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from oscrepro.runs.lookup import RunRequest
from oscrepro.tables.plan import plan
from oscrepro.tables.spec import load_spec


@pytest.mark.parametrize(("key", "budget"), [("fqo/table2", "cpu"), ("coupledqk/table1", "cpu")])
def test_seed_copies_equal_composed_seeds(key: str, budget: str) -> None:
    spec = load_spec(key)
    cells = plan(spec, budget)
    (ri, col), reqs = next(iter(cells.items()))
    assert len(reqs) >= 2 and len({r.run_dir for r in reqs}) == len(reqs)  # distinct seeds, distinct runs
    for req in reqs[1:]:  # reqs[0] was composed; the rest were copied
        composed = RunRequest.compose(req.overrides)
        assert req.overrides[-1] == f"seed={composed.cfg.seed}" and req.cfg.seed == composed.cfg.seed
        assert OmegaConf.to_container(req.cfg, resolve=True) == OmegaConf.to_container(composed.cfg, resolve=True)
        assert req.run_dir == composed.run_dir


def test_a_seed_copy_does_not_alias_the_composed_config() -> None:
    cells = plan(load_spec("fqo/table2"), "cpu")
    reqs = next(iter(cells.values()))
    reqs[1].cfg.trainer.max_epochs = 12345
    assert reqs[0].cfg.trainer.max_epochs != 12345 and reqs[2].cfg.trainer.max_epochs != 12345
