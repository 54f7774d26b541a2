"""Training through the Triton backend: forward and gradients vs torch autograd, then step time."""
import os, sys, time, statistics, json
import torch
from torch import nn
import torch.nn.functional as F
from uol_core.torch_bridge import to_torch
from uol_core.nn import swap_modules
from uol_core.training_demo import make_model
dev = "cuda" if torch.cuda.is_available() else "cpu"
small = dev == "cpu"
out = {"device": torch.cuda.get_device_name() if dev == "cuda" else "cpu (interpreter)"}
torch.manual_seed(0)
def check(name, make, ref):
    f = to_torch(name, backend="triton")
    args = make()
    leaves = [a.clone().requires_grad_(a.is_floating_point()) for a in args]
    rleaves = [a.clone().requires_grad_(a.is_floating_point()) for a in args]
    y = f(*leaves); yr = ref(*rleaves)
    up = torch.randn_like(yr)
    y.backward(up); yr.backward(up)
    errs = [float((y - yr).abs().max())] + [float((a.grad - b.grad).abs().max() / (b.grad.abs().max() + 1e-6)) for a, b in zip(leaves, rleaves) if b.grad is not None]
    used = f.runners(tuple(leaves))[1].used
    out[name] = {"max_errors": errs, "ok": all(e < 2e-3 for e in errs), "backward_ran_on": sorted(set(used.values()))}
    print(name, out[name], flush=True)
M, K, N = (16, 24, 32) if small else (1024, 1024, 1024)
check("linear_bias_gelu", lambda: [torch.randn(M, K, device=dev), torch.randn(K, N, device=dev) / K**0.5, torch.randn(N, device=dev)],
      lambda x, w, b: F.gelu(x @ w + b))
R, C = (8, 40) if small else (8192, 1024)
check("layernorm", lambda: [torch.randn(R, C, device=dev), torch.rand(C, device=dev) + 0.5, torch.randn(C, device=dev)],
      lambda x, g, b: F.layer_norm(x, (C,), g, b, 1e-5))
check("softmax", lambda: [torch.randn(R, C, device=dev)], lambda x: torch.softmax(x, -1))
S, D = (16, 8) if small else (1024, 64)
check("attention", lambda: [torch.randn(S, D, device=dev), torch.randn(S, D, device=dev), torch.randn(S, D, device=dev)],
      lambda q, k, v: torch.softmax((q @ k.T) * 0.125, -1) @ v)
if dev == "cuda":
    from uol_core.training_demo import digits_data
    xtr, ytr, _, _ = digits_data()
    x, y = xtr[:128].to(dev), ytr[:128].to(dev)
    tm = make_model().to(dev); um = make_model().to(dev); swap_modules(um, backend="triton")
    def mk(model):
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        def step():
            opt.zero_grad(); loss = F.cross_entropy(model(x), y); loss.backward(); opt.step(); return loss
        return step
    steps = {"torch": mk(tm), "uol_triton": mk(um)}
    losses = {k: [] for k in steps}; times = {k: [] for k in steps}
    for i in range(60):
        for k, s in steps.items():
            torch.cuda.synchronize(); t = time.perf_counter(); l = s(); torch.cuda.synchronize(); times[k].append(time.perf_counter() - t); losses[k].append(float(l))
    out["mlp_step_ms"] = {k: statistics.median(v[10:]) * 1e3 for k, v in times.items()}
    out["mlp_final_loss"] = {k: v[-1] for k, v in losses.items()}
    print(out["mlp_step_ms"], out["mlp_final_loss"], flush=True)
if os.environ.get("OUT"):
    json.dump(out, open(os.environ["OUT"] + "/gpu_train.json", "w"), indent=1)
