"""The Studio's Result panel and run history show a tiny kernel's rate, not 0.00."""

from app.components.studio_parts import history_panel, run_result


def _texts(component) -> list[str]:
    """Every string inside a Dash component tree."""
    if isinstance(component, str):
        return [component]
    if isinstance(component, (list, tuple)):
        return [t for c in component for t in _texts(c)]
    return _texts(getattr(component, "children", None) or [])


def test_a_tiny_rate_keeps_its_digits():
    res = {"ok": True, "id": 7, "median_s": 1.6e-5, "iqr_s": 1e-6, "gflops": 0.0013,
           "gbs": 1.234567, "roofline": {"bound": "memory", "attainable_gflops": 4.2}}
    texts = _texts(run_result(res))
    assert "0.0013" in texts and "1.235" in texts and "0.00" not in texts


def test_the_history_shows_a_tiny_rate_too():
    runs = [{"id": 2, "op": "softmax", "sizes": {"R": 64, "C": 64}, "backend": "c",
             "target": "host", "mode": "timed", "ok": 1, "gflops": 0.0013, "median_s": 1.6e-5}]
    assert "0.0013" in _texts(history_panel(runs))


def test_the_largest_error_reads_as_numbers_not_a_dict():
    res = {"ok": True, "id": 8, "median_s": 1e-3, "gflops": 300.0,
           "max_error": {"abs": 4.76837158203125e-05, "rel": 0.0012469673529267311}}
    texts = _texts(run_result(res))
    assert "abs 4.77e-05 · rel 1.25e-03" in texts
    assert not any("{" in t for t in texts)


def test_the_roofline_line_names_a_peak_other_than_fp32_and_a_cache_resident_run():
    bf16 = {"ok": True, "id": 9, "median_s": 1e-3, "gflops": 488.0,
            "roofline": {"bound": "compute", "attainable_gflops": 1038.3, "dtype": "bf16",
                         "fraction_of_roofline": 0.47}}
    line = next(t for t in _texts(run_result(bf16)) if "attainable" in t)
    assert line == "compute-bound, attainable 1038.3 GFLOP/s (bf16 peak), achieved 47.0%"
    update = {"ok": True, "id": 10, "median_s": 7.8e-5, "gflops": 47.0,
              "roofline": {"bound": "memory", "attainable_gflops": 25.7, "dtype": "fp32",
                           "fraction_of_roofline": 1.83}}
    line = next(t for t in _texts(run_result(update)) if "attainable" in t)
    assert line.startswith("memory-bound, attainable 25.7 GFLOP/s, achieved 183.0% (over the "
                           "memory roof, DRAM's: the data stayed in a cache")


def test_the_diff_is_against_the_newest_earlier_run_of_the_same_kernel_kind():
    from app.components.studio_parts import previous_alike

    def run(i, backend, config):
        return {"id": i, "op": "softmax", "sizes": {"R": 64, "C": 64}, "backend": backend,
                "target": "host" if backend == "c" else "cpu", "config": config}
    c_run = run(1, "c", {"threads": 2})
    first = run(2, "triton", {"num_warps": 4})
    second = run(3, "triton", {"num_warps": 2})
    assert previous_alike([second, c_run, first]) is first  # not the C run in between
    assert previous_alike([first, c_run]) is c_run  # nothing alike: the run before it
    assert previous_alike([first]) is None
