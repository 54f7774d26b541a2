"""`uol worker --target NAME --broker redis://HOST:PORT/N`: serve one HFL target to remote
coordinators (the IDE with `uol serve --broker`, `uol tune --targets`).

The worker checks first that this machine can run the target (its ISA flags, or its GPU),
then takes signed jobs from the target's queue one at a time (timings must not overlap); a C
kernel job runs in a sandboxed process of its own (uol_remote.kernel_sandbox), the others in a
child process, as a local run.

Deferred imports: each command imports its engine (compiler, simulator, profilers, remote
workers) when it runs, so `uol --help` and the other commands stay fast.
"""

from __future__ import annotations

import logging
from pathlib import Path

import typer


def _fail(message: str) -> None:
    typer.echo(f"uol worker: {message}", err=True)
    raise typer.Exit(2)


def worker(target: str = typer.Option(..., "--target", help="the HFL target this machine "
                                      "serves (`uol hw list`); its name is the queue"),
           broker: str = typer.Option(..., "--broker", help="Redis URL, e.g. "
                                      "redis://127.0.0.1:6379/0 (through an ssh tunnel)"),
           secret_file: Path = typer.Option(None, "--secret-file", help="the shared secret "
                                            "(mode 600); default $UOL_REMOTE_SECRET_FILE or "
                                            "$UOL_REMOTE_SECRET"),
           check: bool = typer.Option(False, "--check", help="check this machine against the "
                                      "target and the broker, then exit"),
           loglevel: str = typer.Option("INFO", "--loglevel", help="Celery log level")) -> None:
    """Serve TARGET's kernel jobs (run, verify, measure, tune, profile) from BROKER."""
    from uol_core.hfl import HflError, load_target
    from uol_remote.celery_app import check_broker_url, make_app, redis_client
    from uol_remote.hostfacts import host_facts, refusal, worker_name
    from uol_remote.signing import SecretError, load_secret

    try:
        check_broker_url(broker)
        tgt = load_target(target)
    except (ValueError, HflError) as exc:
        _fail(str(exc))
    facts = host_facts()
    why = refusal(tgt, facts)
    if why:
        _fail(f"refusing to serve {target}: {why}")
    try:
        secret = load_secret(secret_file)
    except SecretError as exc:
        _fail(str(exc))
    redis = redis_client(broker)
    try:
        redis.ping()
    except Exception as exc:
        _fail(f"cannot reach the broker at {broker}: {exc}. Start redis-server there, or open "
              "the ssh tunnel (docs/remote.md)")
    node = worker_name(target)
    typer.echo(f"{node}: serves {target} on {facts['cpu']} ({facts['cores']} cores"
               f"{', ' + ', '.join(facts['gpus']) if facts['gpus'] else ''}) from {broker}")
    why = _self_test(target)
    if why:
        _fail(f"refusing to serve {target}: a test kernel for it does not run here: {why}")
    if check:
        return
    _serve(make_app(broker), redis, node, target, facts, secret, loglevel)


def _self_test(target: str) -> str | None:
    """Build, run and verify a small kernel of the target in the sandbox the jobs run in, and
    say which isolation that sandbox applies here."""
    from uol_core.ops import load_op, op_text
    from uol_remote.jobs import kernel_job
    from uol_remote.kernel_sandbox import run_kernel

    job, _ = kernel_job(op_text("relu"), target, {d: 16 for d in load_op("relu").dims},
                        min_seconds=0.01)
    job["check_only"] = True
    result = run_kernel(job, 120.0)
    typer.echo("kernel jobs run sandboxed: " + "; ".join(result["sandbox"].get("isolation", [])))
    return None if result.get("status") == "ok" else result.get("reason", result.get("status"))


def _serve(app, redis, node: str, target: str, facts: dict, secret: bytes,
           loglevel: str) -> None:
    """Run the Celery worker on the target's queue, with a heartbeat beside it."""
    from uol_remote import tasks
    from uol_remote.heartbeat import Heartbeat

    logging.basicConfig(level=loglevel.upper(), format="%(asctime)s %(name)s: %(message)s")
    tasks.CONTEXT.secret, tasks.CONTEXT.node, tasks.CONTEXT.target = secret, node, target
    tasks.CONTEXT.facts, tasks.CONTEXT.redis = facts, redis
    beat = Heartbeat(redis, node, target, facts).start()
    try:
        # solo pool: one job at a time in this process (measurements must not overlap);
        # no gossip/mingle: workers need not know each other, and start faster without
        app.worker_main(["worker", "--queues", target, "--pool", "solo", "--concurrency", "1",
                         "--hostname", node, "--without-gossip", "--without-mingle",
                         "--loglevel", loglevel])
    finally:
        beat.stop()


def tune_on_workers(op, sizes: dict, targets: list[str], broker: str | None, budget: int,
                    db: str | None, as_json: bool) -> None:
    """`uol tune --targets a,b`: each target's model top-`budget` measured on its live workers,
    all targets at once; every measurement lands in the tuning database as it arrives."""
    import json
    import sys

    from uol_remote.celery_app import broker_from_env
    from uol_remote.sweep import tune_targets

    broker = broker or broker_from_env()
    if not broker:
        _fail("--targets tunes on remote workers: give --broker redis://HOST:PORT/N")

    def progress(target: str, done: int, total: int) -> None:
        if not as_json:
            print(f"  {target}: {done}/{total} measured", file=sys.stderr, flush=True)

    results = tune_targets(broker, None, op, sizes, targets, budget, db, progress)
    if as_json:
        print(json.dumps(results, indent=2, default=str))
    else:
        for res in results:
            if "error" in res:
                print(f"{res['target']}: not tuned: {res['error']}")
                continue
            print(f"{res['target']}: best {res['best_gflops']:.1f} GFLOP/s with {res['best']} "
                  f"({res['verified']}/{res['measured']} verified on {res['parallel']} "
                  f"worker(s), {res['wall_s']:.1f} s)")
    if any("error" in r for r in results):
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add the top-level `worker` command to the `uol` CLI."""
    app.command("worker")(worker)


if __name__ == "__main__":  # `python -m uol_cli.worker_cmd`: the worker without the other commands
    typer.run(worker)
