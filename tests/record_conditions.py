"""Record real measurement conditions as test data (``tests/data/conditions/*.json``), the way the saved
evidence of the samples is recorded: quiet (run it on a quiet machine), beside a busy-loop pinned to this
process's CPU, and inside a 0.5-core cgroup quota with two spinning threads.

    python tests/record_conditions.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from advisor.machine.conditions import Watch  # noqa: E402
from devkit.contention import busy_loop, cpu_quota, spin  # noqa: E402

OUT = Path(__file__).resolve().parent / "data" / "conditions"
SECONDS = 2.0


def measured(work=lambda: spin(SECONDS)) -> dict:
    with Watch() as watch:
        work()
    return watch.conditions.model_dump(mode="json")


QUOTA_CHILD = """
import json, sys, threading
sys.path.insert(0, sys.argv[1])
sys.stdin.readline()  # it has joined the cgroup
from record_conditions import SECONDS, measured, spin

def work():
    helper = threading.Thread(target=spin, args=(SECONDS,))
    helper.start()
    spin(SECONDS)
    helper.join()

print(json.dumps(measured(work)))
"""


def in_quota() -> dict:
    """Two threads spinning under a 0.5-core quota, measured from inside the cgroup."""
    with cpu_quota(0.5) as procs:
        child = subprocess.Popen([sys.executable, "-c", QUOTA_CHILD, str(Path(__file__).resolve().parent)],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        procs.write_text(str(child.pid))
        out, _ = child.communicate("joined\n", timeout=120)
    return json.loads(out)


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    cpu = min(os.sched_getaffinity(0))
    records = {"quiet": measured()}
    with busy_loop(cpu):
        records["busy_loop"] = measured()
    try:
        records["quota"] = in_quota()
    except OSError as refused:
        print(f"quota not recorded: {refused}")
    for name, record in records.items():
        (OUT / f"{name}.json").write_text(json.dumps(record, indent=1) + "\n")
        print(name, record["others_cores"], record["quota_cores"], record["throttled_share"])


if __name__ == "__main__":
    main()
