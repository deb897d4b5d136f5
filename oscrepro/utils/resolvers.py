"""OmegaConf resolvers the configs use (registered when ``oscrepro`` is imported, before any config resolves).

``${imul:a,b}``: round(a x b) as an int. The coupledqk compute-matched Standard run (Sec. 3.5: "Standard
Attention for 72K steps - matching the 2.4x wall-clock budget of coupled QK at 30K steps") is the recipe's step
count times ``compute_factor``, at every budget: ``trainer.max_steps: ${imul:${steps},${compute_factor}}``.

``${idiv:a,b}``: a / b as an int, refused unless b divides a. App. B states an effective batch of 32 as
micro-batch x accumulation, with smaller micro-batches for the coupled variant at 150M/350M (memory only):
``trainer.accumulate_grad_batches: ${idiv:${effective_batch},${micro_batch}}``.
"""

from __future__ import annotations

from omegaconf import OmegaConf


def imul(a: float | int | str, b: float | int | str) -> int:
    """round(a x b), for step counts scaled by a factor."""
    return int(round(float(a) * float(b)))


def idiv(a: int | str, b: int | str) -> int:
    """a / b for integers b divides (an accumulation count); anything else is a config error."""
    a, b = int(a), int(b)
    if b <= 0 or a % b:
        raise ValueError(f"idiv: {a} is not a positive multiple of {b} (effective batch / micro-batch)")
    return a // b


def register() -> None:
    """Register the resolvers (idempotent)."""
    for name, fn in (("imul", imul), ("idiv", idiv)):
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, fn)


register()
