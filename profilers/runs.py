"""A measured run: one kernel (op, target, backend, config) with timing, cost and line costs."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path


@dataclass
class Run:
    """What comparisons and reports read: the same fields from a JSON file or a tuning-DB row."""

    label: str
    op: str
    target: str
    backend: str = "c"
    config: dict = field(default_factory=dict)
    sizes: dict = field(default_factory=dict)
    median_s: float | None = None
    iqr_s: float | None = None
    flops: float | None = None
    bytes: float | None = None
    status: str = "ok"
    hotspots: dict | None = None  # HotspotReport.to_dict()
    extra: dict = field(default_factory=dict)
    mode: str = "timed"  # timed | profiled | interpreted | untimed: only timed runs compare by time
    machine: str = ""
    samples: list[float] | None = None  # seconds per call; a comparison bootstraps on them

    @property
    def gflops(self) -> float | None:
        """Achieved GFLOP/s at the median time."""
        return self.flops / self.median_s / 1e9 if self.flops and self.median_s else None

    def to_dict(self) -> dict:
        """JSON-ready form (a run file)."""
        return {**asdict(self), "gflops": self.gflops}

    @classmethod
    def from_dict(cls, data: dict) -> Run:
        """Inverse of `to_dict`; unknown keys go to `extra`."""
        names = cls.__dataclass_fields__
        known = {k: v for k, v in data.items() if k in names}
        extra = {k: v for k, v in data.items() if k not in names and k != "gflops"}
        run = cls(**known)
        run.extra.update(extra)
        return run

    def save(self, path: str | Path) -> Path:
        """Write the run as JSON."""
        path = Path(path)
        path.write_text(json.dumps(self.to_dict(), indent=2, default=str), encoding="utf-8")
        return path


def load_run(spec: str, db_path: str | Path | None = None) -> Run:
    """A run from a JSON file, or from a tuning-DB row id (an integer)."""
    path = Path(spec)
    if path.is_file():
        return Run.from_dict(json.loads(path.read_text(encoding="utf-8")))
    if spec.isdigit():
        return run_from_db(int(spec), db_path)
    raise FileNotFoundError(f"'{spec}' is neither a run JSON file nor a tuning-DB row id")


def run_from_db(row_id: int, db_path: str | Path | None = None) -> Run:
    """The run recorded as row `row_id` of the tuning database."""
    # deferred: at the top it would load uol_core, and torch with it, whenever this module loads
    from uol_core.runtime.tuningdb import TuningDB

    db = TuningDB(db_path)
    try:
        row = db.conn.execute("SELECT * FROM measurements WHERE id=?", (row_id,)).fetchone()
    finally:
        db.close()
    if row is None:
        raise KeyError(f"no row {row_id} in the tuning database")
    return run_from_row(dict(row))


def run_from_row(row: dict) -> Run:
    """A Run from one tuning-DB row (config text 'k=v,...' becomes a dict)."""
    config = {}
    for part in (row.get("config") or "").split(","):
        if "=" in part:
            k, v = part.split("=", 1)
            config[k] = int(v) if v.lstrip("-").isdigit() else v
    extra = json.loads(row.get("extra") or "{}")
    sizes = json.loads(row["shapes"]) if row.get("shapes", "").startswith("{") else {}
    gflops, median = row.get("gflops"), row.get("median_s")
    flops = gflops * 1e9 * median if gflops and median else extra.get("flops")
    return Run(label=f"#{row['id']} {row['op_name']}", op=row["op_name"],
               target=str(row["target"]).split(":")[0], backend=extra.get("backend", "c"),
               config=config, sizes=sizes, median_s=median, iqr_s=row.get("iqr_s"),
               flops=flops, bytes=extra.get("bytes"), status=row.get("status", "ok"),
               extra={"row": row["id"], **extra})
