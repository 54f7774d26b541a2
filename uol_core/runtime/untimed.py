"""What a tune says when its configs were verified but could not be timed: a Triton kernel on a
machine without a GPU runs under Triton's interpreter, which checks the results but whose wall
clock says nothing about a GPU. The CLI and the Studio say it with these words, never "0
verified" or 0 GFLOP/s."""

from __future__ import annotations

from collections.abc import Mapping

NEEDS_GPU = "needs a GPU to time"


def config_text(config: Mapping) -> str:
    return ", ".join(f"{k}={v}" for k, v in config.items())


def untimed_summary(verified: int, measured: int, pick: Mapping | str | None = None) -> str:
    """'3 of 3 configs verified under the Triton interpreter (no GPU here); needs a GPU to
    time: the model's pick stands (num_warps=4)'; `pick` as knobs or their text."""
    shown = pick if isinstance(pick, str) else config_text(pick or {})
    stands = f": the model's pick stands ({shown})" if shown else ""
    return (f"{verified} of {measured} configs verified under the Triton interpreter (no GPU "
            f"here); {NEEDS_GPU}{stands}")


def untimed_progress(done: int, total: int, verified: int) -> str:
    """A running tune's status line when nothing can be timed."""
    return (f"{done}/{total} checked, {verified} verified under the Triton interpreter; "
            f"{NEEDS_GPU}")
