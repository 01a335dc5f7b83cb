"""The stop that waits for the writes in flight: a save running in another thread finishes first, and what
the script wrote into files it keeps open reaches the disk. Events, never sleeps, decide these tests."""

from __future__ import annotations

import threading

from advisor.files.gate import Gate


def test_a_stop_waits_for_a_save_in_flight_in_another_thread():
    gate = Gate()
    saving, finish, stopped = threading.Event(), threading.Event(), threading.Event()

    def save():
        with gate.operation():
            saving.set()
            finish.wait()
    saver = threading.Thread(target=save, daemon=True)
    saver.start()
    saving.wait()
    stopper = threading.Thread(target=lambda: (gate.quiesce(at_boundary=True), stopped.set()), daemon=True)
    stopper.start()
    assert not stopped.wait(0.2)  # however fast the machine, the stop is still waiting for the save
    finish.set()
    stopper.join()
    assert stopped.is_set()


def test_writes_after_the_stop_wait_for_ever_and_the_stopper_goes_on(tmp_path):
    gate = Gate()
    gate.quiesce(at_boundary=True)
    opened = threading.Event()

    def late_writer():
        with open(tmp_path / "late.txt", "w") as handle:
            gate.register(handle)  # a thread that starts writing once the process is ending
            opened.set()
    writer = threading.Thread(target=late_writer, daemon=True)
    writer.start()
    assert not opened.wait(0.2) and writer.is_alive()
    gate.register(open(tmp_path / "own.txt", "w"))  # the stopping thread itself is never held


def test_what_the_script_wrote_into_an_open_file_is_flushed(tmp_path):
    gate = Gate()
    log = open(tmp_path / "metrics.csv", "a")  # a logger's file, kept open for the whole run
    gate.register(log)
    log.write("0,1.0\n1,0.9\n")  # buffered: not on the disk yet
    assert (tmp_path / "metrics.csv").read_text() == ""
    assert gate.quiesce(at_boundary=True) == []  # the thread that runs the steps: its own log is not awaited
    assert (tmp_path / "metrics.csv").read_text() == "0,1.0\n1,0.9\n"
    log.close()


def test_a_file_another_thread_writes_during_the_step_is_awaited(tmp_path):
    gate = Gate()
    opened, finish, stopped = threading.Event(), threading.Event(), threading.Event()

    def writer():
        with open(tmp_path / "sample.json", "w") as handle:
            gate.register(handle)
            opened.set()
            finish.wait()
            handle.write("{}")
    threading.Thread(target=writer, daemon=True).start()
    opened.wait()
    stopper = threading.Thread(target=lambda: (gate.quiesce(at_boundary=True), stopped.set()), daemon=True)
    stopper.start()
    assert not stopped.wait(0.2)
    finish.set()
    stopper.join()
    assert (tmp_path / "sample.json").read_text() == "{}"


def test_a_file_opened_in_an_earlier_step_is_a_log_flushed_not_awaited(tmp_path):
    gate = Gate()
    held = threading.Event()

    def logger():
        handle = open(tmp_path / "events.log", "w")
        gate.register(handle)
        handle.write("event\n")
        held.set()
        threading.Event().wait()  # keeps it open for good, as a logging thread does
    threading.Thread(target=logger, daemon=True).start()
    held.wait()
    gate.boundary()  # a step ended since it was opened
    assert gate.quiesce(at_boundary=False) == []
    assert (tmp_path / "events.log").read_text() == "event\n"
