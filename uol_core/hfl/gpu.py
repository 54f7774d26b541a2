"""When torch sees a GPU: read its properties and check them against the matching HFL record."""

from __future__ import annotations

from typing import Any

from uol_core.hfl.loader import list_targets, load_target

# HFL field -> torch device-property attribute (names as torch spells them).
PROPERTY_OF_FIELD = {
    "cores": "multi_processor_count",
    "warp_size": "warp_size",
    "registers_per_sm": "regs_per_multiprocessor",
    "smem_per_block_bytes": "shared_memory_per_block",
    "smem_per_block_optin_bytes": "shared_memory_per_block_optin",
    "smem_per_sm_bytes": "shared_memory_per_multiprocessor",
    "l2_bytes": "L2_cache_size",
}


def check_gpus() -> list[dict[str, Any]]:
    """One entry per visible GPU: its name, the matching target and per-field agreement."""
    try:
        import torch
    except ImportError:
        return []
    if not torch.cuda.is_available():
        return []
    return [check_device(torch.cuda.get_device_properties(i)) for i in
            range(torch.cuda.device_count())]


def find_record(device_name: str):
    """The shipped GPU target whose `match` strings occur in the device name, or None."""

    for name in list_targets():
        if name == "host":
            continue
        target = load_target(name)
        if target.kind == "gpu" and any(m.lower() in device_name.lower() for m in target.match):
            return target
    return None


def check_device(props: Any) -> dict[str, Any]:
    """Compare one device's properties with its record: field, record value, device value, ok."""
    name = str(getattr(props, "name", "unknown GPU"))
    target = find_record(name)
    out: dict[str, Any] = {"device": name, "target": target.name if target else None,
                           "checks": []}
    if target is None:
        return out
    for field, attr in PROPERTY_OF_FIELD.items():
        device_value = getattr(props, attr, None)
        record_value = getattr(target, field)
        if device_value is None or record_value is None:
            continue
        out["checks"].append({"field": field, "record": record_value, "device": device_value,
                              "ok": int(device_value) == int(record_value)})
    return out
