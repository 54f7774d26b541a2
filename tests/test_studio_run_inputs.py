"""Run and Tune run what the page shows (`app.callbacks.studio_run.as_shown`): the compiled
state when it is of the page's inputs, else the inputs themselves with the model's config."""

from __future__ import annotations

from app.callbacks.studio_run import as_shown
from uol_core.ops import op_text

MATMUL, DEPTHWISE = op_text("matmul"), op_text("depthwise_conv2d")
COMPILED = {"odl": MATMUL, "backend": "c", "target": "host", "ok": True, "op": "matmul",
            "sizes": {"M": 256, "K": 256, "N": 256}, "config": {"threads": 2, "mr": 6},
            "kernel": "/* matmul */"}


def test_the_compiled_state_runs_when_it_is_of_the_inputs():
    assert as_shown(COMPILED, MATMUL, "M=256,K=256,N=256", "c", "host") is COMPILED
    assert as_shown(COMPILED, MATMUL, "N=256", "c", "host") is COMPILED  # fewer sizes typed
    assert as_shown(COMPILED, MATMUL, "M=2,x", "c", "host") is COMPILED  # the compile says why
    assert as_shown(None, MATMUL, "", "c", "host") is None


def test_inputs_whose_compile_has_not_landed_run_as_typed():
    shown = as_shown(COMPILED, DEPTHWISE, "N=2,C=8,H=19,W=22,R=7,S=7", "c", "host")
    assert shown["op"] == "depthwise_conv2d" and shown["odl"] == DEPTHWISE and shown["ok"]
    assert shown["sizes"] == {"N": 2, "C": 8, "H": 19, "W": 22, "R": 7, "S": 7}
    assert shown["config"] == {} and shown["kernel"] == ""  # never the matmul's knobs
    resized = as_shown(COMPILED, MATMUL, "M=64,K=256,N=256", "c", "host")
    assert resized["sizes"]["M"] == 64 and resized["config"] == {}
    retarget = as_shown(COMPILED, MATMUL, "M=256,K=256,N=256", "triton", "host")
    assert retarget["backend"] == "triton" and retarget["config"] == {}
    assert not as_shown(COMPILED, "", "", "c", "host")["ok"]  # an emptied editor runs nothing
