"""Readers and the simulator behind :mod:`oscrepro.data.events`: NHP/THP pickles, RMTPP text, tick's Hawkes process.

Every source yields :class:`EventSeq` records (0-based types, absolute times in the source's unit); the data module
turns them into rows and batches.

* **NHP/THP pickles** (Mei & Eisner 2017; Zuo et al. 2020): a dict with ``dim_process`` and ``train`` / ``dev`` /
  ``test`` lists of sequences, each a list of ``{"time_since_start", "time_since_last_event", "type_event"}``.
  They come from third parties, so :func:`load_nhp_pickle` unpickles through :class:`NHPUnpickler`, which resolves
  only numpy's scalar reconstruction (``numpy[._]core.multiarray.scalar`` with a non-object dtype), ``numpy.dtype``
  and ``_codecs.encode(str, "latin1")`` (how Python 3 writes bytes at protocol 2); any other global
  (``os.system``, ``builtins.eval``, ``subprocess.Popen`` ...) raises ``pickle.UnpicklingError`` *before* anything
  is called. Containers, numbers and strings need no global.
* **RMTPP text** (Du et al. 2016, ``dunan/NeuralPointProcess``): ``event-K-{train,test}.txt`` (1-based type ids) and
  ``time-K-{train,test}.txt`` (absolute times), one sequence per line. The NHP conversion rule
  (``shared/data/event_seq_tpp/SOURCE.md``, verified there on the SO subset): type - 1; StackOverflow times / 1e6;
  NHP train = the first ceil(0.9 n) RMTPP-train sequences, dev = the rest; fold K test = RMTPP test K.
  :func:`recover_times` fills missing train timestamps from other files that hold the same sequence (event lines
  are unique in SO, so an equal event line is the same sequence).
* **Hawkes** (:class:`HawkesSpec`, :func:`simulate_hawkes`): multivariate, exponential kernels
  ``phi_ij(t) = alpha_ij exp(-beta_ij t)`` (the effect of a type-j event on type i), simulated by
  ``tick.hawkes.SimuHawkesExpKernels`` (Ogata thinning), which is parametrised by the kernel's L1 norm
  ``adjacency = alpha / beta``. Stationary rate ``(I - alpha/beta)^-1 mu`` when the spectral radius of alpha/beta
  is below 1.
"""

from __future__ import annotations

import math
import os
import pickle
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

try:  # numpy >= 2 keeps the scalar reconstructor in numpy._core; numpy 1.x in numpy.core
    from numpy._core.multiarray import scalar as _numpy_scalar
except ImportError:  # pragma: no cover - numpy 1.x
    from numpy.core.multiarray import scalar as _numpy_scalar

NHP_KEYS = ("time_since_start", "time_since_last_event", "type_event")
TICK_PIN = "tick==0.8.0.2"
MAX_TICK_SEED = 2**31 - 1  # tick's C++ Hawkes takes a signed 32-bit seed


class EventSeq(NamedTuple):
    """One event sequence: ``types`` (n,) int64 in 0..K-1, ``times`` (n,) float64 non-decreasing, source unit."""

    types: np.ndarray
    times: np.ndarray


def _validated(types: np.ndarray, times: np.ndarray, where: str) -> EventSeq:
    if types.shape != times.shape:
        raise ValueError(f"{where}: {types.size} types but {times.size} times")
    if (types < 0).any() or (np.diff(times) < 0).any():
        raise ValueError(f"{where}: negative type id or decreasing times")
    return EventSeq(types.astype(np.int64), times.astype(np.float64))


# ----------------------------------------------------------------------------------------------- NHP/THP pickles


def _scalar(dtype: np.dtype, data: bytes | str) -> np.generic:
    """numpy's scalar reconstructor, limited to plain (non-object) dtypes built from raw bytes. A Python-2 file's
    raw bytes arrive as ``str`` (``encoding="latin-1"``); they are encoded back, as numpy itself does."""
    if isinstance(data, str):
        data = data.encode("latin-1")
    if not isinstance(dtype, np.dtype) or dtype.hasobject or not isinstance(data, bytes):
        raise pickle.UnpicklingError("numpy scalar reconstruction is allowed only for non-object dtypes from bytes")
    return _numpy_scalar(dtype, data)


def _latin1_bytes(text: str, encoding: str) -> bytes:
    """``_codecs.encode`` as Python 3 writes ``bytes`` at protocol <= 2 (``encode(text, "latin1")``), nothing else."""
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise pickle.UnpicklingError("_codecs.encode is allowed only as encode(str, 'latin1') (protocol-2 bytes)")
    return text.encode("latin-1")


class NHPUnpickler(pickle.Unpickler):
    """Unpickler that resolves only the globals NHP/THP files reference; anything else is refused, unresolved."""

    ALLOWED: dict[tuple[str, str], Any] = {
        ("numpy.core.multiarray", "scalar"): _scalar,  # written by numpy 1.x (the NHP/THP files)
        ("numpy._core.multiarray", "scalar"): _scalar,  # written by numpy 2.x
        ("numpy", "dtype"): np.dtype,
        ("_codecs", "encode"): _latin1_bytes,  # bytes in a protocol-2 pickle written by Python 3 (numpy scalar data)
    }

    def find_class(self, module: str, name: str) -> Any:
        try:
            return self.ALLOWED[(module, name)]
        except KeyError:
            allowed = ", ".join(f"{m}.{n}" for m, n in self.ALLOWED)
            raise pickle.UnpicklingError(
                f"forbidden global '{module}.{name}' in an NHP/THP event pickle: only {allowed} may be loaded "
                f"(numpy scalars); the file is refused without executing anything") from None


def load_nhp_pickle(path: str | os.PathLike[str]) -> dict:
    """The content of an NHP/THP pickle (keys as in the file), read with :class:`NHPUnpickler` and
    ``encoding="latin-1"`` (the files were written by Python 2). Raises ``pickle.UnpicklingError`` naming any
    forbidden global, and for a file whose top level is not a dict."""
    with open(path, "rb") as f:
        data = NHPUnpickler(f, encoding="latin-1").load()
    if not isinstance(data, dict):
        raise pickle.UnpicklingError(f"{path}: expected a dict (dim_process, train, dev, test), got {type(data)}")
    return data


def nhp_sequences(records: Sequence[Sequence[Mapping[str, Any]]], where: str = "pickle") -> list[EventSeq]:
    """NHP event dicts -> :class:`EventSeq` (times = ``time_since_start``, as THP and PhysioPro read them)."""
    out = []
    for i, seq in enumerate(records):
        types = np.array([int(e["type_event"]) for e in seq], dtype=np.int64)
        times = np.array([float(e["time_since_start"]) for e in seq], dtype=np.float64)
        out.append(_validated(types, times, f"{where}, sequence {i}"))
    return out


def to_nhp_records(seqs: Sequence[EventSeq]) -> list[list[dict[str, float | int]]]:
    """:class:`EventSeq` -> NHP event dicts (``time_since_last_event`` = 0 for the first event, as in NHP)."""
    out = []
    for s in seqs:
        gaps = np.diff(s.times, prepend=s.times[:1])  # (n,), first gap 0
        out.append([{"time_since_start": float(t), "time_since_last_event": float(g), "type_event": int(k)}
                    for t, g, k in zip(s.times, gaps, s.types, strict=True)])
    return out


# ------------------------------------------------------------------------------------------------------ RMTPP text


def read_lines(path: Path) -> list[str]:
    """Non-empty lines, whitespace-normalised (a line is one sequence)."""
    with open(path) as f:
        return [" ".join(line.split()) for line in f if line.strip()]


def parse_rmtpp(event_lines: Sequence[str], time_lines: Sequence[str], divisor: float = 1.0,
                where: str = "rmtpp") -> list[EventSeq]:
    """Matching RMTPP lines -> :class:`EventSeq` with type = id - 1 and times / ``divisor`` (SOURCE.md rule)."""
    if len(event_lines) != len(time_lines):
        raise ValueError(f"{where}: {len(event_lines)} event lines but {len(time_lines)} time lines")
    return [_validated(np.array(e.split(), dtype=np.int64) - 1, np.array(t.split(), dtype=np.float64) / divisor,
                       f"{where}, line {i + 1}")
            for i, (e, t) in enumerate(zip(event_lines, time_lines, strict=True))]


def recover_times(event_lines: Sequence[str], donors: Sequence[tuple[Sequence[str], Sequence[str]]]
                  ) -> list[str | None]:
    """The time line of each event line, looked up in ``donors`` ((event lines, time lines) of other files holding
    the same sequences); ``None`` where no donor has it. Two donors disagreeing on one sequence is an error."""
    lookup: dict[str, str] = {}
    for events, times in donors:
        for e, t in zip(events, times, strict=True):
            if lookup.setdefault(e, t) != t:
                raise ValueError("two files give different timestamps for one event line: not the same sequence")
    return [lookup.get(e) for e in event_lines]


def nhp_train_count(n: int, train_fraction: float = 0.9) -> int:
    """NHP's train size from n RMTPP-train sequences: ceil(0.9 n) (SO fold 1: 4,777 of 5,307; BookOrder: 90)."""
    return min(n, math.ceil(train_fraction * n - 1e-9))  # - 1e-9: 0.9 * 100 is 90.00000000000001 in floats


# --------------------------------------------------------------------------------------------------------- Hawkes


def _plain(value: Any) -> Any:
    """Hydra containers -> builtins (a DictConfig / ListConfig is a Mapping / Sequence)."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, str):
        return [_plain(v) for v in value]
    return value


@dataclass(frozen=True)
class HawkesSpec:
    """A K-type exponential-kernel Hawkes process and how many sequences of it to draw per split.

    ``lambda_i(t) = mu_i + sum_j sum_{t_k^j < t} alpha_ij exp(-beta_ij (t - t_k^j))``. ``baseline`` is mu (K,),
    ``alpha`` the kernel amplitudes (K, K) and ``beta`` the decays (K, K); a scalar is broadcast. Each sequence
    starts empty at time 0 and ends at ``end_time`` or after ``max_events`` events, whichever comes first.
    """

    n_types: int
    baseline: tuple[float, ...]
    alpha: tuple[tuple[float, ...], ...]
    beta: tuple[tuple[float, ...], ...]
    end_time: float | None = None
    max_events: int | None = None
    n_train: int = 1000
    n_val: int = 100
    n_test: int = 200

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any]) -> HawkesSpec:
        """From a mapping (a Hydra node); scalars broadcast, shapes and stability are checked."""
        cfg = _plain(cfg)
        k = int(cfg["n_types"])
        mu = np.broadcast_to(np.asarray(cfg["baseline"], dtype=np.float64), (k,))
        alpha = np.broadcast_to(np.asarray(cfg["alpha"], dtype=np.float64), (k, k))
        beta = np.broadcast_to(np.asarray(cfg["beta"], dtype=np.float64), (k, k))
        end, cap = cfg.get("end_time"), cfg.get("max_events")
        spec = cls(k, tuple(mu.tolist()), tuple(map(tuple, alpha.tolist())), tuple(map(tuple, beta.tolist())),
                   None if end is None else float(end), None if cap is None else int(cap),
                   int(cfg.get("n_train", 1000)), int(cfg.get("n_val", 100)), int(cfg.get("n_test", 200)))
        if (mu <= 0).any() or (alpha < 0).any() or (beta <= 0).any():
            raise ValueError("Hawkes parameters need baseline > 0, alpha >= 0, beta > 0")
        if spec.end_time is None and spec.max_events is None:
            raise ValueError("give end_time or max_events (or both) for the Hawkes sequences")
        if spec.spectral_radius() >= 1:
            raise ValueError(f"spectral radius of alpha/beta is {spec.spectral_radius():.3f} >= 1: the process "
                             f"explodes (no stationary rate)")
        return spec

    def arrays(self) -> dict[str, np.ndarray]:
        """``baseline`` (K,), ``alpha`` (K, K), ``beta`` (K, K) as float64 arrays."""
        return {"baseline": np.array(self.baseline), "alpha": np.array(self.alpha), "beta": np.array(self.beta)}

    def branching(self) -> np.ndarray:
        """alpha / beta (K, K): expected type-i children of one type-j event (tick's ``adjacency``)."""
        return np.array(self.alpha) / np.array(self.beta)

    def spectral_radius(self) -> float:
        return float(np.abs(np.linalg.eigvals(self.branching())).max())

    def stationary_rate(self) -> np.ndarray:
        """Per-type rate of the stationary process, (I - alpha/beta)^-1 mu, shape (K,)."""
        return np.linalg.solve(np.eye(self.n_types) - self.branching(), np.array(self.baseline))


def _tick_simulator() -> type:
    """``tick.hawkes.SimuHawkesExpKernels``, imported on first use (tick is heavy: ~2 s)."""
    with warnings.catch_warnings():
        # tick 0.8.0.2 tick/simulation/features.py imports toeplitz from scipy.linalg.special_matrices, deprecated
        # in scipy 1.x (to be removed in 2.0): import-time noise, no effect on the Hawkes simulation
        warnings.filterwarnings("ignore", message=r".*scipy\.linalg\.special_matrices", category=DeprecationWarning)
        try:
            from tick.hawkes import SimuHawkesExpKernels
        except ImportError as e:
            raise ImportError(f"simulating Hawkes sequences needs tick: pip install {TICK_PIN} "
                              f"(requirements.lock pins it)") from e
    return SimuHawkesExpKernels


def simulate_hawkes(spec: HawkesSpec, n: int, seed_seq: np.random.SeedSequence) -> list[EventSeq]:
    """``n`` independent sequences, each from an empty history at time 0; sequence i uses tick seed
    ``seed_seq.generate_state(n)[i] mod 2^31 - 1``, so a split is a pure function of (spec, n, seed_seq)."""
    simulator = _tick_simulator()
    arrays = spec.arrays()
    seeds = seed_seq.generate_state(n, dtype=np.uint64) % MAX_TICK_SEED  # (n,)
    out = []
    for seed in seeds:
        sim = simulator(adjacency=spec.branching(), decays=arrays["beta"], baseline=arrays["baseline"],
                        end_time=spec.end_time, max_jumps=spec.max_events, seed=int(seed), verbose=False)
        sim.simulate()
        times = np.concatenate(sim.timestamps)  # per-type arrays -> one stream
        types = np.concatenate([np.full(len(ts), k) for k, ts in enumerate(sim.timestamps)])
        order = np.argsort(times, kind="stable")
        out.append(_validated(types[order], times[order], "tick simulation"))
    return out
