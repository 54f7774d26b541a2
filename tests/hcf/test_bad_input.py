"""Bad input gets one line naming the line or the element, exit status 2, no traceback: a log in
an unknown layout, a topology with no path between GPUs, a collective the fabric cannot run."""

import json

import pytest
from typer.testing import CliRunner

from uol_cli.hcf_cmd import app

RUNNER = CliRunner()


def _one_error_line(args: list[str]) -> str:
    out = RUNNER.invoke(app, args)
    assert out.exit_code == 2, out.output
    lines = [x for x in out.output.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), out.output  # one line, even when long
    assert "Traceback" not in out.output
    return lines[0]


def test_a_log_in_an_unknown_layout_names_its_header_line(tmp_path):
    log = tmp_path / "perf.txt"
    log.write_text("# nThread 1 nGpus 8\n#  size  count  type  latency  bandwidth\n 1024 256 float 12.0 0.1\n")
    line = _one_error_line(["nccl-tests", str(log)])
    assert "perf.txt:2: unknown nccl-tests layout" in line and "latency" in line


def test_a_row_that_cannot_be_read_names_its_line(tmp_path):
    log = tmp_path / "perf.txt"
    log.write_text("#  size count type redop root time algbw busbw #wrong time algbw busbw #wrong\n"
                   " 1024 256 float sum -1 abc 0.1 0.2 0 1.0 0.1 0.2 0\n")
    assert "perf.txt:2:" in _one_error_line(["nccl-tests", str(log)])


def test_a_topology_with_no_path_names_the_unreachable_gpu(tmp_path):
    topo = {"name": "split", "nodes": [{"id": "g0", "kind": "gpu"}, {"id": "g1", "kind": "gpu"},
                                       {"id": "s0", "kind": "switch"}],
            "links": [{"src": "g0", "dst": "s0", "bandwidth_gbps": 10, "latency_us": 1}]}
    path = tmp_path / "split.json"
    path.write_text(json.dumps(topo))
    line = _one_error_line(["simulate", "--topology", "custom", "--topology-file", str(path), "--size", "1MiB"])
    assert "disconnected" in line and "'g1'" in line and "g0" in line


@pytest.mark.parametrize(("args", "named"), [
    (["--topology", "fat-tree", "--nodes", "16", "--algorithm", "nvls"], "nvls cannot run allreduce on fat-tree"),
    (["--topology", "ring", "--nodes", "8", "--collective", "alltoall", "--algorithm", "rabenseifner"],
     "alltoall has no algorithm 'rabenseifner'"),
])
def test_a_collective_the_fabric_cannot_run_names_the_algorithm_and_the_fabric(args, named):
    assert named in _one_error_line(["simulate", *args, "--size", "1MiB"])
