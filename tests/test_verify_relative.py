"""The relative error a run reports is measured against the values' size, not against zero."""

from __future__ import annotations

import torch

from uol_core.runtime.verify import compare


def test_relative_error_near_zero_is_measured_against_the_tolerance_scale():
    # GELU of large negative inputs: references of 1e-30, an output off by 1e-9 there
    ref = torch.tensor([1e-30, 0.5, 2.0])
    out = ref + torch.tensor([1e-9, 0.0, 0.0])
    verdict = compare({"Y": out}, {"Y": ref}, reduction_length=64)
    assert verdict.ok
    assert verdict.max_rel_err < 1.0, verdict  # was 1e+21 (a quotient by |ref|)


def test_relative_error_of_ordinary_values_is_the_plain_quotient():
    ref = torch.tensor([4.0, -2.0])
    out = torch.tensor([4.0, -2.5])
    verdict = compare({"Y": out}, {"Y": ref}, reduction_length=1)
    assert not verdict.ok and abs(verdict.max_rel_err - 0.25) < 1e-6


def test_integer_outputs_compare():
    verdict = compare({"I": torch.tensor([1, 2, 3])}, {"I": torch.tensor([1, 2, 3])}, 1)
    assert verdict.ok and verdict.max_rel_err == 0.0
