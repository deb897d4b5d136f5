"""Hold back the process's signals while a checkpoint is written, so that a job is never stopped between the two
halves of a save.

Why: a run's ``checkpoints/last.ckpt`` is a link to the newest epoch checkpoint (``save_last="link"``,
``save_top_k=1``). Lightning writes ``epoch=k.ckpt``, deletes ``epoch=k-1.ckpt``, then re-links ``last.ckpt``:
between the delete and the link, ``last.ckpt`` points at nothing. A SLURM job signalled there (submitit's USR2
handler requeues and exits inside training; SIGTERM at preemption) left that dangling link, and its next attempt
found "no checkpoint" and trained from the start (CI, 2026-11-28: ``tests/slurm/test_requeue.py`` timed out
waiting for the resume). Python runs signal handlers in the main thread between bytecodes, whichever thread the
signal reached, so blocking the signal mask of one thread would not hold them back; replacing the handlers for the
duration does.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

#: the signals a job is stopped, requeued or interrupted with: SLURM's preemption (TERM), submitit's and
#: Lightning's requeue signals (USR1, USR2), Ctrl-C (INT)
HELD = (signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2, signal.SIGINT)


@contextlib.contextmanager
def signals_held(signals: tuple[signal.Signals, ...] = HELD) -> Iterator[list[signal.Signals]]:
    """Inside the block, ``signals`` are recorded instead of handled; on leaving it (also by an error) the original
    handlers are restored and each recorded signal is raised again, in arrival order, once per signal, so its own
    handler (or default action) runs then. Yields the list of signals held so far. Outside the main thread (where
    handlers cannot be set) it holds nothing, nor a signal whose handler was installed outside Python."""
    held: list[signal.Signals] = []
    if threading.current_thread() is not threading.main_thread():
        yield held
        return

    def hold(signum: int, frame: object) -> None:
        if signum not in held:
            held.append(signal.Signals(signum))

    # a handler installed outside Python (getsignal: None) could not be put back: such a signal is not held
    previous = {sig: signal.signal(sig, hold) for sig in signals if signal.getsignal(sig) is not None}
    try:
        yield held
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for sig in held:
            signal.raise_signal(sig)
