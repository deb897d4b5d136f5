"""Bit-stream XOR (parity) in dense and event-based encodings (osciformer Sec. 7, Table 4; ODE-LSTM, Lechner &
Hasani 2020, ``irregular_sampled_datasets.py::XORData``).

A sample is a bit string of length uniform in ``2 .. pad - 1`` (2..31 for pad 32); its label is the parity (XOR of
all bits). Semantics of ODE-LSTM's generator, re-implemented vectorised with a local generator:

* dense (equidistant): one event per bit, elapsed time 1 per event;
* event-based (irregular): an event only where the bit differs from the previous bit (the first bit always is one),
  its elapsed time = steps since the last written event; a final event repeats the last bit to flush a trailing
  run (written only if the last bit was not itself a change), so the string is recoverable: each event starts a run
  that lasts until the next event, and the last event sits on the last bit;
* elapsed times are divided by the pad size (32).

Timestamps: ODE-LSTM feeds the model the elapsed *gap* per event; the attention contract wants absolute times, so
``t`` (and ``meta["times"]``) holds the cumulative sum of the gaps, i.e. ``t = position / pad`` where
``position`` (1-based) is the bit the event sits on; the gap is ``diff(t)`` (the first gap is ``t[0]``). The
feature channel ``x`` is the event's bit (the generator defines no other channel). With ``pad = 32`` no string
has more than 31 events, so ODE-LSTM's "abort when the pad is full" never truncates anything.

Where the source is silent we chose: 10K validation strings from a third stream (ODE-LSTM has train 100K and
test 10K only); splits use ``SeedSequence([seed, k])``, k = 0/1/2, not ODE-LSTM's fixed seeds 1234984 / 48736.
"""

from __future__ import annotations

import numpy as np

from oscrepro.data.irregular import IrregularArrays, IrregularDataModule, compact

ENCODINGS = ("event", "dense")


def generate(n: int, seed: int, encoding: str = "event", pad: int = 32) -> dict[str, np.ndarray]:
    """``n`` parity samples: ``x`` (n, pad, 1) float32 bits at the events, ``t`` (n, pad) float32 cumulative times
    (position / pad, padding repeats the last time), ``mask`` (n, pad) bool, ``y`` (n,) int64 parity.

    The bit strings depend on (n, seed, pad) only, so both encodings of one seed describe the same strings.
    """
    if encoding not in ENCODINGS:
        raise ValueError(f"encoding={encoding!r}; valid: {', '.join(ENCODINGS)}")
    rng = np.random.default_rng(seed)
    length = rng.integers(2, pad, size=n)  # (n,) uniform in 2 .. pad-1, as ODE-LSTM's randint(2, pad)
    pos = np.arange(pad - 1)  # bit index 0 .. pad-2
    valid = pos[None, :] < length[:, None]  # (n, pad-1)
    bits = np.where(valid, rng.integers(0, 2, size=(n, pad - 1)), 0)  # (n, pad-1)
    y = bits.sum(axis=1) % 2  # parity
    if encoding == "dense":
        event = valid
    else:
        change = np.ones_like(valid)
        change[:, 1:] = bits[:, 1:] != bits[:, :-1]  # first bit: a change from "no bit yet"
        event = valid & (change | (pos[None, :] == length[:, None] - 1))  # plus the flush on the last bit
    times = np.broadcast_to((pos + 1) / pad, bits.shape)  # cumulative elapsed / pad at every bit
    x, t, mask = compact(bits[..., None].astype(np.float32), times, event, width=pad)
    return {"x": x, "t": t, "mask": mask, "y": y.astype(np.int64)}


def expand_events(x: np.ndarray, t: np.ndarray, mask: np.ndarray, pad: int = 32) -> list[np.ndarray]:
    """Inverse of the encoding: each event's bit fills the positions up to the next event -> one bit array per row
    (works for both encodings; used by the tests)."""
    out = []
    for xi, ti, mi in zip(x[..., 0], t, mask, strict=True):
        positions = np.rint(ti[mi] * pad).astype(np.int64)  # 1-based bit positions of the events
        run = np.diff(np.concatenate([positions, positions[-1:] + 1]))  # event k covers [p_k, p_{k+1})
        out.append(np.repeat(xi[mi], run).astype(np.int64))
    return out


class XORDataModule(IrregularDataModule):
    """Parity of 2..31-bit strings in the dense or event-based encoding (module docstring); batches ``(x, y, meta)``
    with x (B, T, 1) bits, y (B,) parity, meta times / mask."""

    def __init__(self, encoding: str = "event", pad: int = 32, n_train: int = 100_000, n_val: int = 10_000,
                 n_test: int = 10_000, batch_size: int = 128, seed: int = 0, drop_rate: float = 0.0,
                 num_workers: int = 0) -> None:
        super().__init__(batch_size=batch_size, seed=seed, drop_rate=drop_rate, num_workers=num_workers)
        if encoding not in ENCODINGS:
            raise ValueError(f"encoding={encoding!r}; valid: {', '.join(ENCODINGS)}")
        self.encoding, self.pad = encoding, pad
        self.sizes = {"train": n_train, "val": n_val, "test": n_test}
        self.n_classes = 2
        sizes = "/".join(f"{n:,}" for n in self.sizes.values())
        self.source = (f"synthetic bit-stream XOR, {encoding} encoding (ODE-LSTM XORData semantics; oscrepro.data.xor):"
                       f" 2..{pad - 1} bits, times = position/{pad}, train/val/test {sizes}, seed={seed} "
                       f"(SeedSequence streams 0/1/2)")

    def build_splits(self) -> dict[str, IrregularArrays]:
        out = {}
        for k, (name, n) in enumerate(self.sizes.items()):
            split_seed = int(np.random.SeedSequence([self.seed, k]).generate_state(1)[0])  # disjoint streams
            d = generate(n, split_seed, self.encoding, self.pad)
            out[name] = IrregularArrays(d["x"], d["t"], d["mask"], d["y"])
        return out
