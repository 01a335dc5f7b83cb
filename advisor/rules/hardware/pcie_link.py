"""The GPU's PCIe link runs narrower or at an older generation than the device supports.

What it detects:
    A GPU the run used whose PCIe link, read as the timed window ended, had fewer lanes than the device's
    maximum width (a x16 card trained at x8 or x4), or a lower generation than its maximum. Read through
    NVML or ``nvidia-smi -q -x``; silent where neither is readable.

Why it matters:
    Host-to-device copies (every batch, every pinned-memory transfer) move at the link's bandwidth: each
    halving of the lanes or each generation down halves it. A card seated in a x8 slot, a riser, or a
    link that trained down after an error costs data-bound steps up to half their speed while every GPU
    benchmark that stays on the device looks healthy. Idle GPUs lower their link generation to save
    power, so a lower generation is reported at LOW (measured at the window's end, still near the load);
    a narrower link is not a power state.

How to fix:
    Seat the card in a x16 slot wired to the CPU (not the chipset), without a narrowing riser; check the
    BIOS's slot settings (bifurcation, generation forced lower); reseat it when the link trained down
    (``nvidia-smi -q -d PCI`` and ``lspci -vv``'s LnkSta against LnkCap say what it runs at).

Example:
    Before::

        # nvidia-smi -q: Link Width  Max : 16x  Current : 8x

    After::

        # the card in the CPU-attached slot: Max : 16x  Current : 16x
"""

from __future__ import annotations

from typing import Iterator

from advisor.evidence import Evidence
from advisor.rulekit.helpers import NO_GPU_READ
from advisor.rulekit.rule import Clean, Finding, Fix, Layer, Severity, Thresholds, rule

DOCS = ["https://docs.nvidia.com/deploy/nvml-api/group__nvmlDeviceQueries.html"]


@rule(
    slug="pcie-link-degraded",
    code="ADV141",
    layer=Layer.HARDWARE,
    needs=("cuda", "conditions"),
    severity=Severity.MEDIUM,
)
def check(ev: Evidence, th: Thresholds) -> Iterator[Finding]:
    gpus = ev.timing.conditions.gpus
    yield Clean(why="each GPU's PCIe link ran at its device's generation and width" if gpus else NO_GPU_READ)
    for gpu in gpus:
        narrower = bool(gpu.pcie_width and gpu.max_pcie_width and gpu.pcie_width < gpu.max_pcie_width)
        older = bool(gpu.pcie_gen and gpu.max_pcie_gen and gpu.pcie_gen < gpu.max_pcie_gen)
        if not narrower and not older:
            continue
        share = (gpu.pcie_width / gpu.max_pcie_width if narrower else 1.0) * (
            2.0 ** (gpu.pcie_gen - gpu.max_pcie_gen) if older else 1.0)
        message = (f"GPU {gpu.index} ({gpu.name})'s PCIe link ran at gen {gpu.pcie_gen} x{gpu.pcie_width}, of the "
                   f"device's gen {gpu.max_pcie_gen} x{gpu.max_pcie_width}: host-device copies get about "
                   f"{share:.0%} of its bandwidth")
        if not narrower:
            message += " (a lower generation may be power saving between steps: see it under load)"
        yield Finding(
            severity=Severity.MEDIUM if narrower else Severity.LOW,
            message=message,
            evidence={"gpu": gpu.index, "pcie_gen": gpu.pcie_gen, "max_pcie_gen": gpu.max_pcie_gen,
                      "pcie_width": gpu.pcie_width, "max_pcie_width": gpu.max_pcie_width,
                      "bandwidth_share": round(share, 4), "read_by": gpu.source},
            fix=Fix(summary="a x16 slot wired to the CPU, no narrowing riser, the BIOS's generation at its "
                            "maximum; nvidia-smi -q -d PCI shows the link", docs=DOCS),
        )


check.advice_only("the link is the machine's: the slot, the riser or the BIOS, not the model")
