"""settle(): an alternated timing starts once the process's other threads have stopped spinning."""

from __future__ import annotations

import threading

from uol_core.runtime.settle import settle


def test_an_idle_process_settles_at_once():
    assert settle(window_s=0.01, limit_s=1.0) < 0.5


def test_a_spinning_thread_holds_the_wait_until_it_stops():
    stop = threading.Event()

    def spin() -> None:  # a runtime's worker pool spinning after its call
        while not stop.is_set():
            sum(range(200))

    worker = threading.Thread(target=spin)
    worker.start()
    try:
        waited = settle(window_s=0.02, idle_share=0.05, limit_s=0.3)
    finally:
        stop.set()
        worker.join()
    assert waited >= 0.3
