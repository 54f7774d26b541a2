"""A real cluster on loopback for the remote-worker tests: redis-server on a free port with a
temporary folder, and workers as separate `uol worker` processes (two serve `host`, one the
AVX2 target, which every x86 CPU with AVX2 + FMA runs)."""

from __future__ import annotations

import shutil

import pytest

from uol_remote.local_cluster import (
    LocalBroker,
    start_worker,
    stop_processes,
    wait_for_workers,
    write_secret,
)

WORKERS = ("host", "host", "avx2-desktop")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """(broker, secret file, coordinator, {node: process}) for every test of the module; the
    workers and the broker stop after it, not at the end of the whole suite."""
    from uol_remote.client import Coordinator
    from uol_remote.hostfacts import host_facts

    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed (apt-get install redis-server): the remote "
                    "workers' tests need a real broker")
    if not {"avx2", "fma"} <= set(host_facts()["flags"]):
        pytest.skip("the second worker serves avx2-desktop, which needs an AVX2 + FMA CPU")
    folder = tmp_path_factory.mktemp("remote")
    broker = LocalBroker(folder / "redis").start()
    secret = write_secret(folder / "remote.secret")
    procs = [start_worker(t, broker.url, secret, folder / f"worker{i}.log")
             for i, t in enumerate(WORKERS)]
    coordinator = Coordinator(broker.url, secret)
    try:
        wait_for_workers(coordinator, {"host": 2, "avx2-desktop": 1}, procs)
        by_node = {}
        for worker in coordinator.live_workers():
            pid = int(worker["node"].split(".", 1)[1].split("@", 1)[0])
            by_node[worker["node"]] = next(p for p in procs if p.pid == pid)
        yield broker, secret, coordinator, by_node
    finally:
        stop_processes(procs)
        broker.stop()
        for i in range(len(WORKERS)):
            log = folder / f"worker{i}.log"
            print(f"--- worker {i} log tail ---\n{log.read_text()[-1500:]}")
