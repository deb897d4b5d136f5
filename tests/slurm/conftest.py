"""SLURM tests run against a real scheduler (`make slurm-up`: a single-node cluster on this host). Without one
every test here fails at once with the command to start it: they never skip, so a CI step that meant to test
SLURM cannot pass without it. `make test` leaves them out (`-m "not slow and not slurm"`)."""

from __future__ import annotations

import pytest

from tests.slurm.cluster import scheduler_problem


@pytest.fixture(scope="session", autouse=True)
def _scheduler() -> None:
    problem = scheduler_problem()
    if problem is not None:
        pytest.fail(
            f"no SLURM scheduler to test against: {problem}. Start one with `make slurm-up` "
            f"(root; scripts/slurm_up.sh), then `make test-slurm`",
            pytrace=False,
        )
