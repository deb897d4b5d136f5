"""fqo App. C (L3): fixed-query oscillator attention with learned relative-position anchor rotations δ(i−j).

App. C, "Learned position-dependent anchor phase offsets": the anchor r_j of the base mechanism depends only on the
content of token j. This variant applies a learned rotation δ(i−j) to each anchor *before the fixed point*, so that
the relative offset between query position i and anchor position j enters the coupling:

    r_ij = R_h(δ(i−j)) r_j                     rotated anchor seen by free oscillator i (head h)
    h_i  = sum_j w_ij r_ij                     Eq. (3) with the rotated anchors
    z_i* = h_i / ||h_i||                       Eq. (4), unchanged (``fixed_point``)
    a_ij = (1 + z_i*·r_ij)^p / sum_l (1 + z_i*·r_il)^p      Eq. (5) on the rotated anchors

w_ij (Eq. 2), the anchor map r_j = normalize(A e_j), W_V and W_O are those of
:class:`~oscrepro.attention.fqo.FixedQueryOscillatorAttention` (inherited, same parameter names); the subclass
overrides only its ``settle`` hook (Eqs. 3-4 and the cosines of 5) to use r_ij.

Choices where App. C is silent (stated here and in the report):
- **Rotation for d_osc > 2.** The paper runs the variant at d_osc = 2, where δ is one angle per offset. For
  d_osc > 2 we rotate the coordinate pairs (0, 1), (2, 3), ... by one learned angle each (RoPE-style block
  rotation); an odd last coordinate is left unrotated. Angles are per head and per clipped offset.
- **Offsets.** k = clip(i − j, −max_rel_dist, max_rel_dist); one table row per k (2·max_rel_dist + 1 rows, the
  negative half is used only without the causal mask). Angles start at 0, so an untrained model equals the base.
- **Readout.** The rotated anchors r_ij are used in the readout (5) as well as in (3): the oscillator settles
  against the anchors it sees, and the cosine is read against the same anchors.
- ``aux`` (need_weights) holds the *unrotated* ``anchors`` r_j like the base mechanism, plus ``h`` and ``z``;
  ``coupling @ anchors`` is therefore not h here (ODE analyses must use ``aux["h"]``).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from oscrepro.attention.base import refuse, whole
from oscrepro.attention.fqo import FixedQueryOscillatorAttention, readout_from_cosines

__all__ = ["RelPosAnchorOscillatorAttention", "readout_from_cosines", "relative_offsets", "rotate_anchor_pairs"]


def relative_offsets(t: int, max_rel_dist: int, device: torch.device | None = None) -> Tensor:
    """Table index of clip(i − j, −R, R) + R for every (i, j): (T, T) int64 in [0, 2R]."""
    pos = torch.arange(t, device=device)
    return (pos[:, None] - pos[None, :]).clamp(-max_rel_dist, max_rel_dist) + max_rel_dist


def rotate_anchor_pairs(r: Tensor, angle: Tensor) -> Tensor:
    """Rotate coordinate pairs (2m, 2m+1) of every anchor r_j by the angle of (i, j, plane m).

    Args:
        r: (B, H, T, N) unit anchors r_j.  angle: (H, T, T, P) angles δ(i−j) per head, P = N // 2 planes.
    Returns:
        (B, H, T, T, N) rotated anchors r_ij (query i, anchor j); still unit vectors.
    """
    n_pairs = angle.shape[-1]
    pairs = r[..., : 2 * n_pairs].unflatten(-1, (n_pairs, 2)).unsqueeze(2)  # (B, H, 1, T, P, 2)
    x, y = pairs[..., 0], pairs[..., 1]  # (B, H, 1, T, P)
    cos, sin = angle.cos().unsqueeze(0), angle.sin().unsqueeze(0)  # (1, H, T, T, P)
    rot = torch.stack([cos * x - sin * y, sin * x + cos * y], dim=-1).flatten(-2)  # (B, H, T, T, 2P)
    if r.shape[-1] > 2 * n_pairs:  # odd d_osc: the last coordinate is not rotated
        rest = r[..., 2 * n_pairs :].unsqueeze(2).expand(*rot.shape[:-1], 1)  # (B, H, T, T, 1)
        rot = torch.cat([rot, rest], dim=-1)
    return rot


class RelPosAnchorOscillatorAttention(FixedQueryOscillatorAttention):
    """Fixed-query oscillator attention whose anchors are rotated by a learned δ_h(i−j) (fqo App. C, L3)."""

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_osc: int = 2,
        p: float = 1.0,
        layer_idx: int = 0,
        max_rel_dist: int = 64,
        freeze_value: bool = False,
    ) -> None:
        refuse(RelPosAnchorOscillatorAttention.config_problems(d_model, n_heads, d_osc=d_osc, p=p,
                                                               max_rel_dist=max_rel_dist))
        super().__init__(d_model, n_heads, d_osc=d_osc, p=p, layer_idx=layer_idx, freeze_value=freeze_value)
        self.max_rel_dist = max_rel_dist
        # δ_h(k): one angle per head, clipped offset k and rotation plane; 0 = the base mechanism.
        self.rel_angle = nn.Parameter(torch.zeros(n_heads, 2 * max_rel_dist + 1, d_osc // 2))

    @classmethod
    def config_problems(cls, d_model: int, n_heads: int, *, max_rel_dist: int = 64, **hparams: Any) -> list[str]:
        """The base mechanism's rules, and at least one learned offset angle (max_rel_dist >= 1)."""
        problems = super().config_problems(d_model, n_heads, **hparams)
        return problems + ([] if whole(max_rel_dist, 1) else [f"max_rel_dist must be >= 1, got {max_rel_dist!r}"])

    def pair_angles(self, t: int) -> Tensor:
        """δ_h(i−j) for every (head, i, j, plane): (H, T, T, P)."""
        return self.rel_angle[:, relative_offsets(t, self.max_rel_dist, self.rel_angle.device)]

    def settle(self, w: Tensor, r: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Eqs. (3)-(4) and the cosines of (5) on the rotated anchors r_ij: -> h, z (B,H,T,N), z_i·r_ij (B,H,T,T)."""
        r_ij = rotate_anchor_pairs(r, self.pair_angles(r.shape[2]).to(r.dtype))  # (B, H, T, T, N)
        h = torch.einsum("bhij,bhijn->bhin", w, r_ij)  # Eq. (3) with rotated anchors: (B, H, T, N)
        z = self.fixed_point(h)  # Eq. (4)
        return h, z, torch.einsum("bhin,bhijn->bhij", z, r_ij)
