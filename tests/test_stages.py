"""The child's stage loop: what runs before the user's file is imported, and what waits for it."""

from __future__ import annotations

from advisor.sandbox.registry import BEFORE_LOAD, run_stages


class _Events:
    def __init__(self):
        self.seen: list[tuple[str, str]] = []

    def start(self, stage):
        pass

    def progress(self, stage, text):
        pass

    def done(self, stage, payload):
        self.seen.append((stage, "done"))

    def error(self, stage, error):
        self.seen.append((stage, "error"))

    def skipped(self, stage, reason):
        self.seen.append((stage, f"skipped: {reason}"))


def test_a_stage_before_load_runs_with_no_model_and_the_others_wait_for_one():
    import advisor.verify.stage  # noqa: F401 - registers process-flags and verify-patch

    assert "process-flags" in BEFORE_LOAD and "verify-patch" not in BEFORE_LOAD
    state = {"spec": {}}
    events = _Events()
    run_stages(state, ("process-flags", "verify-patch"), events)  # no load stage: the model never loads
    assert events.seen == [("process-flags", "done"), ("verify-patch", "skipped: the model file did not load")]
    # what the patched side of advisor fix starts from: the flags as they were before any user file ran
    assert state["flags_before_user_code"]["anomaly"] is False


def test_progress_passes_a_counter_once_a_second_and_a_new_message_at_once():
    """The child's counters ("12 timed steps") are thinned; a stage saying what it does next (waiting for a busy
    machine to be quiet) is never lost among them."""
    from advisor.sandbox.registry import _throttled

    sent: list[str] = []
    progress = _throttled(sent.append, interval_s=3600)
    for n in range(1, 50):
        progress(f"{n} timed steps")
    progress("the steps ran while another job held the CPUs: waiting up to 15 s")
    progress("50 timed steps")
    assert sent == ["1 timed steps", "the steps ran while another job held the CPUs: waiting up to 15 s",
                    "50 timed steps"]


def test_the_untimed_stages_leave_a_core_to_the_parent_once():
    # from the graph capture on the parent parses the trace on a core: a parallel region with a thread on every
    # core waits at its end for the one the parent took (a 32-layer GPT's copy: 0.6 s instead of 0.07 s)
    import torch

    from advisor.capture.stages import leave_a_core_to_the_parent

    before = torch.get_num_threads()
    try:
        torch.set_num_threads(3)
        state: dict = {}
        leave_a_core_to_the_parent(state)
        assert torch.get_num_threads() == 2
        leave_a_core_to_the_parent(state)  # the routing stage after the graph's: not one fewer again
        assert torch.get_num_threads() == 2
        torch.set_num_threads(1)
        leave_a_core_to_the_parent({})
        assert torch.get_num_threads() == 1  # never none
    finally:
        torch.set_num_threads(before)
