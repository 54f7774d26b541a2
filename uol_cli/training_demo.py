"""A real training run twice, with torch modules and with UOL-backed ones (entry point `run_demo`).

The model is an MLP on scikit-learn's digits (shipped with the package, no download). Both runs
start from the same weights and see the same batches, so their loss curves must agree; the
step time says what the generated kernels buy. `run_ddp` trains the UOL model on two gloo
processes with a gradient-compression hook (HCF's codecs plug in there).
"""

from __future__ import annotations

import copy
import socket
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import torch
from torch import nn

from uol_core.torch.nn import swap_modules
from uol_core.torch.optim import SGD

HIDDEN = 256


@dataclass
class TrainResult:
    """Loss per step, step times and held-out accuracy of one run."""

    backend: str
    losses: list[float]
    step_ms: list[float]
    accuracy: float | None  # held-out accuracy of a classifier; None for a regression
    swapped: list[str] = field(default_factory=list)

    @property
    def median_step_ms(self) -> float:
        return statistics.median(self.step_ms[2:] or self.step_ms)

    def to_dict(self) -> dict:
        data = asdict(self)
        data["median_step_ms"] = self.median_step_ms
        return data


def digits_data() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Standardised digits features, a fixed 75/25 split."""
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    gen = torch.Generator().manual_seed(0)
    order = torch.randperm(len(x), generator=gen)
    x = torch.tensor(x, dtype=torch.float32)[order] / 16.0
    y = torch.tensor(y)[order]
    cut = int(0.75 * len(x))
    return x[:cut], y[:cut], x[cut:], y[cut:]


def make_model(seed: int = 0) -> nn.Sequential:
    """64 -> 256 (GELU) -> LayerNorm -> 256 (ReLU) -> 10."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(64, HIDDEN), nn.GELU(), nn.LayerNorm(HIDDEN),
                         nn.Linear(HIDDEN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, 10))


MOMENTUM = 0.9
OPTIMIZERS = ("uol", "torch")  # what updates the UOL-backed model's parameters


def sgd(model: nn.Module, lr: float, kind: str = "torch") -> torch.optim.Optimizer:
    """SGD with momentum over the model's parameters: torch's, or UOL's (`uol_core.torch.optim`,
    the same math as one kernel written over the parameters)."""
    if kind == "uol":
        return SGD(model.parameters(), lr=lr, momentum=MOMENTUM)
    return torch.optim.SGD(model.parameters(), lr=lr, momentum=MOMENTUM)


def train(model: nn.Module, steps: int, batch: int = 128, lr: float = 0.05, seed: int = 1,
          progress: Callable[[int], None] | None = None) -> tuple[list[float], list[float], float]:
    """SGD with momentum on fixed batches; returns losses, step times (ms), test accuracy."""
    return train_together([model], steps, batch, lr, seed, progress)[0]


def train_together(models: list[nn.Module], steps: int, batch: int = 128, lr: float = 0.05,
                   seed: int = 1, progress: Callable[[int], None] | None = None,
                   optimizers: list[str] | None = None,
                   observe: Callable[[int, list, list], None] | None = None) -> list[tuple]:
    """`train` for several models in lockstep: each step runs every model on the same batch,
    one after the other, so load from other processes hits them alike (their step times are
    compared). `optimizers`: per model, "torch" (the default) or "uol". `observe(step, losses,
    step_ms)` sees every model's lists so far after each step (the IDE draws them live).
    Returns (losses, step times in ms, test accuracy) per model."""
    xtr, ytr, xte, yte = digits_data()
    opts = [sgd(m, lr, kind) for m, kind in zip(models, optimizers or ["torch"] * len(models))]
    gen = torch.Generator().manual_seed(seed)
    losses: list[list[float]] = [[] for _ in models]
    times: list[list[float]] = [[] for _ in models]
    for step in range(steps):
        idx = torch.randint(0, len(xtr), (batch,), generator=gen)
        x, y = xtr[idx], ytr[idx]
        for model, opt, model_losses, model_times in zip(models, opts, losses, times):
            start = time.perf_counter()
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            model_times.append((time.perf_counter() - start) * 1e3)
            model_losses.append(loss.item())
        if progress:
            progress(step)
        if observe:
            observe(step, losses, times)
    results = []
    with torch.no_grad():
        for model, model_losses, model_times in zip(models, losses, times):
            accuracy = (model(xte).argmax(1) == yte).float().mean().item()
            results.append((model_losses, model_times, accuracy))
    return results


def run_demo(steps: int = 200, backend: str = "auto", seed: int = 0,
             progress: Callable[[int], None] | None = None, optimizer: str = "uol",
             observe: Callable[[int, list, list], None] | None = None) -> dict:
    """Train the torch model and its UOL twin from the same weights; compare loss and time.
    The torch model steps with torch's SGD; the twin with UOL's (`optimizer="uol"`: the update
    as one generated kernel) or torch's (`"torch"`: only the layers differ). `observe`: as
    `train_together`'s, the torch model first."""
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer '{optimizer}'; choose one of {', '.join(OPTIMIZERS)}")
    reference = make_model(seed)
    ours = copy.deepcopy(reference)
    swapped = swap_modules(ours, backend)
    if optimizer == "uol":
        swapped.append("SGD (momentum)")
    (ref_losses, ref_ms, ref_acc), (our_losses, our_ms, our_acc) = train_together(
        [reference, ours], steps, progress=progress, optimizers=["torch", optimizer],
        observe=observe)
    torch_run = TrainResult("torch", ref_losses, ref_ms, ref_acc)
    uol_run = TrainResult(f"uol ({backend})", our_losses, our_ms, our_acc, swapped)
    final_gap = abs(our_losses[-1] - ref_losses[-1]) / max(abs(ref_losses[-1]), 1e-12)
    worst = max(abs(a - b) for a, b in zip(our_losses, ref_losses))
    return {
        "steps": steps,
        "optimizer": optimizer,
        "torch": torch_run.to_dict(),
        "uol": uol_run.to_dict(),
        "final_loss_relative_gap": final_gap,
        "max_abs_loss_gap": worst,
        "speedup_vs_torch_eager": torch_run.median_step_ms / uol_run.median_step_ms,
    }


# ---------------------------------------------------------------- distributed (gloo)

def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _ddp_worker(rank: int, world: int, port: int, steps: int, hook_factory: Callable | None,
                hook_arg: str | None, queue) -> None:
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    try:
        model = make_model(0)
        swap_modules(model)
        ddp = nn.parallel.DistributedDataParallel(model)
        if hook_factory is not None:
            state, hook = hook_factory(hook_arg)
            ddp.register_comm_hook(state, hook)
        losses, times, accuracy = train(ddp, steps, seed=1 + rank)
        queue.put({"rank": rank, "losses": losses, "median_step_ms": statistics.median(times),
                   "accuracy": accuracy})
    finally:
        dist.destroy_process_group()


def run_ddp(steps: int = 50, world: int = 2, hook_factory: Callable | None = None,
            hook_arg: str | None = None) -> list[dict]:
    """Train the UOL-backed model with DDP on `world` local gloo processes; `hook_factory(arg)`
    gives a DDP communication hook (state, hook), e.g. HCF's gradient compression."""
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_ddp_worker, args=(r, world, port, steps, hook_factory, hook_arg, queue))
             for r in range(world)]
    for proc in procs:
        proc.start()
    results = [queue.get(timeout=600) for _ in procs]
    for proc in procs:
        proc.join(timeout=60)
        if proc.exitcode not in (0, None):
            raise RuntimeError(f"a DDP worker exited with status {proc.exitcode}")
    return sorted(results, key=lambda r: r["rank"])
