"""The IDE's job worker: with `uol serve --broker`, the IDE's background callbacks (Tune, the
hardware probe, the guide's measurements) run here, a Celery worker on the IDE's machine that
`uol serve` starts beside itself and stops with itself.

It imports the IDE (so every background callback is registered as a task), then serves the
IDE's own queue only (never a target's: a Run on a target with a live worker still goes from
the callback to that worker, as a signed job). Its messages and results are sealed with the
key `uol serve` wrote for it (uol_remote.ide_channel).

Deferred imports: each command imports its engine (compiler, simulator, profilers, remote
workers) when it runs, so `uol --help` and the other commands stay fast.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

PARENT_ENV = "UOL_IDE_PARENT"  # the pid of `uol serve`: the worker ends when it is gone
READY_SUFFIX = ".ready"
START_WAIT_S = 120.0


def _end_with_parent(parent: int) -> None:
    """Stop this worker and its pool when `uol serve` is gone (killed, crashed): nobody is
    left to read the results."""
    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os.killpg(os.getpgid(0), signal.SIGKILL)

    threading.Thread(target=watch, name="uol-ide-parent", daemon=True).start()


def _pool_child_setup(**_) -> None:
    """In each pool process: let a callback start processes (the kernel sandbox, gloo ranks),
    as it can under the disk-cache manager (the pool marks its processes daemonic, and a
    daemonic process may not have children; ours end with the worker anyway), and end those
    with it when Dash's cancel terminates it."""
    import multiprocessing.process

    # billiard makes its pool process multiprocessing's current process, with billiard's key
    # type, which multiprocessing refuses to pickle when it spawns (the sandbox is spawned)
    this = multiprocessing.process.current_process()
    this._config["daemon"] = False
    this._config["authkey"] = multiprocessing.process.AuthenticationString(os.urandom(32))
    signal.signal(signal.SIGTERM, _end_with_children)


def _end_with_children(_signum, _frame) -> None:
    import psutil

    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            child.kill()
    os._exit(1)


def main() -> None:
    """Run the IDE's job worker (started by `uol serve --broker`, configured by its env)."""
    from celery.signals import worker_process_init, worker_ready

    from app.main import create_app
    from uol_remote.ide_channel import KEY_FILE_ENV, QUEUE_ENV

    _end_with_parent(int(os.environ[PARENT_ENV]))
    dash_app = create_app(no_token=True)  # registers every background callback as a task
    celery_app = dash_app._background_manager.handle  # the sealed app of make_manager
    queue = os.environ[QUEUE_ENV]
    ready = Path(os.environ[KEY_FILE_ENV] + READY_SUFFIX)
    worker_ready.connect(lambda **_: ready.touch(mode=0o600), weak=False)
    worker_process_init.connect(_pool_child_setup, weak=False)
    slots = max(2, min(4, len(os.sched_getaffinity(0))))
    # prefork: each callback in a process of its own, which Dash's cancel can terminate
    celery_app.worker_main(["worker", "--queues", queue, "--pool", "prefork",
                            "--concurrency", str(slots), "--hostname", f"{queue}@%h",
                            "--without-gossip", "--without-mingle", "--without-heartbeat",
                            "--loglevel", os.environ.get("UOL_IDE_WORKER_LOGLEVEL", "WARNING")])


def start_ide_worker(key_file: Path, queue: str, log: Path | None = None) -> subprocess.Popen:
    """Start the job worker for the IDE of this process (its env names the broker and the
    secret of the target workers) and wait until it takes jobs; RuntimeError if it cannot.
    Its messages go to `log`, else to this process's output."""
    from uol_remote.ide_channel import KEY_FILE_ENV, QUEUE_ENV

    env = dict(os.environ, **{QUEUE_ENV: queue, KEY_FILE_ENV: str(key_file),
                              PARENT_ENV: str(os.getpid())})
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    with open(log or os.devnull, "ab") as out:  # the child keeps its own handle
        proc = subprocess.Popen([sys.executable, "-m", "uol_cli.ide_worker_cmd"], env=env,
                                start_new_session=True, **({"stdout": out, "stderr": out}
                                                           if log else {}))
    ready = Path(str(key_file) + READY_SUFFIX)
    give_up = time.monotonic() + START_WAIT_S
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > give_up:
            stop_ide_worker(proc)
            raise RuntimeError(f"the IDE's job worker did not start (exit status "
                               f"{proc.returncode}); its messages are in {log or 'the output above'}")
        time.sleep(0.1)
    return proc


def stop_ide_worker(proc: subprocess.Popen) -> None:
    """Stop the job worker and its pool (a running callback ends with the IDE)."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)


if __name__ == "__main__":  # `python -m uol_cli.ide_worker_cmd`, as `uol serve` starts it
    main()
