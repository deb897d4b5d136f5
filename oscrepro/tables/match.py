"""Matched parameter counts for the cross-paper leaderboard (issue 17): every mechanism on the same backbone, the
feed-forward width d_ff adjusted so that the model's count is within 1 % of the softmax model's.

Why d_ff: the mechanisms differ in their attention parameters (fqo's anchors and coupling maps, coupled QK's
dynamics, Differential attention's second query/key maps, OsciFormer's oscillator parameters, ...), and d_model
cannot absorb that at 1 % because it moves in steps of n_heads (a step at d_model 128 is ~2 % of the model per
head). A model's count is affine in d_ff (each layer's two feed-forward maps), so two evaluations give the slope
and the nearest integer d_ff follows; it is then checked, with its neighbours, by building the model.

The count is read from the built model (``sum(p.numel())``), never from a formula: whatever a mechanism adds is
counted. Backbones and mechanisms come from conf/ (``conf/model/<backbone>.yaml``, ``conf/attention/<name>.yaml``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.utils import instantiate
from omegaconf import OmegaConf
from torch import nn

CONF = Path(__file__).resolve().parents[2] / "conf"
TOLERANCE = 0.01


class MatchError(ValueError):
    """No d_ff brings the mechanism within the tolerance of the target count (or the knob range is exhausted)."""


@dataclass(frozen=True)
class Matched:
    attention: str
    d_ff: int
    params: int
    target: int

    @property
    def rel_error(self) -> float:
        return (self.params - self.target) / self.target


def n_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def builder(backbone: str, attention: str, dims: dict[str, int], **overrides: Any) -> Callable[[int], nn.Module]:
    """d_ff -> the backbone (``conf/model/<backbone>.yaml``) with ``conf/attention/<attention>.yaml``, built with
    the data dimensions ``dims`` (e.g. ``vocab_size``) and extra model overrides."""
    model_cfg = OmegaConf.load(CONF / "model" / f"{backbone}.yaml")
    model_cfg.attention = OmegaConf.load(CONF / "attention" / f"{attention}.yaml")
    for k, v in overrides.items():
        OmegaConf.update(model_cfg, k, v)

    def build(d_ff: int) -> nn.Module:
        cfg = model_cfg.copy()
        cfg.d_ff = int(d_ff)
        return instantiate(cfg, **dims)

    return build


def match_d_ff(build: Callable[[int], nn.Module], target: int, start: int, attention: str = "",
               tolerance: float = TOLERANCE) -> Matched:
    """The d_ff >= 1 whose model count is nearest ``target`` (affine in d_ff: two builds, then the nearest integer
    and its neighbours are built and counted). Raises MatchError beyond ``tolerance``."""
    c0, c1 = n_params(build(start)), n_params(build(start + 1))
    slope = c1 - c0
    if slope <= 0:
        raise MatchError(f"{attention}: the count does not grow with d_ff ({c0} -> {c1})")
    guess = max(1, round(start + (target - c0) / slope))
    best = min(((d, n_params(build(d))) for d in (guess - 1, guess, guess + 1) if d >= 1),
               key=lambda dc: abs(dc[1] - target))
    matched = Matched(attention, best[0], best[1], target)
    if abs(matched.rel_error) > tolerance:
        raise MatchError(f"{attention}: nearest d_ff={best[0]} gives {best[1]:,} parameters, "
                         f"{100 * matched.rel_error:+.2f} % from {target:,} (tolerance {100 * tolerance:.0f} %)")
    return matched


def match_all(backbone: str, dims: dict[str, int], mechanisms: tuple[str, ...], reference: str = "softmax",
              **overrides: Any) -> list[Matched]:
    """Every mechanism (``conf/attention/<name>.yaml``) matched to the reference mechanism's count at the
    backbone's own d_ff."""
    base_ff = int(OmegaConf.load(CONF / "model" / f"{backbone}.yaml").d_ff)
    target = n_params(builder(backbone, reference, dims, **overrides)(base_ff))
    return [match_d_ff(builder(backbone, m, dims, **overrides), target, base_ff, m) for m in mechanisms]


def _data_dims(cfg: Any, cache: dict[str, dict[str, int]]) -> dict[str, int]:
    """The model dims a run of ``cfg`` gets from its data (``model_dims`` after ``setup("fit")``), cached per data
    config: the rows of one task share their data."""
    from oscrepro.data.base import model_dims
    from oscrepro.data.integrity import setup_data

    key = OmegaConf.to_yaml(cfg.data, resolve=True)
    if key not in cache:
        cache[key] = model_dims(setup_data(cfg.data))
    return cache[key]


def match_rows(spec: Any, budget: str, extra: list[str] | None = None) -> list[Matched]:
    """For a table spec with ``match`` (``oscrepro.tables.spec``): each row's knob (``model.d_ff``) that brings its
    model within the tolerance of the reference row's count, as the row's first column composes it at ``budget``
    (data dims from the data module, as training gets them). The reference keeps its own knob value."""
    from oscrepro.runs.compose import compose_run

    knob = str(spec.match["knob"])
    if not knob.startswith("model."):
        raise MatchError(f"{spec.key}: match.knob={knob!r} is not a model key (model.d_ff)")
    tolerance = float(spec.match.get("tolerance", TOLERANCE))
    col = spec.columns[0].name
    dims_cache: dict[str, dict[str, int]] = {}

    def row_builder(i: int) -> tuple[Callable[[int], nn.Module], int]:
        cfg = compose_run([*spec.cell_overrides(i, col, budget, list(extra or [])), "seed=0"])
        dims = _data_dims(cfg, dims_cache)
        model_cfg = cfg.model
        name = knob.split(".", 1)[1]

        def build(value: int) -> nn.Module:
            c = model_cfg.copy()
            OmegaConf.update(c, name, int(value))
            return instantiate(c, **dims)

        return build, int(OmegaConf.select(model_cfg, name))

    labels = [r.label for r in spec.rows]
    ref = labels.index(spec.match["reference"])
    ref_build, ref_value = row_builder(ref)
    target = n_params(ref_build(ref_value))
    out: list[Matched] = []
    for i, label in enumerate(labels):
        if i == ref:
            out.append(Matched(label, ref_value, target, target))
            continue
        build, start = row_builder(i)
        out.append(match_d_ff(build, target, start, label, tolerance))
    return out


def with_matched_rows(spec: Any, budget: str, extra: list[str] | None = None) -> tuple[Any, list[Matched]]:
    """A copy of ``spec`` whose rows end in ``<knob>=<matched value>`` (the reference row's value is its own, so
    its runs are the plain experiment's), and the matches."""
    import copy

    matched = match_rows(spec, budget, extra)
    out = copy.deepcopy(spec)
    for row, m in zip(out.rows, matched, strict=True):
        row.overrides = [*row.overrides, f"{spec.match['knob']}={m.d_ff}"]
    return out, matched
