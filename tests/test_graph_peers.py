"""The deployment runtimes as peers (uol_core/graph/peers.py): ONNX Runtime and OpenVINO run a
small module, float or int64 token inputs, and match torch eager; a runtime that is missing or
fails is a note on its peer, never an exception."""

from __future__ import annotations

import sys

import pytest
import torch
from torch import nn

from uol_core.graph.peers import PEERS, Peer, prepare_peers, verify_peers

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed (the [bench] extra)")
ov = pytest.importorskip("openvino", reason="openvino is not installed (the [bench] extra)")

FAST = ("eager", "onnxruntime", "openvino")  # torch.compile takes tens of seconds to build


class LinearGelu(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(32, 48)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.gelu(self.linear(x))


class Tokens(nn.Module):
    """An int64 token-id input, as language models take."""

    def __init__(self) -> None:
        super().__init__()
        self.embed, self.proj = nn.Embedding(100, 32), nn.Linear(32, 16)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.proj(self.embed(ids)))


class Broken(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise ValueError("this model cannot run")


@pytest.mark.parametrize("make, inputs", [
    (LinearGelu, lambda: (torch.randn(4, 32),)),
    (Tokens, lambda: (torch.randint(0, 100, (2, 8)),)),
], ids=["linear_gelu", "int64_tokens"])
def test_onnxruntime_and_openvino_verify_against_eager(make, inputs):
    torch.manual_seed(0)
    module, args = make().eval(), inputs()
    peers = prepare_peers(module, args, FAST, threads=1)
    assert set(peers) == set(FAST)
    for name in FAST:
        assert peers[name].call is not None, peers[name].note
    with torch.no_grad():
        expected = module(*args)
    assert verify_peers(peers, expected) == dict.fromkeys(FAST)
    for name in ("onnxruntime", "openvino"):
        got = peers[name].call()
        assert isinstance(got, torch.Tensor) and got.dtype == torch.float32
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
    assert "1 intra-op threads" in peers["onnxruntime"].note


def test_a_missing_runtime_is_a_note(monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import onnxruntime raises ImportError
    monkeypatch.setitem(sys.modules, "openvino", None)
    peers = prepare_peers(LinearGelu().eval(), (torch.randn(2, 32),), ("eager", "onnxruntime",
                                                                       "openvino", "tvm"))
    assert peers["eager"].call is not None
    for name in ("onnxruntime", "openvino"):
        assert peers[name].call is None and "not installed" in peers[name].note
    assert peers["tvm"].call is None and "unknown peer" in peers["tvm"].note
    reasons = verify_peers(peers, torch.zeros(2, 48))
    assert reasons["onnxruntime"].startswith("not available")


def test_a_model_that_fails_is_a_note_for_every_peer():
    peers = prepare_peers(Broken(), (torch.randn(2, 3),), FAST)
    for name in FAST:
        assert peers[name].call is None and peers[name].note, name
        assert "\n" not in peers[name].note


def test_a_wrong_output_does_not_verify():
    expected = torch.ones(3)
    peers = {"good": Peer("good", lambda: torch.ones(3), ""),
             "off": Peer("off", lambda: torch.ones(3) * 1.1, ""),
             "shape": Peer("shape", lambda: torch.ones(4), ""),
             "nan": Peer("nan", lambda: torch.full((3,), float("nan")), "")}
    reasons = verify_peers(peers, expected)
    assert reasons["good"] is None
    assert "max error" in reasons["off"] and "shape" in reasons["shape"] and reasons["nan"]
    assert PEERS == ("eager", "compile", "onnxruntime", "openvino")
