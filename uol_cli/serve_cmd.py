"""`uol serve`: start the IDE (Dash) on 127.0.0.1; another host needs a token the user sets."""

from __future__ import annotations

import os

import typer

LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")


def serve(host: str = typer.Option("127.0.0.1", help="interface to bind (127.0.0.1: this "
                                                     "machine only)"),
          port: int = typer.Option(8050, help="TCP port"),
          token: str = typer.Option("", help="required when --host is not local: clients "
                                             "open http://HOST:PORT/?token=TOKEN once",
                                    envvar="UOL_SERVE_TOKEN"),
          debug: bool = typer.Option(False, help="Dash dev tools and reload")) -> None:
    """Start UOL Studio in the browser: Studio, Graph, Debugger, Profiler, Communication, ..."""
    from app.security import is_loopback, refusal

    local = is_loopback(host)
    why = refusal(host, token, debug)
    if why:
        typer.echo(f"Refusing to start: {why}", err=True)
        raise typer.Exit(2)
    from app.main import create_app

    app = create_app(token=token or None)  # a token given on loopback is enforced too
    where = f"http://{host}:{port}/"
    typer.echo(f"UOL Studio at {where}" + (f"?token={token}" if token else ""))
    if local:
        typer.echo("Listening on this machine only; to serve another host, pass --host and "
                   "--token (a token you choose).")
    else:
        typer.echo(f"Listening on {host}: every client needs the token.")
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # idle kernels' threads must not spin
    app.run(host=host, port=port, debug=debug, dev_tools_hot_reload=False)


def register(app: typer.Typer) -> None:
    """Add the top-level `serve` command to the `uol` CLI."""
    app.command("serve")(serve)
