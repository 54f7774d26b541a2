"""Read nccl-tests output in every layout it has printed; refuse what cannot be read, naming the line.

Layouts seen in published logs:
* current: ``size count type redop root | time algbw busbw #wrong | time algbw busbw #wrong``
* older (before the root column): ``size count type redop | time algbw busbw error | ...``,
  the error column holding the max deviation (``0e+00``, ``4e-07``) or ``N/A`` with ``-c 0``
* the NCCL 1.x tests: ``bytes N type op | time algbw busbw res | ...`` with times in ms
* a run whose rows carry only the out-of-place group
* lines prefixed by the launcher: ``[1,0]<stdout>:`` (mpirun --tag-output), ``[0]`` (rank
  prefixes, even in mid-line when ranks' output interleaves), ``0: `` (srun --label)
* header lines with or without the leading ``#`` (logs pasted into issues lose it)
* several collectives in one file (each run starts at its ``nThread`` line)

The column header decides how a row is split, so the time is never taken for a root. Every row is
checked against its own algbw (size / time): a row that does not agree, or that has the wrong
number of fields, is refused with its line number.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from hcf_sim.errors import MAX_PATH_CHARS, HcfError, check_name

_LAUNCHER_TAG = re.compile(r"\[\d+(?:,\d+)?\](?:<std(?:out|err)>)?:?")
_SRUN_LABEL = re.compile(r"^\s*\d+:\s")
_PERF_NAME = re.compile(r"\b(all_reduce|all_gather|reduce_scatter|alltoall|broadcast|reduce|sendrecv"
                        r"|scatter|gather|hypercube)_perf")
_FILE_NAME = re.compile(r"(all_reduce|all_gather|reduce_scatter|alltoall|broadcast|reduce)")
_ALIASES = {"bytes": "size", "n": "count", "op": "redop", "res": "wrong", "error": "wrong",
            "#wrong": "wrong", "wrong": "wrong"}
_GROUP = ("time", "algbw", "busbw", "wrong")
MAX_LOG_BYTES = 64 << 20  # nccl-tests logs are kilobytes; a bigger file is not one


@dataclass
class NcclRow:
    """One size of one run: the out-of-place figures, and the in-place ones when printed."""

    size: int
    count: int
    type: str
    redop: str | None
    root: int | None
    time_us: float
    algbw: float
    busbw: float
    wrong: str
    line: int
    in_place_time_us: float | None = None
    in_place_algbw: float | None = None
    in_place_busbw: float | None = None


@dataclass
class NcclRun:
    """One collective's table in a log: its rows, rank count and the layout it was printed in."""

    collective: str | None  # nccl-tests name: all_reduce, all_gather, ...
    ranks: int
    ranks_from: str  # 'rank lines' or 'busbw/algbw ratio'
    layout: str
    source: str
    rows: list[NcclRow] = field(default_factory=list)
    avg_busbw: float | None = None

    def to_dict(self) -> dict:
        """A JSON-ready dict."""
        return asdict(self)


@dataclass
class _Header:
    prefix: list[str]
    groups: int
    time_scale: float  # multiply the printed time by this to get microseconds
    layout: str
    wrong: bool  # each group ends with a validation column (#wrong, error, res)


def _clean(raw: str) -> tuple[str, bool]:
    """The line without launcher tags; and whether it is a comment (header) line."""
    text = _LAUNCHER_TAG.sub(" ", raw)
    text = _SRUN_LABEL.sub("", text, count=1)
    stripped = text.strip()
    return (stripped[1:].strip(), True) if stripped.startswith("#") else (stripped, False)


def _parse_header(tokens: list[str]) -> _Header | None:
    names = [_ALIASES.get(t.lower(), t.lower()) for t in tokens]
    if "size" not in names or "time" not in names or "algbw" not in names:
        return None
    first = names.index("time")
    prefix, rest = names[:first], names[first:]
    group = list(_GROUP) if "wrong" in rest else list(_GROUP[:3])
    groups = max(1, len(rest) // len(group))
    if rest[:len(group)] != group:
        return None
    nccl1 = "bytes" in [t.lower() for t in tokens]
    layout = ("nccl 1.x tests (bytes N type op, res, ms)" if nccl1 else
              "current (root, #wrong)" if "root" in prefix and "#wrong" in tokens else
              "root column" if "root" in prefix else
              "older (no root column, error column)" if "error" in [t.lower() for t in tokens] else
              "no root column")
    return _Header(prefix, groups, 1000.0 if nccl1 else 1.0, layout, len(group) == 4)


def _number(text: str, what: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"{what} {text!r} is not a number") from None


def _row(tokens: list[str], h: _Header, line: int) -> NcclRow:
    n_prefix, glen = len(h.prefix), 4 if h.wrong else 3
    n_groups = (len(tokens) - n_prefix) / glen
    # nccl-tests prints out-of-place then in-place; a pasted header may show only the first group
    if n_groups not in (1, 2) or len(tokens) <= n_prefix:
        raise ValueError(f"{len(tokens)} fields, the column header announces {n_prefix} + "
                         f"{h.groups} x {glen} ({' '.join(h.prefix)} | time algbw busbw"
                         f"{' wrong' if glen == 4 else ''})")
    cols = dict(zip(h.prefix, tokens, strict=False))
    size, count = int(_number(cols["size"], "size")), int(_number(cols.get("count", "0"), "count"))
    vals = tokens[n_prefix:]
    t, alg, bus = (_number(vals[i], n) for i, n in enumerate(("time", "algbw", "busbw")))
    t *= h.time_scale
    if t <= 0:
        raise ValueError(f"time {vals[0]} is not positive")
    expected = size / (t * 1e3)  # nccl-tests: algbw GB/s = bytes / (us x 1e3)
    if abs(alg - expected) > 0.011 + 0.02 * expected:
        raise ValueError(f"algbw {alg} does not match size / time = {expected:.2f} GB/s "
                         "(a column is misread or the row is damaged)")
    row = NcclRow(size, count, cols.get("type", "?"), cols.get("redop"),
                  int(_number(cols["root"], "root")) if "root" in cols else None,
                  t, alg, bus, vals[3] if glen == 4 else "", line)
    if int(n_groups) == 2:
        row.in_place_time_us = _number(vals[glen], "in-place time") * h.time_scale
        row.in_place_algbw = _number(vals[glen + 1], "in-place algbw")
        row.in_place_busbw = _number(vals[glen + 2], "in-place busbw")
    return row


def _infer_ranks(run: NcclRun) -> int:
    """Ranks from busbw/algbw at the largest size (nccl-tests bus factors), 0 when it cannot say."""
    big = max(run.rows, key=lambda r: r.size)
    if big.algbw <= 0:
        return 0
    r = big.busbw / big.algbw
    if run.collective == "all_reduce" and 1.0 <= r < 2.0:
        return round(2 / (2 - r))
    if run.collective in ("all_gather", "reduce_scatter", "alltoall") and r < 1.0:
        return round(1 / (1 - r))
    return 0


def read_nccl_log(path: str | Path) -> list[NcclRun]:
    """Every run (one collective's table) in an nccl-tests output file, or HcfError with the line."""
    check_name("nccl-tests file", path, MAX_PATH_CHARS)
    p = Path(path)
    try:
        if p.stat().st_size > MAX_LOG_BYTES:
            raise HcfError(f"{p.name} is {p.stat().st_size >> 20} MiB; an nccl-tests log is far "
                           f"smaller (limit {MAX_LOG_BYTES >> 20} MiB)")
        text = p.read_text(errors="replace")
    except OSError as exc:
        raise HcfError(f"cannot read nccl-tests output {path}: {exc}") from exc
    return parse_nccl_log(text, p.name)


class _LogReader:
    """Walks a log line by line, opening a run at each table and collecting its rows."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.runs: list[NcclRun] = []
        self.header: _Header | None = None
        self.run: NcclRun | None = None
        self.pending_name: str | None = None
        self.unread_header: tuple[int, str] | None = None  # a column header of a layout not known
        m = _PERF_NAME.search(source) or _FILE_NAME.search(source)
        self.file_name = m.group(1) if m else None

    def close(self) -> None:
        if self.run is not None and self.run.rows:
            self.runs.append(self.run)
        self.run = None

    def _close_if_filled(self) -> None:
        """End the current run only once it holds rows (an empty one is still being set up)."""
        if self.run is not None and self.run.rows:
            self.close()

    def _open_run(self) -> NcclRun:
        return NcclRun(self.pending_name or self.file_name, 0, "rank lines", "?", self.source)

    def _current_run(self) -> NcclRun:
        if self.run is None:
            self.run = self._open_run()
        return self.run

    def feed(self, lineno: int, raw: str) -> None:
        body, comment = _clean(raw)
        tokens = body.split()
        if not tokens:
            return
        self._note_collective_name(body, tokens)
        if (self._thread_line(tokens) or self._rank_line(tokens) or self._header_line(tokens)
                or self._average_line(body)):
            return
        if {x.lower() for x in tokens} & {"size", "bytes"} and len(tokens) >= 3:
            self.unread_header = (lineno, body)
        if comment or not re.fullmatch(r"\d+", tokens[0]):
            return  # banners, units, NCCL INFO lines, warnings: not rows
        self._result_row(lineno, body, tokens)

    def _note_collective_name(self, body: str, tokens: list[str]) -> None:
        name = _PERF_NAME.search(body)
        if name and not tokens[0].isdigit():
            self._close_if_filled()
            self.pending_name = name.group(1)

    def _thread_line(self, tokens: list[str]) -> bool:
        if tokens[0] != "nThread":
            return False
        self.close()
        self.run = self._open_run()
        self.header = None
        return True

    def _rank_line(self, tokens: list[str]) -> bool:
        if not (tokens[0] == "Rank" and len(tokens) > 1 and tokens[1].isdigit()):
            return False
        run = self._current_run()
        run.ranks = max(run.ranks, int(tokens[1]) + 1)
        return True

    def _header_line(self, tokens: list[str]) -> bool:
        h = _parse_header(tokens)
        if h is None:
            return False
        self._close_if_filled()  # a second table without its own nThread line
        run = self._current_run()
        self.header, run.layout = h, h.layout
        return True

    def _average_line(self, body: str) -> bool:
        if not (body.startswith("Avg bus bandwidth") and self.run is not None):
            return False
        avg = re.search(r":\s*([\d.]+)", body)
        self.run.avg_busbw = float(avg.group(1)) if avg else None
        return True

    def _result_row(self, lineno: int, body: str, tokens: list[str]) -> None:
        if (self.header is None or self.run is None) and self.unread_header:
            at, text = self.unread_header
            raise HcfError(f"{self.source}:{at}: unknown nccl-tests layout: columns {text[:80]!r}; expected "
                           "size, count, type (redop, root), then time, algbw, busbw per placement")
        if self.header is None or self.run is None:
            raise HcfError(f"{self.source}:{lineno}: a result row before any column header (a line "
                           "with size, count, type, time, algbw, busbw); is the start of the log "
                           f"missing? line: {body[:80]!r}")
        try:
            self.run.rows.append(_row(tokens, self.header, lineno))
        except (ValueError, KeyError) as exc:
            raise HcfError(f"{self.source}:{lineno}: cannot read this nccl-tests row: {exc}; "
                           f"line: {body[:100]!r}") from None


def parse_nccl_log(text: str, source: str = "<text>") -> list[NcclRun]:
    """Parse nccl-tests output held in a string (see the module docstring for the layouts)."""
    reader = _LogReader(source)
    for lineno, raw in enumerate(text.splitlines(), 1):
        reader.feed(lineno, raw)
    reader.close()
    if not reader.runs:
        raise HcfError(f"{source} holds no nccl-tests result rows (expected a column header "
                       "such as '#  size  count  type  redop  root  time  algbw  busbw #wrong' "
                       "followed by rows)")
    for r in reader.runs:
        if r.ranks == 0:
            r.ranks, r.ranks_from = _infer_ranks(r), "busbw/algbw ratio"
    return reader.runs


def read_nccl_tests(path: str | Path) -> dict:
    """The first run of a file as a dict (collective, ranks, rows, avg_busbw, layout)."""
    run = read_nccl_log(path)[0]
    rows = [{"size": r.size, "count": r.count, "type": r.type, "time_us": r.time_us,
             "algbw": r.algbw, "busbw": r.busbw, "line": r.line} for r in run.rows]
    return {"collective": run.collective, "ranks": run.ranks, "rows": rows,
            "avg_busbw": run.avg_busbw, "layout": run.layout}
