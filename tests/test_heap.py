"""Handing the freed heap back between the steps advisor runs (workload/heap.py), on real allocations."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from advisor.capture.stages import (
    MIN_PROFILE_STEPS,
    ONE_STEP_MS,
    PROFILE_STEPS,
    PROFILED_MS,
    SHORT_STEP_MS,
    UNLABELLED_STEPS,
    profiled_steps,
)
from advisor.machine.procfs import own_memory_kb
from advisor.workload.heap import HeapGrowthGuard, free_heap_kb, release_free_heap

BLOCK = 64 * 1024  # under glibc's mmap threshold (128 KB at the least): from the heap, as a step's activations
PIN = 1024  # over pymalloc's 512 bytes: from malloc's heap too, after each block, so freed blocks cannot merge


def _holes(megabytes: int) -> list[bytes]:
    """``megabytes`` of heap written (not only reserved, so that it is resident) and freed between pins that stay:
    holes malloc keeps. The pins are returned."""
    blocks, pins = [], []
    for index in range(megabytes * 16):
        blocks.append(bytes([index % 251]) * BLOCK)
        pins.append(bytes([index % 7]) * PIN)
    blocks.clear()
    return pins


def _in_a_fresh_interpreter(scenario: str) -> dict:
    """What ``scenario`` (a function of this module) returned, run in a fresh interpreter, whose heap has no holes
    yet: holes already there (this process's earlier tests) take the pins meant to keep the blocks apart, and the
    blocks then merge into the heap's top, which glibc hands back by itself."""
    probe = (f"import json, sys; sys.path.insert(0, {os.path.dirname(__file__)!r}); import test_heap; "
             f"print(json.dumps(test_heap.{scenario}()))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def _trim_scenario() -> dict:
    release_free_heap()
    pins = _holes(50)
    kept = own_memory_kb("VmRSS")
    trimmed = release_free_heap()
    return {"trimmed": trimmed, "given_back_kb": kept - own_memory_kb("VmRSS"), "pins": len(pins)}


def test_the_free_pages_inside_the_heap_go_back_to_the_system():
    if not release_free_heap():
        pytest.skip("this C library has no malloc_trim")
    seen = _in_a_fresh_interpreter("_trim_scenario")
    assert seen["trimmed"]
    assert seen["given_back_kb"] > 30 * 1024, f"only {seen['given_back_kb']} kB of 50 MB of holes went back"
    assert seen["pins"] == 800  # the pins lived throughout


def _guard_scenario() -> dict:
    """The guard over steps that leave new free space in the heap, or reuse it."""
    guard = HeapGrowthGuard(allowance_kb=20 * 1024)
    seen = {}
    small = _holes(4)
    seen["small"] = (guard.after_step(), guard.releases)
    large = _holes(50)
    grown = own_memory_kb("VmRSS")
    seen["large"] = (guard.after_step(), guard.releases, grown - own_memory_kb("VmRSS"))
    seen["after"] = guard.after_step()  # measured from where it gave back
    again = _holes(30)  # the same holes taken and freed again: nothing new is free
    seen["again"] = guard.after_step()
    seen["pins"] = len(small) + len(large) + len(again)
    return seen


def test_a_profiled_step_gives_the_heap_back_once_its_free_space_grew():
    # a step that reuses its heap keeps its pages (trimming them made the next step fault them in again: layout
    # copies took twice as long in small models' traces); once the steps have left more than the allowance of new
    # free space in the heap (activations that could not reuse the holes the profiler's allocations split), it goes
    if not release_free_heap():
        pytest.skip("this C library has no malloc_trim")
    if free_heap_kb() is None:
        pytest.skip("this C library cannot say what its heap holds free (mallinfo2: glibc 2.33 on)")
    seen = _in_a_fresh_interpreter("_guard_scenario")
    assert seen["small"] == [False, 0]
    trimmed, releases, given_back_kb = seen["large"]
    assert trimmed and releases == 1 and given_back_kb > 30 * 1024
    assert seen["after"] is False and seen["again"] is False
    assert seen["pins"] == (4 + 50 + 30) * 16


def test_a_longer_step_is_profiled_over_fewer_steps():
    assert profiled_steps(None) == (PROFILE_STEPS, UNLABELLED_STEPS)  # no timing: the default
    assert profiled_steps(2.0) == (PROFILE_STEPS, UNLABELLED_STEPS)  # kernel_storm
    assert profiled_steps(SHORT_STEP_MS) == (PROFILE_STEPS, 0)  # 300 ms in five steps, its first-step cost lost
    assert profiled_steps(95.0) == (4, 0)  # an 8-layer GPT
    assert profiled_steps(PROFILED_MS / 2) == (MIN_PROFILE_STEPS, 0)
    assert profiled_steps(340.0) == (MIN_PROFILE_STEPS, 0)  # a 32-layer GPT: two
    assert profiled_steps(ONE_STEP_MS) == (1, 0)  # a step that holds twice what the trace needs: once
    counts = [profiled_steps(ms) for ms in (1.0, 10.0, 49.0, 50.0, 80.0, 120.0, 200.0, 1000.0)]
    assert counts == sorted(counts, reverse=True)  # never more for a longer step


def test_the_heap_is_handed_back_without_starting_a_process():
    # ctypes.util.find_library runs `ldconfig -p`: a process of advisor's own in the audited run, which the file
    # layer reported to the user as the run's ("the audited run started /sbin/ldconfig -p")
    probe = ("import sys\n"
             "started = []\n"
             "sys.addaudithook(lambda event, args: started.append(event) if event in "
             "('subprocess.Popen', 'os.posix_spawn', 'os.exec', 'os.fork', 'os.system') else None)\n"
             "from advisor.workload.heap import HeapGrowthGuard, free_heap_kb, release_free_heap\n"
             "release_free_heap(); free_heap_kb(); HeapGrowthGuard().after_step()\n"
             "print(started)\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
