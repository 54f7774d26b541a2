"""The ops vision models bring, each in a small module: imported whole (no opaque node) and
matching the module when compiled."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from uol_core.graph.export_import import import_model
from uol_core.graph.run import compile_graph


def _opaque(graph) -> list[str]:
    return [f"{n.source}: {n.label}" for n in graph.nodes if n.kind == "torch" and n.label != "view"]


def _check(module: nn.Module, *shapes: tuple[int, ...], backend: str = "c"):
    """Import `module`, assert no node stays in torch but views, compile and compare."""
    torch.manual_seed(0)
    module = module.eval()
    inputs = tuple(torch.randn(s) for s in shapes)
    graph = import_model(module, *inputs)
    assert _opaque(graph) == []
    compiled = compile_graph(graph, backend)
    out = compiled(dict(zip(graph.inputs, inputs)))
    with torch.no_grad():
        want = module(*inputs)
    torch.testing.assert_close(out[graph.outputs[0]], want, rtol=1e-4, atol=1e-4)
    return graph


class Fn(nn.Module):
    def __init__(self, fn) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x)


class TfPaddedConvs(nn.Module):
    """MobileNet's TF "SAME" padding: an explicit zero pad, odd row and column at the end,
    before a stride-2 conv and a depthwise conv, each written with padding 0."""

    def __init__(self) -> None:
        super().__init__()
        self.down = nn.Conv2d(3, 8, 3, stride=2)
        self.dw = nn.Conv2d(8, 8, 3, groups=8)
        self.same = nn.Conv2d(8, 8, 5, padding="same")
        self.valid = nn.Conv2d(8, 4, 1, padding="valid")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.down(F.pad(x, (0, 1, 0, 1)))
        x = self.dw(F.pad(x, (1, 1, 1, 1)))
        return self.valid(self.same(F.pad(x, (0, 0, 0, 0))))


def test_zero_pads_fold_into_the_convs_they_feed_and_string_padding_maps():
    graph = _check(TfPaddedConvs(), (2, 3, 16, 16))
    assert not [n for n in graph.nodes if n.kind == "odl" and n.op.name == "constant_pad"]
    assert graph.description.count("folded into") >= 2


def test_a_pad_that_no_conv_reads_is_an_op_of_its_own():
    graph = _check(Fn(lambda x: torch.relu(F.pad(x, (2, 1, 0, 3), value=0.5)) + 1.0), (1, 4, 5, 6))
    assert [n for n in graph.nodes if n.kind == "odl" and n.op.name == "constant_pad"]
    _check(Fn(lambda x: F.pad(x, (-1, 2)) * 2.0), (2, 3, 7), backend="reference")  # a crop and a pad


def test_grouped_convolution_with_its_batch_norm_folded():
    block = nn.Sequential(nn.Conv2d(8, 16, 3, stride=2, padding=1, groups=4, bias=False), nn.BatchNorm2d(16))
    with torch.no_grad():
        block[1].running_mean.normal_(0, 0.1)
        block[1].running_var.uniform_(0.5, 1.5)
    graph = _check(block, (2, 8, 9, 9))
    assert [n.op.name for n in graph.nodes if n.kind == "odl"] == ["conv2d_k3x3_s2_p1_g4"]


class SqueezeExcite(nn.Module):
    """EfficientNet's block tail: global pool, two 1x1 convs, SiLU and sigmoid, a channel gate."""

    def __init__(self) -> None:
        super().__init__()
        self.reduce, self.expand = nn.Conv2d(16, 4, 1), nn.Conv2d(4, 16, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate = torch.sigmoid(self.expand(F.silu(self.reduce(F.adaptive_avg_pool2d(x, 1)))))
        return x * gate


def test_squeeze_and_excitation():
    _check(SqueezeExcite(), (2, 16, 8, 8))


def test_group_norm_and_instance_norm():
    norm = nn.GroupNorm(4, 16)
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
        norm.bias.uniform_(-0.5, 0.5)
    _check(norm, (2, 16, 5, 5))
    _check(nn.GroupNorm(2, 8, eps=1e-3, affine=False), (1, 8, 4, 4), backend="reference")
    affine = nn.InstanceNorm2d(8, affine=True)
    with torch.no_grad():
        affine.weight.uniform_(0.5, 1.5)
        affine.bias.uniform_(-0.5, 0.5)
    _check(affine, (2, 8, 6, 6))
    _check(nn.InstanceNorm2d(8), (2, 8, 6, 6), backend="reference")


@pytest.mark.parametrize(("kwargs", "op"), [
    ({"scale_factor": 2, "mode": "nearest"}, "upsample_repeat"),
    ({"size": (7, 10), "mode": "nearest"}, "resize"),
    ({"scale_factor": 2, "mode": "bilinear", "align_corners": False}, "resize_stencil"),
    ({"size": (24, 36), "mode": "bicubic", "align_corners": False}, "resize_stencil"),
    ({"size": (9, 7), "mode": "bilinear", "align_corners": True}, "resize"),
])
def test_interpolate(kwargs, op):
    """Integer factors run as a copy (nearest) or a stencil per output phase; other sizes and
    align_corners=True as the separable matrices torch applies."""
    backend = "reference" if kwargs["mode"] == "nearest" and op == "resize" else "c"
    graph = _check(Fn(lambda x: F.interpolate(x, **kwargs)), (2, 3, 12, 12), backend=backend)
    assert [n.op.name for n in graph.nodes if n.kind == "odl"] == [op]


@pytest.mark.parametrize("kwargs", [
    {"kernel_size": 2},
    {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True, "count_include_pad": False},
])
def test_average_pooling_divides_border_windows_as_torch_does(kwargs):
    _check(nn.AvgPool2d(**kwargs), (2, 4, 9, 10))


def test_pixel_shuffle_and_unshuffle():
    _check(nn.Sequential(nn.PixelShuffle(2), nn.Conv2d(2, 4, 3, padding=1), nn.PixelUnshuffle(2)),
           (1, 8, 6, 6))


def test_mobile_activations():
    acts = nn.Sequential(nn.Hardswish(), nn.Linear(8, 8), nn.Hardsigmoid(), nn.ReLU6(inplace=True),
                         nn.SiLU(), nn.GELU(approximate="tanh"), nn.GELU())
    _check(acts, (4, 3, 8))


class StochasticDepthBlock(nn.Module):
    """A residual block with dropout and stochastic depth (the batch-level form of ConvNeXt
    and Swin): both are identities in eval mode and leave nothing behind."""

    def __init__(self) -> None:
        super().__init__()
        self.conv, self.drop = nn.Conv2d(4, 4, 3, padding=1), nn.Dropout(0.3)
        self.p = 0.2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.drop(self.conv(x))
        if self.training:
            keep = torch.rand(x.shape[0], 1, 1, 1) >= self.p
            y = y * keep / (1 - self.p)
        return x + F.dropout(y, 0.1, self.training)


def test_stochastic_depth_and_dropout_vanish_in_eval():
    graph = _check(StochasticDepthBlock(), (2, 4, 6, 6))
    assert [n.source for n in graph.nodes if n.kind == "odl"] != []
    assert not any("dropout" in n.source for n in graph.nodes)
