"""2-D spirals: interpolation and extrapolation from irregular noisy samples (osciformer Sec. 7, Fig. 2c/2d;
ContiFormer, Chen et al. 2023, ``microsoft/SeqML ContiFormer/spiral.py``, after the latent-ODE toy of Chen et al.
2018).

Semantics of ContiFormer's ``generate_spiral2d`` and its training loop, re-implemented with a local generator:

* a grid of ``n_total = 150`` times ``linspace(0, 6 pi, 150)``; an Archimedean spiral ``r = a + b z`` with ``a = 0``,
  ``b = 0.3`` (per-spiral jitter ``N(0, noise_a^2)`` on a and b, ``noise_a = 0``);
* counter-clockwise: ``z = t``, ``(r cos z + 5, r sin z)``; clockwise: ``z = 6 pi + 1 - t``,
  ``r = a + 50 b / z``, ``(r cos z - 5, r sin z)``, then reversed in time (the source's names: after the
  reversal this one spirals inwards around (-5, 0), the counter-clockwise one outwards around (5, 0));
* observations = trajectory + ``N(0, 0.05^2)`` noise; both coordinates min-max normalised with the clean
  trajectories' range;
* the model sees ``n_sample = 50`` of the first ``n_total / 2 = 75`` grid points (sorted, drawn without
  replacement) and is scored on the clean trajectory: the first 75 grid points are the *interpolation* part,
  the last 75 the *extrapolation* part (ContiFormer trains on all 150; ``target`` picks one part or ``all``);
* 200 training and 100 test spirals.

Batches: ``x`` (B, 50, 2) noisy observations at ``meta["times"]``, ``y`` (B, T_out, 2) clean targets at
``meta["target_times"]`` (T_out = 150, 75 or 75).

Where the source is silent (or its script default is narrow) we chose:
* ``rotation="both"`` (each spiral's direction a fair coin, the latent-ODE demo and ContiFormer's ``--cc 2``);
  ContiFormer's script default ``--cc True`` makes every spiral counter-clockwise (``rotation="cc"``);
* the observation draw is fixed per spiral (ContiFormer redraws one index set per training iteration, shared by
  the batch, and uses one fixed set for the whole test split);
* a validation split of 100 spirals from its own stream (ContiFormer selects on its test set);
* the min-max range comes from the training split's clean trajectories (ContiFormer uses all 300; with
  ``noise_a = 0`` the ranges agree).
"""

from __future__ import annotations

import math

import numpy as np

from oscrepro.data.irregular import IrregularArrays, IrregularDataModule

ROTATIONS = ("both", "cc", "cw")
TARGETS = ("all", "interpolation", "extrapolation")


def spiral_trajectories(n: int, rng: np.random.Generator, n_total: int = 150, stop: float = 6 * math.pi,
                        a: float = 0.0, b: float = 0.3, noise_a: float = 0.0, rotation: str = "both"
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Clean spirals (n, n_total, 2), their time grid (n_total,) and the clockwise flags (n,) (module docstring)."""
    if rotation not in ROTATIONS:
        raise ValueError(f"rotation={rotation!r}; valid: {', '.join(ROTATIONS)}")
    ts = np.linspace(0.0, stop, n_total)  # (n_total,)
    aa = (a + noise_a * rng.standard_normal(n))[:, None]  # (n, 1)
    bb = (b + noise_a * rng.standard_normal(n))[:, None]
    z_cw = stop + 1.0 - ts
    r_cw = aa + bb * 50.0 / z_cw  # (n, n_total)
    cw = np.stack([r_cw * np.cos(z_cw) - 5.0, r_cw * np.sin(z_cw)], axis=-1)[:, ::-1]  # reversed in time
    r_cc = aa + bb * ts
    cc = np.stack([r_cc * np.cos(ts) + 5.0, r_cc * np.sin(ts)], axis=-1)  # (n, n_total, 2)
    clockwise = rng.random(n) < 0.5 if rotation == "both" else np.full(n, rotation == "cw")
    return np.where(clockwise[:, None, None], cw, cc), ts, clockwise


def sample_indices(n: int, rng: np.random.Generator, n_total: int = 150, n_sample: int = 50) -> np.ndarray:
    """Per spiral, ``n_sample`` sorted distinct indices of the first half of the grid: (n, n_sample)."""
    half = n_total // 2
    return np.sort(np.argsort(rng.random((n, half)), axis=1)[:, :n_sample], axis=1)


class SpiralsDataModule(IrregularDataModule):
    """ContiFormer's 2-D spiral interpolation / extrapolation (module docstring)."""

    def __init__(self, n_train: int = 200, n_val: int = 100, n_test: int = 100, n_total: int = 150,
                 n_sample: int = 50, stop: float = 6 * math.pi, a: float = 0.0, b: float = 0.3,
                 noise_std: float = 0.05, noise_a: float = 0.0, rotation: str = "both", target: str = "all",
                 batch_size: int = 64, seed: int = 0, drop_rate: float = 0.0, num_workers: int = 0) -> None:
        super().__init__(batch_size=batch_size, seed=seed, drop_rate=drop_rate, num_workers=num_workers)
        if target not in TARGETS:
            raise ValueError(f"target={target!r}; valid: {', '.join(TARGETS)}")
        if rotation not in ROTATIONS:
            raise ValueError(f"rotation={rotation!r}; valid: {', '.join(ROTATIONS)}")
        if n_sample > n_total // 2:
            raise ValueError(f"n_sample={n_sample} > n_total/2={n_total // 2} observable points")
        self.sizes = {"train": n_train, "val": n_val, "test": n_test}
        self.n_total, self.n_sample, self.stop, self.a, self.b = n_total, n_sample, stop, a, b
        self.noise_std, self.noise_a, self.rotation, self.target = noise_std, noise_a, rotation, target
        sizes = "/".join(f"{n:,}" for n in self.sizes.values())
        self.source = (f"synthetic 2-D spirals (ContiFormer spiral.py semantics; oscrepro.data.spirals): "
                       f"{n_sample} of the first {n_total // 2} of {n_total} points in [0, {stop:.3g}], noise "
                       f"{noise_std}, rotation {rotation}, target {target}, train/val/test {sizes}, seed={seed}")

    def target_slice(self) -> slice:
        """Grid points scored: all, the observed first half (interpolation) or the second half (extrapolation)."""
        half = self.n_total // 2
        return {"all": slice(0, self.n_total), "interpolation": slice(0, half),
                "extrapolation": slice(half, self.n_total)}[self.target]

    def build_splits(self) -> dict[str, IrregularArrays]:
        raw = {}
        for k, (name, n) in enumerate(self.sizes.items()):
            rng = np.random.default_rng(np.random.SeedSequence([self.seed, k]))
            clean, ts, _ = spiral_trajectories(n, rng, self.n_total, self.stop, self.a, self.b, self.noise_a,
                                               self.rotation)
            noisy = clean + self.noise_std * rng.standard_normal(clean.shape)
            raw[name] = (clean, noisy, sample_indices(n, rng, self.n_total, self.n_sample))
        lo = raw["train"][0].min(axis=(0, 1))  # (2,) min-max range of the clean training spirals
        span = raw["train"][0].max(axis=(0, 1)) - lo
        self.data_min, self.data_range = lo, span  # to map predictions back: p * data_range + data_min
        out, keep = {}, self.target_slice()
        for name, (clean, noisy, idx) in raw.items():
            clean, noisy = (clean - lo) / span, (noisy - lo) / span
            x = np.take_along_axis(noisy, idx[..., None], axis=1)  # (n, n_sample, 2)
            y = clean[:, keep]  # (n, T_out, 2)
            out[name] = IrregularArrays(x, ts[idx], np.ones(idx.shape, dtype=bool), y,
                                        target_times=np.broadcast_to(ts[keep], y.shape[:2]).copy())
        return out
