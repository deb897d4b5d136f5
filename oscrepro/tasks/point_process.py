"""Temporal point-process task (osciformer Table 1): log-likelihood, next-type accuracy, next-time RMSE.

Batches are those of :class:`~oscrepro.data.events.EventDataModule`: ``(x, y, meta)`` with one-hot types x
(B, T, K), types y (B, T), ``meta['times']`` (B, T) and ``meta['mask']`` (B, T), right-padded. The model is a
:class:`~oscrepro.models.point_process.ContinuousTimeTPP` (forward -> hidden states and next-event predictions,
``intensity(hidden, elapsed)``). The log-likelihood is :func:`~oscrepro.tasks.tpp_likelihood.log_likelihood` of
the model's intensity (first event unscored, compensator over [t_1, t_N]; its docstring).

Objective, THP's (``Main.train_epoch``) and PhysioPro's multitask TPP loss (``loss_fn: multitask``), summed over
the batch's real events and divided by the batch size as PhysioPro does:

    loss = [ -sum_b LL_b + type_weight * sum CE(next type) + sum (gap_hat - gap)^2 / time_loss_scale ] / B,

CE with ``label_smoothing`` (THP / PhysioPro: 0.1; torch's smoothing gives the target 1 - eps + eps/K, theirs
1 - eps), both next-event terms over events 2..N predicted from the state after the previous event.

Evaluation logs, per split: ``ll_seq`` (ContiFormer / PhysioPro convention: mean over sequences of LL_b / N_b),
``ll_event`` (THP: sum LL / sum N), ``ll`` (the one ``ll_convention`` names; tables read it), ``acc`` (next-type
accuracy) and ``rmse`` (next-gap RMSE, pooled over every predicted event of the split) over events 2..N, and
``loss`` (the objective per sequence). The compensator is estimated by ``estimator`` / ``n_nodes`` in training
(default Monte Carlo, 100 samples per interval as THP) and ``eval_estimator`` / ``eval_n_nodes`` in evaluation
(default deterministic Gauss-Legendre: the reported LL does not vary between evaluations of the same model).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from oscrepro.tasks.base import BaseTask
from oscrepro.tasks.tpp_likelihood import CONVENTIONS, ESTIMATORS, LogLikelihood, log_likelihood, reduce_ll


class NextEventTerms(NamedTuple):
    """Sums over a batch's predicted events (2..N of every row): cross-entropy, correct types, squared gap error,
    and their count."""

    ce: Tensor
    correct: Tensor
    se: Tensor
    n: Tensor


class PointProcessTask(BaseTask):
    """Multitask TPP training and LL / accuracy / RMSE evaluation (module docstring)."""

    def __init__(self, *args: Any, estimator: str = "mc", n_nodes: int = 100, eval_estimator: str = "gauss",
                 eval_n_nodes: int = 32, ll_convention: str = "sequence_mean", type_weight: float = 1.0,
                 time_loss_scale: float = 100.0, label_smoothing: float = 0.1, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name, value in (("estimator", estimator), ("eval_estimator", eval_estimator)):
            if value not in ESTIMATORS:
                raise ValueError(f"task.{name}={value!r}; valid: {', '.join(ESTIMATORS)}")
        if ll_convention not in CONVENTIONS:
            raise ValueError(f"task.ll_convention={ll_convention!r}; valid: {', '.join(CONVENTIONS)}")
        self.estimator, self.n_nodes = estimator, n_nodes
        self.eval_estimator, self.eval_n_nodes = eval_estimator, eval_n_nodes
        self.ll_convention = ll_convention
        self.type_weight, self.time_loss_scale, self.label_smoothing = type_weight, time_loss_scale, label_smoothing
        self._acc: dict[str, list[Tensor]] = defaultdict(list)

    def score(self, batch: tuple, estimator: str, n_nodes: int) -> tuple[LogLikelihood, NextEventTerms]:
        """Forward pass, the LL of every row, and the next-event sums of the batch."""
        x, types, meta = batch
        times, mask = meta["times"], meta["mask"]
        out, _ = self.model(x, times=times, mask=mask)
        hidden = out.hidden[:, :-1]  # (B, T-1, D) state after event j drives interval (t_j, t_{j+1}]
        ll = log_likelihood(lambda s: self.model.intensity(hidden, s), times, types, mask, estimator, n_nodes)
        real = mask[:, 1:]  # (B, T-1) events 2..N
        target = types[:, 1:][real]  # (P,) next types of the P predicted events
        logits = out.type_logits[:, :-1][real]  # (P, K)
        gap = (times[:, 1:] - times[:, :-1])[real]  # (P,)
        ce = F.cross_entropy(logits, target, label_smoothing=self.label_smoothing, reduction="sum")
        se = (out.gap[:, :-1][real] - gap).square().sum()
        return ll, NextEventTerms(ce, (logits.argmax(-1) == target).sum(), se, real.sum())

    def objective(self, ll: LogLikelihood, terms: NextEventTerms) -> Tensor:
        """The multitask loss of one batch (module docstring)."""
        total = -ll.total.sum() + self.type_weight * terms.ce + terms.se / self.time_loss_scale
        return total / len(ll.total)

    def loss(self, batch: tuple) -> Tensor:
        return self.objective(*self.score(batch, self.estimator, self.n_nodes))

    def _eval_step(self, batch: tuple) -> None:
        ll, terms = self.score(batch, self.eval_estimator, self.eval_n_nodes)
        store = self._acc
        store["ll"].append(ll.total.detach().double())
        store["n_events"].append(ll.n_events)
        store["loss_sum"].append(self.objective(ll, terms).detach().double()[None] * len(ll.total))
        for name, value in terms._asdict().items():
            store[name].append(value.detach().double()[None])

    def validation_step(self, batch: tuple, batch_idx: int) -> None:
        self._eval_step(batch)

    def test_step(self, batch: tuple, batch_idx: int) -> None:
        self._eval_step(batch)

    def _flush(self, split: str) -> None:
        s = {k: torch.cat(v) for k, v in self._acc.items()}
        self._acc.clear()
        if "ll" not in s:
            return
        ll, n_events = s["ll"], s["n_events"]
        n_pred = float(s["n"].sum())
        by = {c: reduce_ll(ll, n_events, c) for c in CONVENTIONS}
        metrics = {
            f"{split}/ll_seq": by["sequence_mean"], f"{split}/ll_event": by["event_mean"],
            f"{split}/ll": by[self.ll_convention], f"{split}/loss": s["loss_sum"].sum() / len(ll),
        }
        if n_pred:  # no next event to predict: accuracy and RMSE are undefined and not logged (never NaN: a
            metrics[f"{split}/acc"] = s["correct"].sum() / n_pred  # non-finite final metric voids a run)
            metrics[f"{split}/rmse"] = (s["se"].sum() / n_pred).sqrt()
        self.log_dict({k: v.float() for k, v in metrics.items()}, prog_bar=split == "val")

    def on_validation_epoch_end(self) -> None:
        self._flush("val")

    def on_test_epoch_end(self) -> None:
        self._flush("test")
