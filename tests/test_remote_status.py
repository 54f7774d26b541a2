"""Where a target's jobs run when no worker serves it, as the status bar says it: natively here,
verified under emulation here (another CPU architecture, never timed), or compile and explain
only (a GPU or ISA flags this machine lacks, a missing cross toolchain)."""

from __future__ import annotations

import pytest

from uol_core.hfl import load_target
from uol_core.runtime.cross import EMULATED_NOTE, host_arch, toolchain
from uol_remote.hostfacts import EMULATED, NATIVE, NOT_HERE, how_this_machine_runs

AVX2_DESKTOP = {"cpu": "an AVX2 desktop", "machine": "x86_64", "gpus": [],
                "flags": ["avx2", "fma", "avx", "sse4_2", "sse2"]}


def test_x86_targets_run_natively_only_where_the_cpu_has_their_isa():
    assert how_this_machine_runs(load_target("avx2-desktop"), AVX2_DESKTOP) == (NATIVE, "")
    mode, why = how_this_machine_runs(load_target("xeon-spr-8480"), AVX2_DESKTOP)
    assert mode == NOT_HERE and "lacks" in why and "avx512f" in why


def test_a_gpu_target_without_its_gpu_is_compile_and_explain_only():
    mode, why = how_this_machine_runs(load_target("h100-sxm"), AVX2_DESKTOP)
    assert mode == NOT_HERE and "h100-sxm GPU" in why
    with_gpu = dict(AVX2_DESKTOP, gpus=["NVIDIA H100 80GB HBM3"])
    assert how_this_machine_runs(load_target("h100-sxm"), with_gpu)[0] == NATIVE


@pytest.mark.skipif(host_arch() != "x86_64", reason="ARM targets are emulated on x86-64 hosts")
def test_an_arm_target_on_this_x86_host_is_emulated_or_needs_its_toolchain(monkeypatch):
    graviton = load_target("graviton3")
    # the cross toolchain and qemu-user are part of the project's setup (`make install`)
    assert how_this_machine_runs(graviton) == (EMULATED, EMULATED_NOTE), toolchain("aarch64").missing()
    # without the emulator the target can only be compiled and explained (and it says why)
    monkeypatch.setenv("UOL_QEMU_AARCH64", "qemu-aarch64-that-is-not-installed")
    mode, why = how_this_machine_runs(graviton)
    assert mode == NOT_HERE and "qemu-user" in why and "apt-get install" in why


@pytest.mark.skipif(host_arch() != "x86_64", reason="ARM targets are emulated on x86-64 hosts")
def test_status_bar_never_says_runs_here_for_a_target_it_cannot_time(monkeypatch):
    from app.services import remote

    monkeypatch.delenv("UOL_BROKER", raising=False)
    remote.here.cache_clear()
    try:
        assert remote.where("host") == "target: host (runs here)"
        for arm in ("graviton3", "raspberry-pi-5"):
            assert remote.where(arm) == f"target: {arm} (verified under emulation here; not timed)"
        gpu = remote.where("h100-sxm")  # no GPU on the machines the tests run on
        assert gpu == "target: h100-sxm (compile and explain only: no h100-sxm GPU on this machine)"
    finally:
        remote.here.cache_clear()
