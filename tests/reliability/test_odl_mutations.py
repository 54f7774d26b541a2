"""Mutated ODL through every stage a user's text reaches: only OdlError / ShapeError come out.

The engine is benchmarks/odl_fuzz.py (parse, print back, bind sizes, emit C, evaluate the
reference; a share of the kernels built and verified in a child process). The default run
takes 1,000 texts; UOL_LONG=1 takes 50,000 (figures in docs/reliability.md).
"""

from __future__ import annotations

import sys

from rel_helpers import FUZZ_COUNTS, LONG, REPO

COUNT = 50_000 if LONG else 1_000


def test_mutated_odl_texts_give_only_odl_or_shape_errors():
    sys.path.insert(0, str(REPO / "benchmarks"))
    import odl_fuzz

    report = odl_fuzz.run(COUNT, seed=0, compile_every=50 if LONG else 100)
    FUZZ_COUNTS["odl-mutations"] += report.texts
    failures = [f"{f['error']}\n{f['text']}" for f in report.failures[:5]]
    assert not report.failures, f"{len(report.failures)} unexpected exceptions:\n" + "\n---\n".join(
        failures)
    assert report.texts == COUNT and report.outcomes["kernel"] + report.outcomes["built"] > COUNT // 8
