"""`uol serve`: start the IDE (Dash); every request needs a token, loopback included (as Jupyter).

The token is fresh at each start and printed in the URL to open, unless the user gives one
through --token-file or $UOL_SERVE_TOKEN (--token works too, but argv shows in `ps`).

Deferred imports: each command imports its engine (compiler, simulator, profilers, remote
workers) when it runs, so `uol --help` and the other commands stay fast.
"""

from __future__ import annotations

import os
import signal
import socket
import stat
import sys
import threading
from pathlib import Path

import typer

TOKEN_SOURCES = "--token, --token-file and $UOL_SERVE_TOKEN"
NO_TOKEN_WARNING = ("WARNING: --no-token: any program or user on this machine can run code as "
                    "you through this server (and so can any web page you open that finds a "
                    "way past the loopback Host check). Leave it out to get a token.")
ARGV_TOKEN_WARNING = ("warning: a token given with --token shows in `ps` to every user of this "
                      "machine; prefer --token-file FILE or $UOL_SERVE_TOKEN.")


def read_token_file(path: Path) -> str:
    """The token in `path` (first line); the file must be readable by its owner alone."""
    try:
        st = path.stat()
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise typer.BadParameter(f"cannot read the token file {path}: {exc}") from None
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise typer.BadParameter(f"{path} can be read by other users (mode "
                                 f"{stat.S_IMODE(st.st_mode):o}): chmod 600 {path}")
    lines = text.splitlines()
    return lines[0] if lines else ""


def choose_token(token: str, token_file: Path | None, no_token: bool) -> tuple[str | None, str]:
    """(the token or None, where it came from: 'fresh', 'argv', 'file', 'env' or 'none').

    An explicit --token or --token-file wins over $UOL_SERVE_TOKEN (the environment is ambient).
    """
    from app.security import TOKEN_ENV, new_token

    if no_token:
        return None, "none"
    if token and token_file:
        raise typer.BadParameter(f"give the token one way only ({TOKEN_SOURCES})")
    if token:
        return token, "argv"
    if token_file:
        return read_token_file(token_file), "file"
    if os.environ.get(TOKEN_ENV):
        return os.environ[TOKEN_ENV], "env"
    return new_token(), "fresh"


def server_url(host: str, port: int, scheme: str) -> str:
    """The address a browser uses: the machine's name for a wildcard bind, brackets for IPv6."""
    name = socket.gethostname() if host in ("0.0.0.0", "::", "") else host
    if ":" in name:
        name = f"[{name}]"
    return f"{scheme}://{name}:{port}/"


def _open_later(url: str) -> None:
    import webbrowser

    threading.Timer(0.5, webbrowser.open, args=(url,)).start()


def serve(host: str = typer.Option("127.0.0.1", help="interface to bind (127.0.0.1: this "
                                                     "machine only)"),
          port: int = typer.Option(8050, help="TCP port (0: any free port)"),
          token: str = typer.Option("", help="the token clients must present (shows in `ps`: "
                                             "prefer --token-file or $UOL_SERVE_TOKEN); default: "
                                             "a fresh one, printed in the URL"),
          token_file: Path = typer.Option(None, help="read the token from this file's first "
                                                     "line (mode 600)"),
          no_token: bool = typer.Option(False, "--no-token", help="no token (loopback only): "
                                        "every local user can then run code as you"),
          open_browser: bool = typer.Option(False, "--open", help="open the URL in a browser"),
          certfile: Path = typer.Option(None, help="TLS certificate (PEM): serve https, "
                                                   "cookies marked Secure"),
          keyfile: Path = typer.Option(None, help="TLS private key (PEM) for --certfile"),
          debug: bool = typer.Option(False, help="Dash dev tools and reload"),
          broker: str = typer.Option("", "--broker", help="Redis URL of remote target workers "
                                     "(`uol worker`): Run/Tune/Profile on a target with a live "
                                     "worker run there, and the IDE's background jobs go "
                                     "through it to a job worker started here; default: "
                                     "everything runs in this process"),
          secret_file: Path = typer.Option(None, "--secret-file", help="the workers' shared "
                                           "secret (mode 600); default "
                                           "$UOL_REMOTE_SECRET_FILE or $UOL_REMOTE_SECRET")
          ) -> None:
    """Start UOL Studio in the browser: Studio, Graph, Debugger, Profiler, Communication, ..."""
    from app.security import refusal

    if no_token and (token or token_file):
        typer.echo("Refusing to start: --no-token and a token were both given: choose one",
                   err=True)
        raise typer.Exit(2)
    if bool(certfile) != bool(keyfile):
        typer.echo("Refusing to start: TLS needs both --certfile and --keyfile", err=True)
        raise typer.Exit(2)
    chosen, source = choose_token(token, token_file, no_token)
    why = refusal(host, chosen, debug, no_token)
    if why:
        typer.echo(f"Refusing to start: {why}", err=True)
        raise typer.Exit(2)
    if source == "argv":
        typer.echo(ARGV_TOKEN_WARNING, err=True)
    if no_token:
        typer.echo(NO_TOKEN_WARNING, err=True)
    job_worker = None
    if broker:
        _use_broker(broker, secret_file)
        # the reloader's watching parent (--debug) serves nothing: only its child needs one
        if not debug or os.environ.get("WERKZEUG_RUN_MAIN") == "true":
            # SIGTERM while the worker starts must still stop it (and remove its key)
            signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
            job_worker = _start_job_worker()
    try:
        _run(host, port, chosen, source, no_token, certfile, keyfile, debug, open_browser)
    finally:
        if job_worker is not None:
            job_worker()


def _run(host: str, port: int, chosen: str | None, source: str, no_token: bool,
         certfile: Path | None, keyfile: Path | None, debug: bool, open_browser: bool) -> None:
    """Build the IDE and serve it until Ctrl-C or SIGTERM."""
    from app.main import create_app
    from app.security import TOKEN_ENV, is_loopback

    app = create_app(token=chosen, no_token=no_token)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # idle kernels' threads must not spin
    scheme = "https" if certfile else "http"
    ssl_context = (str(certfile), str(keyfile)) if certfile else None
    if debug:
        # the reloader runs this command again in a child: it must find the same token
        if chosen:
            os.environ[TOKEN_ENV] = chosen
        _announce(server_url(host, port, scheme), chosen, source, is_loopback(host), open_browser)
        app.run(host=host, port=port, debug=True, dev_tools_hot_reload=False,
                ssl_context=ssl_context)
        return
    from werkzeug.serving import make_server

    try:
        server = make_server(host, port, app.server, threaded=True, ssl_context=ssl_context)
    except OSError as exc:
        typer.echo(f"Cannot listen on {host}:{port}: {exc.strerror or exc}", err=True)
        raise typer.Exit(2) from None
    _announce(server_url(host, server.server_port, scheme), chosen, source, is_loopback(host),
              open_browser)
    # SIGTERM (a service manager, kill) ends like Ctrl-C, so exit hooks remove the job folder
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        typer.echo("UOL Studio stopped.")
    finally:
        server.server_close()


def _use_broker(broker: str, secret_file: Path | None) -> None:
    """Check the broker and the shared secret now (not at the first Run), then hand both to
    this process and its background jobs through the environment."""
    from uol_remote.celery_app import BROKER_ENV, check_broker_url
    from uol_remote.client import Coordinator
    from uol_remote.signing import SECRET_FILE_ENV, SecretError

    try:
        check_broker_url(broker)
        coordinator = Coordinator(broker, secret_file)
        workers = coordinator.live_workers()
    except (ValueError, SecretError) as exc:
        typer.echo(f"Refusing to start: {exc}", err=True)
        raise typer.Exit(2) from None
    except Exception as exc:  # redis unreachable: say where and how to fix it
        typer.echo(f"Refusing to start: cannot reach the broker at {broker}: {exc} (start "
                   "redis-server there or open the ssh tunnel: docs/remote.md)", err=True)
        raise typer.Exit(2) from None
    os.environ[BROKER_ENV] = broker
    if secret_file:
        os.environ[SECRET_FILE_ENV] = str(secret_file)
    live = ", ".join(f"{w['target']} ({w['facts']['host']})" for w in workers) or "none yet"
    typer.echo(f"Remote targets from {broker}: live workers: {live}")


def _start_job_worker():
    """Start the IDE's job worker (its background callbacks, through the broker, sealed
    with a fresh key in a private file) and set this process up to send it jobs; returns
    the function that stops it and removes the key."""
    from uol_cli.ide_worker_cmd import READY_SUFFIX, start_ide_worker, stop_ide_worker
    from uol_core.runtime.usercache import private_dir
    from uol_remote.ide_channel import KEY_FILE_ENV, QUEUE_ENV, new_queue_name, write_key

    queue = new_queue_name()
    key_file = write_key(private_dir("ide-jobs"), queue)
    typer.echo(f"Starting the IDE's job worker (background jobs go through the broker on "
               f"queue {queue})...")
    try:
        proc = start_ide_worker(key_file, queue)
    except RuntimeError as exc:
        key_file.unlink(missing_ok=True)
        typer.echo(f"Refusing to start: {exc}", err=True)
        raise typer.Exit(2) from None
    os.environ[QUEUE_ENV], os.environ[KEY_FILE_ENV] = queue, str(key_file)

    def stop() -> None:
        stop_ide_worker(proc)
        key_file.unlink(missing_ok=True)
        Path(str(key_file) + READY_SUFFIX).unlink(missing_ok=True)

    return stop


def _announce(base: str, token: str | None, source: str, local: bool, open_browser: bool) -> None:
    """Print the URL to open (with the token when it was made here) and open it when asked."""
    if token is None:
        url = shown = base
    else:
        url = f"{base}?token={token}"
        # a token the user supplied is theirs to know; one made here must be shown to be usable
        shown = url if source == "fresh" else f"{base}?token=<the token from {source}>"
    typer.echo(f"UOL Studio at {shown}")
    typer.echo("  Open this URL once: the browser then keeps a session cookie until the server "
               "restarts." if token else "  No token: loopback Host names only.")
    if local:
        typer.echo("  Listening on this machine only; to serve others, pass --host (and TLS "
                   "with --certfile/--keyfile).")
    else:
        typer.echo(f"  Listening on {base}: every client needs the token.")
    sys.stdout.flush()
    if open_browser:
        _open_later(url)


def register(app: typer.Typer) -> None:
    """Add the top-level `serve` command to the `uol` CLI."""
    app.command("serve")(serve)
