"""The host probe runs once per process however many callers ask at the same time: the server's
start probes the host, and a compile that arrives meanwhile waits for that probe's record."""

from __future__ import annotations

import threading
import time

from uol_core.hfl import probe


def test_concurrent_callers_share_one_measurement(tmp_path, monkeypatch):
    monkeypatch.setenv("UOL_CACHE_DIR", str(tmp_path))
    real_measure, calls = probe.measure, []

    def counted(info, quick=True, progress=None):
        calls.append(quick)
        time.sleep(0.2)  # long enough for the other callers to arrive while it measures
        return real_measure(info, quick=quick, progress=progress)

    monkeypatch.setattr(probe, "measure", counted)
    results = []
    threads = [threading.Thread(target=lambda: results.append(probe.probe_host(quick=True)))
               for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert len(calls) == 1 and len(results) == 3
    assert len({r.name for r in results}) == 1
    assert probe.cached_host() is not None
