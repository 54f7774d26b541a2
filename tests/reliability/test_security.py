"""Security: loopback by default, a token on every request when set, capped uploads, safe names."""

from __future__ import annotations

import base64

import pytest
import requests
from rel_helpers import auth_headers, callback_body, free_port, post, start_uol_serve, wait_http
from typer.testing import CliRunner

from app import security
from uol_core.odl import OdlError, parse

TOKEN = "s3cret-token-for-tests"


def test_loopback_names():
    assert all(security.is_loopback(h) for h in ("127.0.0.1", "localhost", "::1", "[::1]",
                                                  "127.0.0.2"))
    assert not any(security.is_loopback(h) for h in ("0.0.0.0", "::", "192.168.1.4",
                                                     "example.com", ""))


@pytest.mark.parametrize("args, says", [
    (["--host", "0.0.0.0", "--no-token"], "loopback only"),
    (["--host", "10.1.2.3", "--token", "short"], "at least 16"),
    (["--host", "0.0.0.0", "--token", TOKEN, "--debug"], "127.0.0.1 only"),
])
def test_serve_refuses_unsafe_binds_before_binding(monkeypatch, args, says):
    """The refusal happens before the app exists: nothing listens on a public address."""
    import app.main
    from uol_cli.main import app as cli

    def must_not_start(**_kw):
        raise AssertionError("uol serve would have started")

    monkeypatch.setattr(app.main, "create_app", must_not_start)
    monkeypatch.delenv("UOL_SERVE_TOKEN", raising=False)
    result = CliRunner().invoke(cli, ["serve", *args])
    assert result.exit_code == 2, result.output
    assert says in result.output


@pytest.fixture(scope="module")
def token_server(tmp_path_factory):
    """`uol serve --token` on 127.0.0.1 in a child process (the token check on a real server)."""
    port = free_port()
    tmp = tmp_path_factory.mktemp("tok")
    proc = start_uol_serve(port, {"UOL_IDE_RUNS_DB": str(tmp / "runs.sqlite"),
                                  "UOL_MAX_REQUEST_MB": "1"}, "--token", TOKEN)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_http(base + "/_dash-layout", proc)
        yield base
    finally:
        proc.kill()
        proc.wait(10)


STATUS_BODY = callback_body([("status-target", "children"), ("status-gpu", "children"),
                             ("status-running", "children"), ("status-util", "children")],
                            [("status-tick", "n_intervals", 1)],
                            [("current-target", "data", "host")])


def test_every_route_needs_the_token(token_server):
    base = token_server
    page = requests.get(base + "/", headers={"Accept": "text/html"}, allow_redirects=False)
    assert page.status_code == 401 and "needs the server's token" in page.text
    for path in ("/_dash-layout", "/_dash-dependencies", "/assets/style.css", "/reports",
                 "/_dash-component-suites/dash/deps/react@18.3.1.min.js"):
        assert requests.get(base + path, allow_redirects=False).status_code == 401, path
    assert post(base, STATUS_BODY).status_code == 401  # callbacks (and so downloads) too
    wrong = {"X-UOL-Token": TOKEN + "x"}
    assert post(base, STATUS_BODY, headers=wrong).status_code == 401


def test_token_login_sets_a_cookie_and_leaves_the_url(token_server):
    s = requests.Session()
    first = s.get(token_server + f"/reports?token={TOKEN}", allow_redirects=False)
    assert first.status_code == 302 and "token" not in first.headers["Location"]
    session = [c for c in s.cookies if c.name.startswith(security.COOKIE)]
    assert len(session) == 1 and TOKEN not in session[0].value
    assert s.get(token_server + "/").status_code == 200
    assert post(token_server, STATUS_BODY, headers={}, cookies=s.cookies).status_code == 200


def test_header_tokens_and_cross_site_posts(token_server):
    for headers in ({"X-UOL-Token": TOKEN}, {"Authorization": f"token {TOKEN}"}):
        assert post(token_server, STATUS_BODY, headers=headers).status_code == 200
    evil = {"X-UOL-Token": TOKEN, "Origin": "http://evil.example"}
    assert post(token_server, STATUS_BODY, headers=evil).status_code == 403


def test_request_size_is_capped(token_server):
    big = dict(STATUS_BODY, state=[{"id": "current-target", "property": "data",
                                    "value": "x" * (2 << 20)}])
    assert post(token_server, big, headers={"X-UOL-Token": TOKEN}).status_code == 413


def test_loopback_server_needs_its_token_whatever_the_host_name(ide):
    """DNS rebinding: a page served as evil.example resolving to 127.0.0.1 has no token."""
    assert requests.get(ide + "/_dash-layout", headers=auth_headers(ide)).status_code == 200
    assert requests.get(ide + "/_dash-layout").status_code == 401
    assert requests.get(ide + "/_dash-layout", headers={"Host": "evil.example"}).status_code == 401
    assert post(ide, STATUS_BODY, headers={"Host": "evil.example:80"}).status_code == 401


def _data_url(raw: bytes) -> str:
    return "data:application/octet-stream;base64," + base64.b64encode(raw).decode()


def test_uploads_are_capped_typed_and_text_only():
    assert security.decode_upload(_data_url(b"op a"), "x.odl", "odl") == "op a"
    cases = [(_data_url(b"x" * (300 << 10)), "big.odl", "odl", "limit"),
             (_data_url(b"{}"), "evil.py", "graph", "not a graph file"),
             (_data_url(b"\xff\xfe"), "t.json", "topology", "UTF-8"),
             ("no data url", "t.json", "topology", "base64"),
             (_data_url(b"{}"), "../../etc/passwd.json", "zip", "unknown upload kind")]
    for contents, name, kind, says in cases:
        with pytest.raises(security.UploadError, match=says):
            security.decode_upload(contents, name, kind)


def test_report_export_names_stay_in_their_folder():
    from app.services import reports

    with pytest.raises(ValueError, match="unknown format"):
        reports.export({"id": 1}, "../../x")


@pytest.mark.parametrize("name", ["a*/ system(\"id\"); /*", "x;y", "a\"b", "é\\n", "a b"])
def test_raw_text_never_becomes_a_c_identifier(name):
    with pytest.raises(OdlError):
        parse(f"op {name}(A: f32[M]) -> Y: f32[M]:\n    Y[m] = A[m]\n")


def test_client_knob_values_outside_the_domain_are_refused():
    """A crafted callback cannot push an unchecked knob value into the generated C."""
    from rel_helpers import target_name

    from app.services.kernels import compile_odl
    from uol_core.ops import op_text

    res = compile_odl(op_text("matmul"), "c", target_name(), {"M": 16, "N": 16, "K": 16},
                      {"mr": 100000, "threads": 10**6})
    assert not res.ok and "legal values" in res.error


def _simulate_custom(custom) -> dict:
    return callback_body(
        [("comm-result", "children"), ("link-heatmap", "figure"), ("comm-curves", "figure"),
         ("comm-state", "data"), ("comm-fault", "children")],
        [("simulate-button", "n_clicks", 1), ("fault-clear", "n_clicks", None)],
        [("topology-select", "value", "custom"), ("nodes-input", "value", 8),
         ("link-select", "value", "default"), ("oversub-input", "value", 1),
         ("collective-select", "value", "allreduce"), ("algorithm-select", "value", "auto"),
         ("size-input", "value", "1MiB"), ("codec-select", "value", "none"),
         ("comm-custom", "data", custom)])


def test_comm_custom_given_as_a_path_is_refused_over_http(ide, tmp_path):
    """A crafted callback naming a file: the same clear refusal whether or not it exists."""
    secret = tmp_path / "planted.json"
    secret.write_text('{"nodes": [{"id": "TOPSECRET-7"}], "links": []}')
    answers = []
    for custom in (str(secret), "/etc/shadow", "/nonexistent/x.json"):
        resp = post(ide, _simulate_custom(custom))
        assert resp.status_code == 200
        answers.append(resp.json()["response"]["comm-result"]["children"])
    text = str(answers[0])
    assert "paths are not accepted" in text and "TOPSECRET" not in text
    assert answers[0] == answers[1] == answers[2]  # no existence oracle
