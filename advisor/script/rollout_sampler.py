"""Where a rollout's time goes between the model's calls, in the script's process: the main thread sampled while a
step's calls without grad are under way (``inference_calls.py`` arms it at a step's first such call).

The work between the calls (an environment's step, Python turning actions and observations over) runs outside
torch: neither the trace nor the model's hooks see its lines. Armed, a profiling timer (``ITIMER_PROF``: every
``INTERVAL_S`` of the process's CPU time) sends ``SIGPROF``, whose handler runs in the main thread between two
bytecodes and reads the frame it interrupted: a sample taken outside a call of the model, before the step's last
one, is the rollout's rest. Each is counted at the line of the function that calls the model (the rollout's loop:
``obs, reward, ... = env.step(action)``), with the innermost function running there outside the standard library,
torch and NumPy (``cartpole.py:step``).

Not a thread of advisor's reading the main thread's frame: torch's operators let go of the interpreter's lock and
take it back at once, so such a thread hardly ever gets it (a rollout of 2,000 environment steps gave it 8 chances
in 0.45 s) and lands where it happens to. The timer is not armed in the timed steps nor after the window (its
handler's cost stays out of what is timed and judged), nor where the script has a SIGPROF handler of its own, nor
outside the main thread; system calls it interrupts are restarted (``siginterrupt(False)``); a forked child does
not inherit it.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

from advisor.sources import ADVISOR_DIR, STDLIB_DIR, TORCH_DIR, is_library_path

INTERVAL_S = 0.001
BASE_PACKAGES = (f"{os.sep}numpy{os.sep}", f"{os.sep}torch{os.sep}")  # what everything runs through: not a place
MOST_PLACES = 5  # written with the window


class RolloutSampler:
    def __init__(self) -> None:
        self.owner = os.getpid()
        self.loop_code: Any = None  # the code of the function that calls the model (the rollout's loop)
        self.armed = False
        self.allowed = True  # off in the timed steps and after the window
        self.in_call = False  # a call of the model is under way: its time is the model's, not the rest's
        self.pending: list[tuple[float, tuple[str, int, str]]] = []  # this step's (time, place)
        self.counts: dict[tuple[str, int, str], int] = {}
        self.samples = 0

    def arm(self) -> None:
        """A step's first call without grad: sample until the step ends."""
        if (self.armed or not self.allowed or os.getpid() != self.owner
                or threading.current_thread() is not threading.main_thread()
                or not hasattr(signal, "setitimer") or signal.getsignal(signal.SIGPROF) not in (signal.SIG_DFL, None)):
            return
        signal.signal(signal.SIGPROF, self._sample)
        signal.siginterrupt(signal.SIGPROF, False)
        signal.setitimer(signal.ITIMER_PROF, INTERVAL_S, INTERVAL_S)
        self.armed = True

    def disarm(self) -> None:
        if not self.armed:
            return
        signal.setitimer(signal.ITIMER_PROF, 0.0, 0.0)
        signal.signal(signal.SIGPROF, signal.SIG_DFL)
        self.armed = False

    def step_ended(self, last_call: float | None) -> None:
        """Keep the samples taken up to the step's last call (after it: the update's own work); disarm."""
        self.disarm()
        if last_call is not None:
            for taken, place in self.pending:
                if taken <= last_call:
                    self.counts[place] = self.counts.get(place, 0) + 1
                    self.samples += 1
        self.pending = []

    def places(self) -> list[dict]:
        """The rollout's rest by line, most first: file, line, what ran there (the functions holding a quarter of
        the line's samples or more, most first), CPU seconds, share of all samples."""
        lines: dict[tuple[str, int], dict[str, int]] = {}
        for (file, line, running), count in self.counts.items():
            lines.setdefault((file, line), {})[running] = count
        ranked = sorted(lines.items(), key=lambda item: -sum(item[1].values()))[:MOST_PLACES]
        placed = []
        for (file, line), functions in ranked:
            count = sum(functions.values())
            running = [name for name, n in sorted(functions.items(), key=lambda item: -item[1])
                       if name and n >= count / 4]
            placed.append({"file": file, "line": line, "running": ", ".join(running[:2]),
                           "seconds": round(count * INTERVAL_S, 4), "share": round(count / self.samples, 4),
                           "samples": self.samples})
        return placed

    def _sample(self, signum: int, frame: Any) -> None:
        if not self.in_call and frame is not None and (place := self._place(frame)) is not None:
            self.pending.append((time.perf_counter(), place))

    def _place(self, frame: Any) -> tuple[str, int, str] | None:
        """(file, line, what runs there): the loop's line (else the innermost of the user's), and the innermost
        function inside it outside the base libraries ("torch" where only torch runs: calling a module)."""
        running = "torch" if frame.f_code.co_filename.startswith(TORCH_DIR) else ""
        named = False
        user = None
        while frame is not None:
            filename = frame.f_code.co_filename
            if filename.startswith(ADVISOR_DIR):
                return None  # advisor's own work between steps
            if frame.f_code is self.loop_code:
                # f_lineno is None while a frame is between lines (Lightning Fabric's PPO showed one): no place
                return (filename, frame.f_lineno, running) if frame.f_lineno is not None else None
            if not named and not filename.startswith((STDLIB_DIR, TORCH_DIR)) and "<" not in filename \
                    and not any(base in filename for base in BASE_PACKAGES):
                running, named = f"{os.path.basename(filename)}:{frame.f_code.co_name}", True
            if user is None and frame.f_lineno is not None and not is_library_path(filename):
                user = filename, frame.f_lineno
            frame = frame.f_back
        return (user[0], user[1], running) if user else None
