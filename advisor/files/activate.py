"""Install the file layer a parent asked for, in a process of the run (called by the bootstrap).

``ADVISOR_FILES`` names a JSON spec: ``{"mode": "journal" | "shadow", "journal": folder, "shadow":
folder, "limit": bytes, "passthrough": [paths]}``. Every Python process that inherits it installs
the layer (the script, each torchrun rank, a spawned worker, a Python subprocess), so they share one
journal or one shadow through the folders on disk.
"""

from __future__ import annotations

import json
import os

ENVIRONMENT = "ADVISOR_FILES"


def activate(spec_path: str):
    from advisor.files import interpose
    from advisor.files.journal import Journal
    from advisor.files.shadow import Shadow

    with open(spec_path, encoding="utf-8") as handle:
        spec = json.load(handle)
    if spec["mode"] == "journal":
        layer = Journal(spec["journal"], int(spec["limit"]), spec.get("passthrough", []))
    else:
        layer = Shadow(spec["shadow"], spec.get("journal"), int(spec["limit"]), spec.get("passthrough", []))
    interpose.install(layer)
    return layer


def activate_from_environment():
    spec_path = os.environ.get(ENVIRONMENT)
    return activate(spec_path) if spec_path else None
