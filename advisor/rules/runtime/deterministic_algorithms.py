"""Deterministic algorithms forced on for a CUDA run.

What it detects:
    ``torch.use_deterministic_algorithms(True)`` or ``torch.backends.cudnn.deterministic =
    True`` in effect while the model runs on a CUDA device (read after the model file ran).

Why it matters:
    Determinism on CUDA is bought with speed: cuDNN is restricted to deterministic (often
    slower) convolution algorithms and autotuning is ignored, scatter/index_add style ops take
    slower deterministic paths, and cuBLAS needs a restricted workspace. It is right for a
    reproducibility run or a bisect, and costly when left on in production training.

How to fix:
    Enable it only where bit-exact reproducibility is required, e.g. behind a flag. When it
    is required, keep it and accept the cost: this finding is then a known trade-off.

Example:
    Before::

        torch.use_deterministic_algorithms(True)

    After::

        torch.use_deterministic_algorithms(os.environ.get("REPRODUCIBLE") == "1")
"""

from __future__ import annotations

from typing import Iterator

from advisor.evidence import Evidence
from advisor.rulekit.fixing import attribute, setting, with_switches
from advisor.rulekit.rule import Clean, Finding, Fix, Layer, Severity, Thresholds, rule


@rule(slug="deterministic-algorithms", code="ADV125", layer=Layer.RUNTIME, needs=("cuda", "env"), severity=Severity.LOW)
def check(ev: Evidence, th: Thresholds) -> Iterator[Finding]:
    env = ev.env
    if not ev.on_cuda or env is None:
        # CPU kernels are deterministic already; the switch costs nothing there
        yield Clean(why="no CUDA device in this run" if not ev.on_cuda else "the run's settings were not recorded")
        return
    switches = [name for name, on in (("torch.use_deterministic_algorithms(True)", env.deterministic_algorithms),
                                      ("torch.backends.cudnn.deterministic = True", env.cudnn_deterministic)) if on]
    if not switches:
        yield Clean(why="neither deterministic algorithms nor cudnn.deterministic is switched on")
        return
    yield Finding(
        message=(f"{' and '.join(switches)} is in effect on {env.device_name or 'CUDA'}: deterministic kernels "
                 "and cuDNN algorithms are slower; keep it only where bit-exact reproducibility is required"),
        evidence={"deterministic_algorithms": env.deterministic_algorithms,
                  "cudnn_deterministic": env.cudnn_deterministic, "device": env.device_name},
        fix=Fix(summary="enable deterministic algorithms only for reproducibility runs (behind a flag)",
                docs=["https://pytorch.org/docs/stable/notes/randomness.html"]),
    )


@check.fix(tolerance=1e-3, what="deterministic algorithms off", needs_cuda="determinism costs on CUDA")
def fix(target, finding):
    """Other algorithms reorder float sums (1e-3)."""
    import torch

    return with_switches(target, attribute(torch.backends.cudnn, "deterministic", False),
                         setting(torch.are_deterministic_algorithms_enabled, torch.use_deterministic_algorithms, False))
