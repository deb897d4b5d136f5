"""History-free reference for event prediction: what a model scores without looking at any past event.

A TPP table at a reduced budget answers its claim only if the models use the history. The analogue of a language
model's unigram perplexity is the homogeneous Poisson process with per-type rates fitted on the training rows:

* rates lambda_k = (scored type-k events) / (total scored time), the maximum-likelihood estimate under the same
  likelihood the task reports (events 2..N of each row over [t_1, t_N]: :mod:`oscrepro.tasks.tpp_likelihood`);
* next type: the most frequent scored training type; next gap: the mean scored training gap.

Its test LL (both conventions of :func:`~oscrepro.tasks.tpp_likelihood.reduce_ll`), accuracy and RMSE are
computed on the very rows the runs are tested on (the data module of the table's own config), so a model's
margin over it is the part of its score that comes from the history. :func:`reference_notes` is a table ``post``
hook that writes it into the table header, one line per event set.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from oscrepro.data.integrity import instantiate_data
from oscrepro.tables.plan import plan
from oscrepro.tasks.tpp_likelihood import log_likelihood, reduce_ll


def _split(dm: Any, split: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(times float64, types int64, mask bool), each (N, T), of a set-up EventDataModule split."""
    a = dm.splits[split].arrays
    return torch.from_numpy(a.times).double(), torch.from_numpy(a.types).long(), torch.from_numpy(a.mask)


def poisson_rates(times: torch.Tensor, types: torch.Tensor, mask: torch.Tensor, n_types: int) -> torch.Tensor:
    """MLE per-type rates (K,) of a homogeneous Poisson process on events 2..N of each row over [t_1, t_N]."""
    last = torch.where(mask, times, times.new_full((), -torch.inf)).amax(dim=1)  # (N,) t_N
    span = (last - times[:, 0]).sum()
    counts = torch.bincount(types[:, 1:][mask[:, 1:]], minlength=n_types).double()  # (K,)
    if not span > 0:
        raise ValueError("the training rows span no time: cannot fit Poisson rates")
    return counts / span


def history_free_reference(dm: Any, split: str = "test") -> dict[str, float]:
    """The history-free scores on ``split`` of a set-up event data module (module docstring)."""
    k = int(dm.num_types)
    t_tr, y_tr, m_tr = _split(dm, "train")
    rates = poisson_rates(t_tr, y_tr, m_tr, k)  # (K,)
    gaps_tr = (t_tr[:, 1:] - t_tr[:, :-1])[m_tr[:, 1:]]
    majority = int(torch.bincount(y_tr[:, 1:][m_tr[:, 1:]], minlength=k).argmax())
    t, y, m = _split(dm, split)
    # a constant intensity: one Gauss node integrates it exactly; eps 0 for the exact log
    ll = log_likelihood(lambda s: rates.expand(*s.shape, k), t, y, m, "gauss", 1, eps=0.0)
    scored_y = y[:, 1:][m[:, 1:]]
    gaps = (t[:, 1:] - t[:, :-1])[m[:, 1:]]
    return {"ll_seq": float(reduce_ll(ll.total, ll.n_events, "sequence_mean")),
            "ll_event": float(reduce_ll(ll.total, ll.n_events, "event_mean")),
            "acc": float((scored_y == majority).double().mean()),
            "rmse": float(((gaps - gaps_tr.mean()) ** 2).mean().sqrt())}


def reference_notes(spec: Any, cells: Any, out_dir: Path, budget: str, results_dir: Path,
                    ll_convention: str = "sequence_mean") -> list[str]:
    """Table ``post`` hook: one header line with the history-free test scores of every event set the table's
    columns use, on the rows of the table's own first-row config at this budget."""

    requests = plan(spec, budget)
    done: set[str] = set()
    lines = []
    for col in spec.columns:
        reqs = requests.get((0, col.name))
        if not reqs:
            continue
        data_cfg = reqs[0].cfg.data
        key = repr(sorted((str(k), str(v)) for k, v in data_cfg.items()))
        if key in done:  # the LL / acc / RMSE columns of one set share its data
            continue
        done.add(key)
        dm = instantiate_data(data_cfg)[0]
        dm.setup("test")
        r = history_free_reference(dm)
        ll = r["ll_seq"] if ll_convention == "sequence_mean" else r["ll_event"]
        name = col.label.rsplit(" ", 1)[0]  # "StackOverflow LL" -> "StackOverflow"
        lines.append(f"{name} LL {ll:.3f}, acc. {r['acc']:.3f}, RMSE {r['rmse']:.3f}")
    if not lines:
        return []
    return ["**History-free reference** (homogeneous Poisson with the training rows' MLE rates, the majority "
            "training type, the mean training gap; computed here on the same test rows, not a run): "
            + "; ".join(lines) + ". A model above it uses the event history."]
