"""Link and protocol presets (NVLink4, NVLink3, InfiniBand NDR and HDR, RoCE 200G, AWS EFA, GPUDirect-TCPXO,
100G TCP, PCIe Gen5), each number with its source."""

from __future__ import annotations

from dataclasses import dataclass, field

from hcf_sim.errors import HcfError, require_nonnegative, require_positive

GB = 1e9  # link rates are quoted in decimal GB/s by vendors and by NCCL's tuning tables
US = 1e-6


@dataclass(frozen=True)
class Protocol:
    """An NCCL-style wire protocol: the share of each store that is payload."""

    name: str
    efficiency: float
    source: str


PROTOCOLS: dict[str, Protocol] = {
    "LL": Protocol("LL", 0.5, "NCCL LL line = 4 B data + 4 B flag per 8 B store (src/include/device.h); tuning.cc caps LL at 0.5 of busBw"),
    "LL128": Protocol("LL128", 120 / 128, "NCCL LL128: 120 B data per 128 B line (NCCL_LL128_DATAELEMS 15 of 16); tuning.cc uses 0.92"),
    "Simple": Protocol("Simple", 1.0, "NCCL Simple: bulk chunks, full payload (overhead is in the per-step latency)"),
}


@dataclass(frozen=True)
class LinkPreset:
    """A link technology: line rate, achievable efficiency, per-hop latency, per-step latency per protocol."""

    name: str
    line_rate: float  # bytes/s per direction
    efficiency: float  # achievable fraction of line rate for a collective library
    hop_latency: float  # s, propagation + switching per hop
    step_latency: dict[str, float]  # s per algorithm step, by protocol (NCCL hwLat, ring)
    sources: dict[str, str] = field(default_factory=dict)
    # us, what the network's NCCL plugin reports as its latency (ncclNetProperties.latency): NCCL's
    # tuner adds it to every inter-node step (graph->latencyInter), twice for Simple
    plugin_latency_us: float = 0.0

    @property
    def bandwidth(self) -> float:
        """Achievable bytes/s per direction (line rate x efficiency)."""
        return self.line_rate * self.efficiency


def _steps(ll: float, ll128: float, simple: float) -> dict[str, float]:
    return {"LL": ll * US, "LL128": ll128 * US, "Simple": simple * US}


PRESETS: dict[str, LinkPreset] = {
    "nvlink4": LinkPreset(
        "nvlink4", 450 * GB, 370.8 / 450, 25e-9, _steps(0.6, 1.9, 3.4),
        {"line_rate": "NVIDIA Hopper page: 900 GB/s bidirectional per GPU (18 links x 50 GB/s) = 450 GB/s per direction",
         "efficiency": "SimAI calbusbw.h SM90_NVLINK_BW 20.6 x 18 links = 370.8 GB/s busbw; ASTRA-sim config 'max observed busbw = 370.67'",
         "hop_latency": "SimAI gen_Topo_Template.py nv_latency 0.000025 ms = 25 ns",
         "step_latency": "NCCL 2.30 tuning.cc hwLat NVLINK ring LL/LL128/Simple = 0.6/1.9/3.4 us"}),
    "nvlink3": LinkPreset(
        "nvlink3", 300 * GB, 240.0 / 300, 25e-9, _steps(0.6, 1.9, 3.4),
        {"line_rate": "NVIDIA A100 datasheet: 600 GB/s NVLink per GPU (12 third-generation links) = 300 GB/s per direction",
         "efficiency": "NCCL src/graph/topo.h SM80_NVLINK_BW 20.0 GB/s per link x 12 links = 240 GB/s",
         "hop_latency": "assumed equal to NVLink4's (SimAI 25 ns)",
         "step_latency": "NCCL tuning.cc hwLat NVLINK ring LL/LL128/Simple = 0.6/1.9/3.4 us (one table for NVLink)"}),
    "ib_ndr": LinkPreset(
        "ib_ndr", 50 * GB, 48.5 / 50, 500e-9, _steps(2.7, 4.0, 14.0),
        {"line_rate": "InfiniBand NDR 400 Gb/s per port = 50 GB/s",
         "efficiency": "SimAI calbusbw.h CX7_BW 48.5 GB/s ('// 50')",
         "hop_latency": "SimAI gen_Topo_Template.py NIC latency 0.0005 ms = 500 ns",
         "step_latency": "NCCL 2.30 tuning.cc hwLat NET ring LL/LL128/Simple = 2.7/4.0/14.0 us"}),
    "roce_200g": LinkPreset(
        "roce_200g", 25 * GB, 23.5 / 25, 500e-9, _steps(2.7, 4.0, 14.0),
        {"line_rate": "RoCEv2 200 Gb/s = 25 GB/s",
         "efficiency": "SimAI calbusbw.h CX6_BW 23.5 GB/s ('// 25'); nccl-tests #252 '~24GB/s per NIC' on 200G",
         "hop_latency": "assumed equal to the InfiniBand NIC hop (SimAI default 500 ns)",
         "step_latency": "NCCL 2.30 tuning.cc hwLat NET (same table as InfiniBand)"}),
    "ib_hdr": LinkPreset(
        "ib_hdr", 25 * GB, 23.5 / 25, 500e-9, _steps(2.7, 4.0, 14.0),
        {"line_rate": "InfiniBand HDR 200 Gb/s per port = 25 GB/s (ConnectX-6)",
         "efficiency": "SimAI calbusbw.h CX6_BW 23.5 GB/s ('// 25')",
         "hop_latency": "as ib_ndr (SimAI NIC latency 500 ns)",
         "step_latency": "NCCL tuning.cc hwLat NET ring LL/LL128/Simple = 2.7/4.0/14.0 us",
         "plugin_latency_us": "NCCL's own IB transport reports no latency (src/transport/net_ib.cc: props->latency = 0)"}),
    "efa_400g": LinkPreset(
        "efa_400g", 50 * GB, 48.5 / 50, 500e-9, _steps(2.7, 4.0, 14.0),
        {"line_rate": "AWS p5.48xlarge: 3200 Gb/s EFA per instance (32 x 100 Gb/s) over 8 GPUs = 400 Gb/s = 50 GB/s per GPU",
         "efficiency": "assumed as ib_ndr's (no public per-GPU EFA rate); what a run reaches is fitted on its log",
         "hop_latency": "as ib_ndr (500 ns); EFA's per-message cost is in plugin_latency_us",
         "step_latency": "NCCL tuning.cc hwLat NET ring LL/LL128/Simple = 2.7/4.0/14.0 us",
         "plugin_latency_us": "aws/aws-ofi-nccl src/platform-aws.c platform_data_map: .latency = 75.0 for p4d, p4de and "
                              "'p-series' (P5 and later), reported to NCCL as props->latency"},
        75.0),
    "tcpxo_200g": LinkPreset(
        "tcpxo_200g", 25 * GB, 23.5 / 25, 500e-9, _steps(2.7, 4.0, 14.0),
        {"line_rate": "Google Cloud A3 Mega: 8 x 200 Gb/s NICs per VM (one per GPU) = 25 GB/s per GPU, GPUDirect-TCPXO",
         "efficiency": "assumed as roce_200g's (23.5 of 25); what a run reaches is fitted on its log",
         "hop_latency": "as roce_200g (500 ns)",
         "step_latency": "NCCL tuning.cc hwLat NET (one table for every network)",
         "plugin_latency_us": "google/nccl-plugin-gpudirect-tcpxo tcpdirect_plugin/fastrak_offload/nccl_shim.cc: props.latency = 0"}),
    "tcp_100g": LinkPreset(
        "tcp_100g", 12.5 * GB, 0.8, 20e-6, _steps(20.0, 20.0, 20.0),
        {"line_rate": "100 Gb/s Ethernet = 12.5 GB/s",
         "efficiency": "assumed 0.8: kernel TCP copies lower the rate, no anchor number; calibrate with `uol hcf calibrate`",
         "hop_latency": "weak third-party figure: 10-30 us per kernel-socket message; 20 us taken",
         "step_latency": "same 20 us per step for every protocol (sockets have no LL/LL128)"}),
    "pcie_gen5": LinkPreset(
        "pcie_gen5", 64 * GB, 0.8, 100e-9, _steps(1.0, 2.5, 5.7),
        {"line_rate": "PCIe Gen5 x16 = 64 GB/s per direction",
         "efficiency": "SimAI calbusbw.h PCIe 51.2 GB/s ('64*0.8')",
         "hop_latency": "assumed 100 ns per PCIe switch hop",
         "step_latency": "NCCL 2.30 tuning.cc hwLat PCI ring LL/LL128/Simple = 1.0/2.5/5.7 us"}),
}


def get_preset(name: str) -> LinkPreset:
    """Return the preset called name, or raise HcfError listing the choices."""
    try:
        return PRESETS[name]
    except KeyError:
        raise HcfError(f"unknown link preset {name!r}; choose one of {', '.join(PRESETS)}") from None


def get_protocol(name: str) -> Protocol:
    """Return the protocol called name (LL, LL128, Simple), or raise HcfError."""
    try:
        return PROTOCOLS[name]
    except KeyError:
        raise HcfError(f"unknown protocol {name!r}; choose one of {', '.join(PROTOCOLS)}") from None


def custom_link(bandwidth_gbps: float, latency_us: float,
                step_latency_us: float | dict[str, float] | None = None,
                efficiency: float = 1.0, name: str = "custom") -> LinkPreset:
    """Build a link from user numbers (GB/s per direction, us), checking each one; the step
    latency is one number or one per protocol ({"LL": .., "LL128": .., "Simple": ..})."""
    require_positive("link bandwidth", bandwidth_gbps, "GB/s")
    require_nonnegative("link latency", latency_us)
    if not 0 < efficiency <= 1:
        raise HcfError(f"link efficiency must be in (0, 1], got {efficiency}")
    if isinstance(step_latency_us, dict):
        missing = [p for p in PROTOCOLS if p not in step_latency_us]
        if missing:
            raise HcfError(f"step_latency_us by protocol lacks {', '.join(missing)}")
        steps = _steps(*(require_nonnegative(f"{p} step latency", float(step_latency_us[p]))
                         for p in PROTOCOLS))
    else:
        step = latency_us if step_latency_us is None else require_nonnegative(
            "step latency", float(step_latency_us))
        steps = _steps(step, step, step)
    return LinkPreset(name, bandwidth_gbps * GB, efficiency, latency_us * US, steps,
                      {"all": "user-given"})
