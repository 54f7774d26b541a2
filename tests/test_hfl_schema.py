"""Broken HFL files give errors that name the file, the field and the expected type."""

from __future__ import annotations

from pathlib import Path

import pytest

from uol_core.hfl import HflError, load_file
from uol_core.hfl.loader import TARGETS_DIR

GOOD = (TARGETS_DIR / "raspberry-pi-5.toml").read_text()


def write(tmp_path: Path, text: str, name: str = "raspberry-pi-5") -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(text)
    return path


def error_of(tmp_path: Path, text: str, name: str = "raspberry-pi-5") -> str:
    with pytest.raises(HflError) as info:
        load_file(write(tmp_path, text, name))
    return str(info.value)


def replace_line(prefix: str, new: str) -> str:
    lines = [new if line.startswith(prefix) else line for line in GOOD.splitlines()]
    return "\n".join(lines) + "\n"


def test_good_file_loads(tmp_path: Path) -> None:
    assert load_file(write(tmp_path, GOOD)).cores == 4


@pytest.mark.parametrize(("text", "field", "expected"), [
    (replace_line("cores =", ""), "cores", "missing (a positive integer, required for kind 'cpu')"),
    (replace_line("cores =", 'cores = { value = "four", prov = "datasheet", source = "rpi" }'),
     "cores", "expected a positive integer, got str 'four'"),
    (replace_line("cores =", 'cores = { value = 4.5, prov = "datasheet", source = "rpi" }'),
     "cores", "expected a positive integer, got float"),
    (replace_line("cores =", 'cores = { value = true, prov = "datasheet", source = "rpi" }'),
     "cores", "expected a positive integer, got bool"),
    (replace_line("cores =", 'cores = { value = -4, prov = "datasheet", source = "rpi" }'),
     "cores", "expected a positive integer, got -4"),
    (replace_line("cores =", "cores = 4"), "cores", "expected a table { value = ..."),
    (replace_line("cores =", 'cores = { value = 4, prov = "guessed", source = "x" }'),
     "cores.prov", "expected one of datasheet, measured, assumed, got 'guessed'"),
    (replace_line("cores =", 'cores = { value = 4, prov = "datasheet" }'),
     "cores.source", "expected a non-empty string"),
    (replace_line("cores =", 'cores = { prov = "datasheet", source = "rpi" }'),
     "cores", "missing 'value' (a positive integer)"),
    (replace_line("cores =", 'coers = { value = 4, prov = "datasheet", source = "rpi" }'),
     "coers", "unknown field"),
    (replace_line("clock_ghz =", 'clock_ghz = { value = "fast", prov = "assumed", source = "x" }'),
     "clock_ghz", "expected a positive number, got str 'fast'"),
    (replace_line("isa =", 'isa = { value = "neon", prov = "assumed", source = "x" }'),
     "isa", "expected a list of ISA names (strings)"),
    (replace_line("kind =", 'kind = "tpu"'), "kind", "expected one of cpu, gpu, got 'tpu'"),
    (replace_line("fp32 =", 'fp33 = { value = 1.0, prov = "assumed", source = "x" }'),
     "peak_gflops.fp33", "unknown dtype; expected one of fp64, fp32"),
    (replace_line("fp32 =", ""), "peak_gflops.fp32", "missing"),
    (replace_line("kind =", 'kind = "gpu"'), "vector_bits", "does not apply to kind 'gpu'"),
    (replace_line("name =", 'name = "pi5"'), "name", "expected 'raspberry-pi-5'"),
])
def test_broken_field_names_file_field_and_expectation(tmp_path: Path, text: str, field: str,
                                                       expected: str) -> None:
    message = error_of(tmp_path, text)
    assert message.startswith("raspberry-pi-5.toml: ")
    assert f"field '{field}'" in message
    assert expected in message


def test_field_of_the_wrong_kind(tmp_path: Path) -> None:
    text = GOOD.replace("[peak_gflops]", 'warp_size = { value = 32, prov = "assumed", '
                                         'source = "x" }\n\n[peak_gflops]', 1)
    assert "field 'warp_size': does not apply to kind 'cpu'" in error_of(tmp_path, text)


def test_malformed_mma_shape(tmp_path: Path) -> None:
    text = GOOD.replace("[peak_gflops]", "[mma_shapes]\nint8 = { value = [[2, 2]], prov = "
                                         '"assumed", source = "x" }\n\n[peak_gflops]', 1)
    message = error_of(tmp_path, text)
    assert "field 'mma_shapes.int8'" in message and "[m, n, k] integer triples" in message


def test_toml_syntax_error_names_the_file(tmp_path: Path) -> None:
    message = error_of(tmp_path, GOOD.replace("cores = {", "cores = {{", 1))
    assert message.startswith("raspberry-pi-5.toml: TOML syntax error")


def test_fields_after_sources_table_get_a_hint(tmp_path: Path) -> None:
    text = "[sources]\nrpi = \"x\"\n" + GOOD.replace("[sources]", "[other]")
    message = error_of(tmp_path, text)
    assert "field 'name'" in message or "field 'sources'" in message


def test_source_alias_is_expanded(tmp_path: Path) -> None:
    target = load_file(write(tmp_path, GOOD))
    assert target.provenance("cores").source.startswith("Raspberry Pi 5 product brief")
    assert target.provenance("cores").kind == "datasheet"
    assert target.provenance("peak_gflops").kind == "assumed"
    with pytest.raises(KeyError):
        target.provenance("warp_size")


def test_a_cpu_file_without_its_fork_and_join_cost_gets_the_assumed_one(tmp_path: Path) -> None:
    """Every shipped CPU target states fork_join_cycles; a user's file may leave it out and
    then carries isa.toml's value, marked assumed and naming the file that lacked it."""
    shipped = load_file(write(tmp_path, GOOD))
    assert shipped.fork_join_cycles and shipped.provenance("fork_join_cycles").kind == "assumed"
    target = load_file(write(tmp_path, replace_line("fork_join_cycles =", "")))
    prov = target.provenance("fork_join_cycles")
    assert target.fork_join_cycles == 3000
    assert prov.kind == "assumed" and "not in raspberry-pi-5.toml" in prov.source
    assert "isa.toml" in prov.source
    assert "fork_join_cycles" in {name for name, _, _ in target.facts()}
