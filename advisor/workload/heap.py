"""Handing the freed heap back to the system between the steps advisor runs, where the C library allows it.

glibc's malloc keeps what a step frees for reuse, which is right for a plain loop: the next step asks for the
same blocks again. Under the profiler it goes wrong: the profiler makes many small allocations of its own while
a step runs, glibc carves them out of the large blocks the step's activations left free, and the next step's
activations no longer fit there, so they come from fresh memory. On a 32-layer GPT (a 0.3 s step on 2 cores)
every profiled step grew the process by about 250 MB; with the free heap handed back after each step the growth
was the profiler's own events (12 MB a step), the stage's peak fell from 2.2 to 1.0 GB, and the profiled steps
ran 10-20% faster (fewer fresh pages to fault in and zero). Between stages it keeps one stage's leftovers from
raising the next one's peak. ``malloc_trim`` gives back the free pages inside the heap, not only at its top.

Between profiled steps it is done only once the steps have left new free space in the heap
(``HeapGrowthGuard``): handing the heap back makes the next step fault its pages in again, which a step that
reuses its heap (the steady state of a training loop) never does. Trimming after every step doubled the layout
copies' time in small models' traces (manual_attention: 0.5 -> 1.0 ms a step), since a copy writes a fresh
output; steps that grew the heap were paying those faults already.
"""

from __future__ import annotations

import ctypes
import functools

from advisor.machine.procfs import own_memory_kb

# New free heap that the profiler's fragmentation left, worth handing back: 250 MB a profiled step on a 32-layer
# GPT, 60 MB on an 8-layer one, 8-25 MB on the small samples (trimmed at most once in their seven profiled steps)
GROWTH_ALLOWANCE_KB = 64 * 1024


@functools.cache
def _libc_function(name: str):
    """A function of the C library this process runs on, or None where it has none. Looked up among the symbols
    already loaded (``dlopen(NULL)``): ``ctypes.util.find_library`` runs ``ldconfig -p``, a process of advisor's
    own that the file layer then reported as the audited run's."""
    try:
        return getattr(ctypes.CDLL(None), name)
    except (OSError, AttributeError, TypeError):  # TypeError: Windows has no dlopen(NULL)
        return None


def _trim():
    """glibc's ``malloc_trim``, or None where the C library has none (musl, macOS, Windows)."""
    return _libc_function("malloc_trim")


def release_free_heap() -> bool:
    """Return the heap's free pages to the system; False where that cannot be done here."""
    trim = _trim()
    if trim is None:
        return False
    trim(0)
    return True


class HeapGrowthGuard:
    """Hands the free heap back after a step once the heap's free space has grown by more than ``allowance_kb``
    since the guard began or last gave back: memory the step's activations left free and that the profiler's
    small allocations, carved out of it, kept them from using again (an 8-layer GPT under the profiler: 60 MB of
    it a step, its allocated heap 3 MB). Growth of the whole process would not do: the profiler's own events grow
    it 20-40 MB a step on small models (closure_lstm), which no trim gives back, and a step's own growth missed
    the 8-layer GPT's 30-60 MB a step, 230 MB over the stage. Where the C library cannot say what is free
    (``mallinfo2``: glibc 2.33 on), a step that grew the process by the allowance is the sign."""

    def __init__(self, allowance_kb: int = GROWTH_ALLOWANCE_KB):
        self.allowance_kb = allowance_kb
        self.reads_free_heap = _mallinfo2() is not None
        self.baseline_kb = self._measure()
        self.releases = 0

    def _measure(self) -> int | None:
        return free_heap_kb() if self.reads_free_heap else own_memory_kb("VmRSS")

    def after_step(self) -> bool:
        """True when the heap was handed back."""
        now = self._measure()
        if now is None or self.baseline_kb is None:
            return False
        grew = now - self.baseline_kb
        if not self.reads_free_heap:
            self.baseline_kb = now  # the process's growth: each step's own
        if grew <= self.allowance_kb or not release_free_heap():
            return False
        self.releases += 1
        self.baseline_kb = self._measure()
        return True


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


def _mallinfo2():
    """glibc's ``mallinfo2`` (2.33 on), or None."""
    function = _libc_function("mallinfo2")
    if function is not None:
        function.restype = _MallInfo2
    return function


def free_heap_kb() -> int | None:
    """The free space malloc holds in its heaps (``fordblks``), in kB; None where the C library cannot say."""
    info = _mallinfo2()
    return None if info is None else int(info().fordblks) // 1024
