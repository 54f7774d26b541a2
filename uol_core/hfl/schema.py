"""HFL record schema: the fields a target may carry, their types, and explicit validation."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

PROVENANCE_KINDS = ("datasheet", "measured", "assumed")
KINDS = ("cpu", "gpu")
DTYPES = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8")

# Field name -> (type tag, kinds it applies to, required for those kinds).
# Type tags: int, float, isa (list of str), gflops (dtype -> float),
# mma (dtype -> [[m, n, k], ...]), links (link name -> float).
FIELDS: dict[str, tuple[str, tuple[str, ...], bool]] = {
    "isa": ("isa", KINDS, True),
    "cores": ("int", KINDS, True),
    "clock_ghz": ("float", KINDS, False),
    "vector_bits": ("int", ("cpu",), True),
    "vector_registers": ("int", ("cpu",), True),
    "fma_units": ("int", ("cpu",), True),
    "fma_latency_cycles": ("int", ("cpu",), True),
    # One OpenMP fork and join of all cores (warm thread pool): what a parallel split must
    # outlast. Optional in a file: isa.toml's assumed value fills it (`validate`).
    "fork_join_cycles": ("int", ("cpu",), False),
    "l1d_bytes": ("int", KINDS, True),
    "l2_bytes": ("int", KINDS, True),
    "l3_bytes": ("int", KINDS, False),
    "line_bytes": ("int", KINDS, True),
    "warp_size": ("int", ("gpu",), True),
    "registers_per_sm": ("int", ("gpu",), True),
    "registers_per_thread_max": ("int", ("gpu",), True),
    "smem_per_block_bytes": ("int", ("gpu",), True),
    "smem_per_block_optin_bytes": ("int", ("gpu",), True),
    "smem_per_sm_bytes": ("int", ("gpu",), True),
    "max_threads_per_block": ("int", ("gpu",), True),
    "mma_shapes": ("mma", KINDS, False),
    "peak_gflops": ("gflops", KINDS, True),
    "mem_bandwidth_gbps": ("float", KINDS, True),
    "interconnect_gbps": ("links", KINDS, False),
    # GCC machine flags that build for this CPU when it is not the host (cross builds).
    "compiler_flags": ("flags", ("cpu",), False),
}
DICT_TYPES = ("gflops", "mma", "links")
TYPE_WORDS = {"int": "a positive integer", "float": "a positive number",
              "isa": "a list of ISA names (strings)", "gflops": "a positive number (GFLOP/s)",
              "mma": "a list of [m, n, k] integer triples", "links": "a positive number (GB/s)",
              "flags": "a list of compiler flags (strings starting with '-')"}
PLAIN_KEYS = {"name", "kind", "description", "match", "sources", "measurements"}


class HflError(ValueError):
    """A bad or missing HFL field: names the file, the field and what was expected."""

    def __init__(self, file: str, field: str, message: str) -> None:
        super().__init__(f"{file}: field '{field}': {message}" if field else f"{file}: {message}")
        self.file = file
        self.field = field
        self.message = message


@dataclass(frozen=True)
class Provenance:
    """Where a number comes from: a datasheet (with source), a measurement, or an assumption."""

    kind: str
    source: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.source}" if self.source else self.kind


@dataclass
class Target:
    """One hardware target: plain numbers (None where not applicable) plus their provenance."""

    name: str
    kind: str
    description: str = ""
    isa: list[str] = field(default_factory=list)
    cores: int | None = None
    clock_ghz: float | None = None
    vector_bits: int | None = None
    vector_registers: int | None = None
    fma_units: int | None = None
    fma_latency_cycles: int | None = None
    fork_join_cycles: int | None = None
    l1d_bytes: int | None = None
    l2_bytes: int | None = None
    l3_bytes: int | None = None
    line_bytes: int | None = None
    warp_size: int | None = None
    registers_per_sm: int | None = None
    registers_per_thread_max: int | None = None
    smem_per_block_bytes: int | None = None
    smem_per_block_optin_bytes: int | None = None
    smem_per_sm_bytes: int | None = None
    max_threads_per_block: int | None = None
    mma_shapes: dict[str, list[list[int]]] = field(default_factory=dict)
    peak_gflops: dict[str, float] = field(default_factory=dict)
    mem_bandwidth_gbps: float | None = None
    interconnect_gbps: dict[str, float] = field(default_factory=dict)
    compiler_flags: list[str] = field(default_factory=list)
    match: list[str] = field(default_factory=list)
    measurements: dict[str, Any] = field(default_factory=dict)
    source_file: str = ""
    _provenance: dict[str, Provenance] = field(default_factory=dict, repr=False)

    def provenance(self, name: str) -> Provenance:
        """Provenance of a field ('cores') or a dict entry ('peak_gflops.fp32').

        For a whole dict field the least certain entry wins (assumed > measured > datasheet),
        so an explanation never overstates how sure a number is.
        """
        if name in self._provenance:
            return self._provenance[name]
        entries = [p for key, p in self._provenance.items() if key.startswith(name + ".")]
        if not entries:
            raise KeyError(f"target {self.name} has no field '{name}'")
        return max(entries, key=lambda p: PROVENANCE_KINDS.index(p.kind))

    def facts(self) -> list[tuple[str, Any, Provenance]]:
        """Every number as (field, value, provenance); dict entries as 'field.key'."""
        out: list[tuple[str, Any, Provenance]] = []
        for key, prov in self._provenance.items():
            base, _, sub = key.partition(".")
            value = getattr(self, base)
            out.append((key, value[sub] if sub else value, prov))
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready record: every field with value, provenance kind and source."""
        fields = {key: {"value": value, "prov": prov.kind, "source": prov.source}
                  for key, value, prov in self.facts()}
        return {"name": self.name, "kind": self.kind, "description": self.description,
                "match": self.match, "fields": fields, "measurements": self.measurements}


def _check_number(file: str, name: str, value: Any, tag: str) -> int | float:
    """A positive int (or number, for float fields); bool is not a number here."""
    ok_types = (int,) if tag == "int" else (int, float)
    if isinstance(value, bool) or not isinstance(value, ok_types):
        raise HflError(file, name, f"expected {TYPE_WORDS[tag]}, got {type(value).__name__} "
                                   f"{value!r}")
    if value <= 0:
        raise HflError(file, name, f"expected {TYPE_WORDS[tag]}, got {value!r}")
    return value if tag == "int" else float(value)


def _check_value(file: str, name: str, value: Any, tag: str) -> Any:
    if tag in ("int", "float", "gflops", "links"):
        return _check_number(file, name, value, "int" if tag == "int" else "float")
    if tag in ("isa", "flags"):
        if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
            raise HflError(file, name, f"expected {TYPE_WORDS[tag]}, got {value!r}")
        if tag == "flags" and not all(v.startswith("-") and " " not in v for v in value):
            raise HflError(file, name, f"expected {TYPE_WORDS[tag]}, got {value!r}")
        return list(value)
    # mma: a non-empty list of [m, n, k] positive integer triples
    if not isinstance(value, list) or not value:
        raise HflError(file, name, f"expected {TYPE_WORDS[tag]}, got {value!r}")
    for shape in value:
        if (not isinstance(shape, list) or len(shape) != 3
                or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0
                           for v in shape)):
            raise HflError(file, name, f"expected {TYPE_WORDS[tag]}, got {shape!r} in {value!r}")
    return [list(s) for s in value]


def _check_entry(file: str, name: str, entry: Any, tag: str,
                 sources: dict[str, str]) -> tuple[Any, Provenance]:
    """One `{ value = ..., prov = ..., source = ... }` entry -> (value, Provenance)."""
    if not isinstance(entry, dict):
        raise HflError(file, name, "expected a table { value = ..., prov = \"datasheet\"|"
                                   "\"measured\"|\"assumed\", source = \"...\" }, "
                                   f"got {type(entry).__name__} {entry!r}")
    unknown = set(entry) - {"value", "prov", "source"}
    if unknown:
        raise HflError(file, name, f"unknown key(s) {sorted(unknown)}; expected value, prov, source")
    if "value" not in entry:
        raise HflError(file, name, f"missing 'value' ({TYPE_WORDS[tag]})")
    prov = entry.get("prov")
    if prov not in PROVENANCE_KINDS:
        raise HflError(file, name + ".prov",
                       f"expected one of {', '.join(PROVENANCE_KINDS)}, got {prov!r}")
    source = entry.get("source", "")
    if not isinstance(source, str) or not source.strip():
        # Every number says where it came from; an assumption says why it was assumed.
        raise HflError(file, name + ".source", f"expected a non-empty string (the document for "
                                               f"'{prov}', or the reason), got {source!r}")
    value = _check_value(file, name, entry["value"], tag)
    return value, Provenance(prov, resolve_source(source, sources))


def resolve_source(source: str, sources: dict[str, str]) -> str:
    """Expand a [sources] alias, alone ('ds') or as a prefix ('ds: FP32 67 TFLOPS')."""
    alias, sep, rest = source.partition(":")
    if source in sources:
        return sources[source]
    if sep and alias.strip() in sources:
        return f"{sources[alias.strip()]}: {rest.strip()}"
    return source


def validate(data: dict[str, Any], file: str) -> Target:
    """Build a Target from one parsed record, or raise HflError naming file and field."""
    name = data.get("name")
    if not isinstance(name, str) or not name:
        raise HflError(file, "name", f"expected a non-empty string, got {name!r}")
    kind = data.get("kind")
    if kind not in KINDS:
        raise HflError(file, "kind", f"expected one of {', '.join(KINDS)}, got {kind!r}")
    sources = data.get("sources", {})
    if not isinstance(sources, dict) or not all(isinstance(v, str) for v in sources.values()):
        raise HflError(file, "sources", "expected a table of alias = \"document name\" strings "
                                        "(hint: in TOML, keys after [sources] belong to it: "
                                        "write the fields before any [table])")
    unknown = set(data) - PLAIN_KEYS - set(FIELDS)
    if unknown:
        raise HflError(file, sorted(unknown)[0], f"unknown field; known fields: "
                                                 f"{', '.join(FIELDS)}")
    target = Target(name=name, kind=kind, description=str(data.get("description", "")),
                    match=list(data.get("match", [])), source_file=file,
                    measurements=dict(data.get("measurements", {})))
    for fname, (tag, kinds, required) in FIELDS.items():
        if fname not in data:
            if required and kind in kinds:
                raise HflError(file, fname, f"missing ({TYPE_WORDS[tag]}, required for kind "
                                            f"'{kind}')")
            continue
        if kind not in kinds:
            raise HflError(file, fname, f"does not apply to kind '{kind}'")
        if tag in DICT_TYPES:
            _set_dict(target, file, fname, tag, data[fname], sources)
        else:
            value, prov = _check_entry(file, fname, data[fname], tag, sources)
            setattr(target, fname, value)
            target._provenance[fname] = prov
    if kind == "cpu" and target.fork_join_cycles is None:
        _assume_fork_join(target)
    if "fp32" not in target.peak_gflops:
        raise HflError(file, "peak_gflops.fp32", "missing (every target needs its fp32 peak)")
    return target


def _assume_fork_join(target: Target) -> None:
    """A CPU file without its fork/join cost gets isa.toml's assumed one, saying so."""
    from uol_core.hfl.sysinfo import isa_table  # the ISA facts file; sysinfo needs no schema

    entry = isa_table()["fork_join_cycles"]
    target.fork_join_cycles = int(entry["value"])
    target._provenance["fork_join_cycles"] = Provenance(
        "assumed", f"not in {target.source_file}; isa.toml default: {entry['source']}")


def _set_dict(target: Target, file: str, fname: str, tag: str, table: Any,
              sources: dict[str, str]) -> None:
    if not isinstance(table, dict):
        raise HflError(file, fname, f"expected a table of entries, got {table!r}")
    out: dict[str, Any] = {}
    for key, entry in table.items():
        if tag in ("gflops", "mma") and key not in DTYPES:
            raise HflError(file, f"{fname}.{key}", f"unknown dtype; expected one of "
                                                   f"{', '.join(DTYPES)}")
        value, prov = _check_entry(file, f"{fname}.{key}", entry, tag, sources)
        out[key] = value
        target._provenance[f"{fname}.{key}"] = prov
    setattr(target, fname, out)
