"""Linear layers fused with the activation calls of their parent's forward (`fuse_calls`), and
the tanh GELU they need (`gelu_tanh`, torch's approximate="tanh")."""

import torch
import torch.nn.functional as F
from torch import nn

from uol_core.graph.zoo import NanoGPTBlock
from uol_core.odl import parse
from uol_core.torch.bridge import to_torch
from uol_core.torch.nn import UolLinear, swap_modules

torch.manual_seed(0)


class Forms(nn.Module):
    """Each way a forward applies an activation to a Linear's output, and two that must not fuse."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.c, self.d = (nn.Linear(8, 8) for _ in range(4))
        self.shared, self.twice = nn.Linear(8, 8), nn.Linear(8, 8)
        self.act = nn.SiLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.a(x)) + self.b(x).relu() + self.act(self.c(x))
        h = h + F.gelu(self.d(x), approximate="tanh")
        y = self.shared(h)  # read by the gelu and by the sum: the gelu must stay apart
        h = F.gelu(y) + y
        return F.silu(self.twice(h)) + self.twice(x)  # one module, two calls: not fused


class TrainingBranch(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.fc(x)) if self.training else torch.sigmoid(self.fc(x))


class Untraceable(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.fc(x)) if x.sum() > 0 else F.relu(self.fc(-x))


def _same_training(model: nn.Module, ours: nn.Module, x: torch.Tensor) -> None:
    torch.testing.assert_close(ours(x), model(x), rtol=1e-5, atol=1e-5)
    model(x).square().sum().backward()
    ours(x).square().sum().backward()
    theirs = dict(model.named_parameters())
    for name, param in ours.named_parameters():
        owner = ours.get_submodule(name.rpartition(".")[0])
        transposed = isinstance(owner, UolLinear) and name.endswith("weight")  # stored [in, out]
        got = param.grad.T if transposed else param.grad
        torch.testing.assert_close(got, theirs[name].grad, rtol=1e-4, atol=1e-5, msg=name)


def test_each_form_of_activation_call_fuses_and_trains_as_torch_does() -> None:
    model = Forms()
    ours = Forms()
    ours.load_state_dict(model.state_dict())
    swapped = swap_modules(ours)
    assert sorted(swapped) == ["a+relu", "b+relu", "c+silu", "d+gelu_tanh", "shared", "twice"]
    assert ours.d.activation == "gelu_tanh" and ours.shared.activation is None
    _same_training(model, ours, torch.randn(5, 8))


def test_nanogpt_mlp_fuses_its_tanh_gelu() -> None:
    model = NanoGPTBlock(32, 2)
    ours = NanoGPTBlock(32, 2)
    ours.load_state_dict(model.state_dict())
    swapped = swap_modules(ours)
    assert "c_fc+gelu_tanh" in swapped and isinstance(ours.c_fc, UolLinear)
    _same_training(model, ours, torch.randn(2, 8, 32))
    ours.attention = type(ours.attention)()  # the forward looks children up: a later swap holds
    _same_training(model, ours, torch.randn(2, 8, 32))


def test_a_forward_that_branches_on_training_or_does_not_trace_stays_unfused() -> None:
    for kind in (TrainingBranch, Untraceable):
        model, ours = kind(), kind()
        ours.load_state_dict(model.state_dict())
        assert swap_modules(ours) == ["fc"], kind.__name__
        assert "forward" not in vars(ours)
        for mode in (True, False):
            model.train(mode)
            ours.train(mode)
            torch.testing.assert_close(ours(torch.ones(3, 8)), model(torch.ones(3, 8)),
                                       rtol=1e-5, atol=1e-5)


def test_calls_false_leaves_activation_calls_to_torch() -> None:
    ours = NanoGPTBlock(32, 2)
    assert "c_fc" in swap_modules(ours, calls=False) and ours.c_fc.activation is None


def test_gelu_tanh_gradient_is_torchs_in_float64() -> None:
    op = parse("op g(X: f32[M, K], W: f32[K, N]) -> Y: f32[M, N]:\n"
               "    Y[m, n] = gelu_tanh(sum[k](X[m, k] * W[k, n]))\n")
    f = to_torch(op, backend="reference")
    args = [torch.randn(4, 3, dtype=torch.float64, requires_grad=True),
            torch.randn(3, 5, dtype=torch.float64, requires_grad=True)]
    assert torch.autograd.gradcheck(lambda *a: f(*a), args)
    torch.testing.assert_close(f(*args), F.gelu(args[0] @ args[1], approximate="tanh"))


def test_layers_that_read_their_childrens_weights_keep_them():
    """MultiheadAttention hands out_proj.weight to its functional form, and the encoder layer's
    inference fast path hands every weight to one fused op: a [in, out] UolLinear under them
    computed something else (a 0.9 error), so their children stay torch's."""
    model = nn.Sequential(nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True),
                          nn.Linear(16, 4))
    ours = nn.Sequential(nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True),
                         nn.Linear(16, 4))
    ours.load_state_dict(model.state_dict())
    assert swap_modules(ours) == ["1"]
    x = torch.randn(3, 5, 16)
    for mode in (True, False):
        model.train(mode)
        ours.train(mode)
        with torch.no_grad():  # eval without grad takes the encoder's fast path
            torch.testing.assert_close(ours(x), model(x), rtol=1e-5, atol=1e-5)


class TiedLM(nn.Module):
    """An embedding whose weight the output layer shares (GPT-2's wte and lm_head)."""

    def __init__(self) -> None:
        super().__init__()
        self.wte = nn.Embedding(11, 8)
        self.fc = nn.Linear(8, 8)
        self.head = nn.Linear(8, 11, bias=False)
        self.head.weight = self.wte.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(F.relu(self.fc(self.wte(ids))))


def test_a_layer_holding_a_tied_weight_stays_torchs():
    model, ours = TiedLM(), TiedLM()
    ours.load_state_dict(model.state_dict())
    assert swap_modules(ours) == ["fc+relu"]
    assert ours.head.weight is ours.wte.weight  # still one tensor, trained as one
    ids = torch.tensor([[1, 4, 7], [10, 0, 3]])
    opts = [torch.optim.SGD(m.parameters(), lr=0.5) for m in (model, ours)]
    for _ in range(3):
        for m, opt in zip((model, ours), opts):
            opt.zero_grad()
            F.cross_entropy(m(ids).flatten(0, 1), ids.flatten()).backward()
            opt.step()
    torch.testing.assert_close(ours.wte.weight, model.wte.weight, rtol=1e-5, atol=1e-6)


class OptionalMask(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        h = F.relu(self.fc(x))
        return h if mask is None else h.masked_fill(mask, 0.0)


def test_a_forward_with_optional_arguments_is_not_traced():
    """A trace binds `mask` to a proxy, and `mask is None` is then false for good."""
    model, ours = OptionalMask(), OptionalMask()
    ours.load_state_dict(model.state_dict())
    assert swap_modules(ours) == ["fc"] and "forward" not in vars(ours)
    x = torch.randn(3, 8)
    torch.testing.assert_close(ours(x), model(x), rtol=1e-5, atol=1e-5)
    mask = x > 0
    torch.testing.assert_close(ours(x, mask), model(x, mask), rtol=1e-5, atol=1e-5)
