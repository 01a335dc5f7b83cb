"""Handing the freed heap back between the steps advisor runs (workload/heap.py), on real allocations."""

from __future__ import annotations

import pytest

from advisor.capture.stages import (
    LONG_STEP_MS,
    LONG_STEP_PROFILE_STEPS,
    LONG_STEP_UNLABELLED,
    PROFILE_STEPS,
    UNLABELLED_STEPS,
    profiled_steps,
)
from advisor.machine.procfs import own_memory_kb
from advisor.workload.heap import HeapGrowthGuard, release_free_heap

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


def test_the_free_pages_inside_the_heap_go_back_to_the_system():
    if not release_free_heap():
        pytest.skip("this C library has no malloc_trim")
    release_free_heap()
    pins = _holes(50)
    kept = own_memory_kb("VmRSS")
    assert release_free_heap()
    given_back = kept - own_memory_kb("VmRSS")
    assert given_back > 30 * 1024, f"only {given_back} kB of 50 MB of holes went back"
    assert len(pins) == 800  # the pins lived throughout


def test_a_profiled_step_gives_the_heap_back_only_when_it_grew_the_process():
    # a step that reuses its heap keeps its pages (trimming them made the next step fault them in again: layout
    # copies took twice as long in small models' traces); one that grew the process past the allowance gives back
    if not release_free_heap():
        pytest.skip("this C library has no malloc_trim")
    guard = HeapGrowthGuard(allowance_kb=20 * 1024)
    small = _holes(4)
    assert not guard.after_step() and guard.releases == 0
    large = _holes(50)
    grown = own_memory_kb("VmRSS")
    assert guard.after_step() and guard.releases == 1
    assert grown - own_memory_kb("VmRSS") > 30 * 1024
    assert not guard.after_step()  # measured from where it gave back
    assert len(small) + len(large) == 54 * 16


def test_a_long_step_is_profiled_over_fewer_steps():
    assert profiled_steps(None) == (PROFILE_STEPS, UNLABELLED_STEPS)  # no timing: the default
    assert profiled_steps(LONG_STEP_MS / 2) == (PROFILE_STEPS, UNLABELLED_STEPS)
    labelled, unlabelled = profiled_steps(LONG_STEP_MS)
    assert (labelled, unlabelled) == (LONG_STEP_PROFILE_STEPS, LONG_STEP_UNLABELLED)
    assert labelled < PROFILE_STEPS and unlabelled < UNLABELLED_STEPS
