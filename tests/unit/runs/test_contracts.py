"""What the model classes declare (oscrepro.runs.contracts) and the training-length rules (oscrepro.runs.validate):
each rule is reported before anything is built, and the class itself refuses the same config when built directly
(the declaration is the constructor's check, so the two cannot drift apart); valid configs pass. The multirun
plan (oscrepro.runs.sweep) expands a sweep into the jobs Hydra's basic sweeper runs."""

from __future__ import annotations

import pytest
from hydra.utils import instantiate

from oscrepro.runs import sweep
from oscrepro.runs.compose import CONF_DIR
from oscrepro.runs.validate import config_problems

SVA = ["experiment=fqo/sva", "budget=smoke"]
CHARLM = ["experiment=fsn/charlm", "budget=smoke"]
DIMS = {"fqo/sva": {"vocab_size": 16, "n_classes": 2}, "fsn/charlm": {"vocab_size": 16}}

RULES = [  # (overrides, what the message says); each failed inside instantiate or the first forward before
    ([*SVA, "model.d_model=7", "model.n_heads=2"], "d_model=7 is not divisible by n_heads=2"),
    ([*SVA, "attention=gqa", "model.d_model=24", "model.n_heads=6", "model.attention.n_kv_heads=4"],
     "n_heads=6 is not divisible by n_kv_heads=4"),
    ([*SVA, "attention=gqa", "model.d_model=6", "model.n_heads=2", "model.attention.rope=true"],
     "rope=True: RoPE needs an even head dimension (d_model / n_heads), got 3"),
    ([*SVA, "attention=diff", "model.d_model=24", "model.n_heads=3"], "form='official' needs an even n_heads"),
    ([*SVA, "attention=diff_paper", "model.d_model=24", "model.n_heads=8"], "form='paper' needs an even head dim"),
    ([*SVA, "attention=diff_paper", "model.d_model=24", "model.n_heads=4", "model.attention.rope=true"],
     "RoPE needs an even q/k sub-head width"),
    ([*SVA, "attention=coupled_qk", "model.d_model=6", "model.n_heads=2", "model.attention.rope=true"],
     "RoPE needs an even head dimension"),
    ([*SVA, "attention=coupled_qk", "model.attention.integrator=leapfrog"], "integrator='leapfrog'; valid: "),
    ([*SVA, "model.attention.d_osc=1"], "need d_osc >= 2"),
    ([*SVA, "attention=fqo_gain", "model.attention.placement=both"], "placement='both'; valid: score, magnitude"),
    ([*SVA, "attention=fqo_relpos", "model.attention.max_rel_dist=0"], "max_rel_dist must be >= 1"),
    ([*SVA, "attention=ssa", "model.attention.top_k=0"], "top_k=0 must be an integer >= 1 or null"),  # trained ok
    ([*SVA, "attention=ssa", "model.attention.block=0"], "block=0 must be an integer >= 1"),
    ([*SVA, "attention=osciformer", "model.d_model=32", "model.n_heads=2", "model.attention.n_modes=0"],
     "n_modes=0 must be an integer >= 1"),
    ([*SVA, "attention=contiformer", "model.attention.actfn=gelu"], "actfn='gelu'; valid: "),
    ([*CHARLM, "model.n_heads=5"], "(FSNAttention; model.k=16, model.n_heads=5): d_model=16 is not divisible"),
    ([*CHARLM, "model.attention.n_harmonics=0"], "n_harmonics=0 must be an integer >= 1"),
    ([*SVA, "attention=kuramoto", "+model.attention.bias=false"], "KuramotoAttention takes no 'bias'"),
]


@pytest.mark.parametrize(("overrides", "says"), RULES, ids=[" ".join(o[2:]) for o, _ in RULES])
def test_a_declared_rule_is_reported_and_the_class_refuses_it_too(compose, overrides, says):
    cfg = compose(overrides)
    problems = config_problems(cfg)
    assert len(problems) == 1 and says in problems[0], problems
    with pytest.raises(Exception, match="|".join(["valid", "must be", "divisible", "even", "takes no", "unexpected",
                                                  "need"])):
        instantiate(cfg.model, **DIMS[str(cfg.experiment_name)])


def test_a_backbone_with_its_own_attention_refuses_an_attention_group(compose):
    (problem,) = config_problems(compose([*CHARLM, "model=rope_transformer", "attention=softmax"]))
    assert "RopeTransformerLM (oscrepro.models.rope_transformer) has its own attention" in problem
    (problem,) = config_problems(compose([*CHARLM, "model=rope_transformer", "~attention", "model.d_model=6",
                                          "model.n_heads=2"]))
    assert problem == "model (RopeTransformerLM): its attention: RoPE needs an even head dimension (d_model / " \
                      "n_heads), got 3"


def test_a_missing_mechanism_names_the_attention_configs_that_fit(compose):
    (problem,) = config_problems(compose([*SVA, "~attention"]))
    assert problem.startswith("model.attention is missing: EncoderClassifier (oscrepro.models.transformer) builds "
                              "its attention with the 'vector' contract: choose attention=contiformer, ")
    assert "kuramoto" in problem  # a phase coupling law also runs standalone on a vector backbone


@pytest.mark.parametrize("overrides", [
    SVA, CHARLM, [*SVA, "attention=kuramoto"], [*SVA, "attention=fsn"], ["experiment=osciformer/xor", "attention=fqo"],
    [*SVA, "model.attention.d_osc=3"], ["experiment=coupledqk/mqar", "budget=smoke", "attention=gqa"],
    [*CHARLM, "model=rope_transformer", "~attention"], ["experiment=osciformer/resonance", "budget=smoke"],
])
def test_combinations_that_train_are_not_refused(compose, overrides):
    assert config_problems(compose(overrides)) == []


@pytest.mark.parametrize(("overrides", "says"), [
    (["trainer.max_epochs=0"], "trainer.max_epochs=0: trains nothing"),
    (["trainer.max_epochs=-1"], "trainer.max_epochs=-1 with trainer.max_steps=None: no limit on training"),
    (["trainer.max_epochs=null", "+trainer.max_steps=-1"],
     "trainer.max_epochs=None with trainer.max_steps=-1: no limit on training"),
    (["+trainer.max_steps=0"], "trainer.max_steps=0: must be an integer >= 1, or -1 (no limit)"),
    (["trainer.limit_train_batches=0"], "trainer.limit_train_batches=0: trains nothing"),
])
def test_a_run_that_would_train_nothing_or_forever_is_refused(compose, overrides, says):
    problems = config_problems(compose([*SVA, *overrides]))
    assert len(problems) == 1 and problems[0].startswith(says), problems


def test_step_limited_runs_stay_valid(compose):
    assert config_problems(compose([*SVA, "trainer.max_epochs=-1", "+trainer.max_steps=5"])) == []
    assert config_problems(compose(["experiment=coupledqk/mqar", "budget=smoke"])) == []  # max_epochs -1, steps


def test_a_sweep_expands_as_hydras_basic_sweeper_does():
    plan = sweep.plan(["-m", "experiment=fqo/sva", "seed=0,1", "attention=fqo,softmax"], CONF_DIR)
    assert plan.multirun and plan.runs
    assert plan.jobs == [["experiment=fqo/sva", "seed=0", "attention=fqo"],
                         ["experiment=fqo/sva", "seed=0", "attention=softmax"],
                         ["experiment=fqo/sva", "seed=1", "attention=fqo"],
                         ["experiment=fqo/sva", "seed=1", "attention=softmax"]]
    ranged = sweep.plan(["--multirun", "seed=range(0,3)", "model.d_model=choice(8,16)"], CONF_DIR)
    assert [job[0] for job in ranged.jobs] == ["seed=0", "seed=0", "seed=1", "seed=1", "seed=2", "seed=2"]
    assert sweep.plan(["hydra.mode=MULTIRUN", "seed=0,1"], CONF_DIR).jobs == [["hydra.mode=MULTIRUN", "seed=0"],
                                                                               ["hydra.mode=MULTIRUN", "seed=1"]]
    assert sweep.plan(["seed=3"], CONF_DIR) == sweep.Plan(jobs=[["seed=3"]], multirun=False, runs=True)
    assert not sweep.plan(["--cfg", "job", "seed=3"], CONF_DIR).runs  # prints the config, runs nothing


@pytest.mark.parametrize(("overrides", "says"), [
    ([*SVA, "+model.foo=1"], "EncoderClassifier takes no 'foo'"),  # **encoder_kwargs followed to Encoder
    ([*SVA, "trainer.precision=bogus"], "trainer.precision='bogus': must be one of Lightning's precisions"),
])
def test_keys_and_values_the_constructors_would_refuse(compose, overrides, says):
    """A key no constructor takes and a precision Lightning refuses were a traceback and a failed record."""
    assert any(says in p for p in config_problems(compose(overrides))), config_problems(compose(overrides))


def test_a_record_keeps_the_cpu_time_it_took_not_the_wall_time_it_waited(tmp_path):
    """``cpu_time_s`` is the process's CPU time between start and finish: work counts, waiting (a run whose threads
    waited for cores shared with other work) does not. The decide planner prices runs from it."""
    import json
    import time

    from omegaconf import OmegaConf

    from oscrepro.runs.record import RunRecord

    rec = RunRecord(tmp_path / "run")
    rec.start(OmegaConf.create({"a": 1}), {})
    time.sleep(0.3)  # waiting: wall time, no CPU time
    t_end = time.process_time() + 0.2
    while time.process_time() < t_end:  # working: CPU time
        pass
    rec.finish("ok", {"val/loss": 1.0}, {})
    st = json.loads((tmp_path / "run" / "status.json").read_text())
    assert st["wall_time_s"] >= 0.5
    assert 0.18 <= st["cpu_time_s"] < st["wall_time_s"] - 0.2
