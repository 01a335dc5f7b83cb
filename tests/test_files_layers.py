"""The file layers on a real folder, without interposition: the audited run's journal keeps what each path
held before it first changed; an experiment's shadow shows the files as the audited run found them, takes
every write, and changes nothing on the disk."""

from __future__ import annotations

import errno
import os

import pytest

from advisor.files.journal import COPY, LINK, Journal
from advisor.files.shadow import Shadow
from conftest import file_states, read_only_folder

LIMIT = 10_000_000


@pytest.fixture
def user(tmp_path):
    """The user's working folder at the start of the audited run."""
    work = tmp_path / "work"
    (work / "data").mkdir(parents=True)
    (work / "ckpt.pt").write_bytes(b"step 8")
    (work / "metrics.csv").write_text("0\n1\n")
    (work / "data" / "train.bin").write_bytes(b"x" * 100)
    (work / "old").mkdir()
    (work / "old" / "a.txt").write_text("a")
    return os.path.realpath(work)


def _audited_run(user: str, journal: Journal) -> None:
    """What a training script does to its folder, each change journaled first as interposition would."""
    j = journal
    j.for_write(f"{user}/metrics.csv", keep=True, exclusive=False)
    with open(f"{user}/metrics.csv", "a") as log:
        log.write("2\n")
    j.for_write(f"{user}/ckpt.tmp", keep=False, exclusive=False)
    with open(f"{user}/ckpt.tmp", "wb") as new:
        new.write(b"step 12")
    j.rename(f"{user}/ckpt.tmp", f"{user}/ckpt.pt", lambda: os.replace(f"{user}/ckpt.tmp", f"{user}/ckpt.pt"))
    j.rmtree(f"{user}/old", lambda: __import__("shutil").rmtree(f"{user}/old"))
    j.mkdir(f"{user}/runs", 0o777, lambda: os.mkdir(f"{user}/runs"))
    j.for_write(f"{user}/runs/log.txt", keep=False, exclusive=False)
    with open(f"{user}/runs/log.txt", "w") as log:
        log.write("new")


def test_the_journal_keeps_each_path_as_it_was_before_its_first_change(user, tmp_path):
    journal = Journal(str(tmp_path / "journal"), LIMIT, [])
    _audited_run(user, journal)
    from advisor.files.base import Base

    claims = Base.load(str(tmp_path / "journal")).claims
    assert claims[f"{user}/metrics.csv"].state == "saved"
    with open(claims[f"{user}/metrics.csv"].stored) as kept:
        assert kept.read() == "0\n1\n"  # a copy: the file was appended to in place
    assert claims[f"{user}/ckpt.tmp"].state == "absent"
    replaced = claims[f"{user}/ckpt.pt"]
    assert replaced.state == "saved" and open(replaced.stored, "rb").read() == b"step 8"  # a hard link keeps it
    assert os.stat(replaced.stored).st_nlink == 1  # the old inode lives only in the journal now
    assert claims[f"{user}/old"].state == "saved" and os.path.isfile(os.path.join(claims[f"{user}/old"].stored, "a.txt"))
    assert claims[f"{user}/runs"].state == "absent"
    assert f"{user}/runs/log.txt" not in claims  # inside a folder the run created: the folder's claim decides
    assert f"{user}/data/train.bin" not in claims  # read, never written: nothing kept


def test_a_path_past_the_limit_is_not_kept_and_says_why(user, tmp_path):
    journal = Journal(str(tmp_path / "journal"), 3, [])
    journal.claim(f"{user}/ckpt.pt", COPY)
    from advisor.files.base import Base

    [claim] = Base.load(str(tmp_path / "journal")).claims.values()
    assert claim.state == "unsaved" and "past the 0.0 MB it may keep: --shadow-limit" in claim.reason


def test_a_makedirs_of_an_existing_folder_copies_nothing(user, tmp_path):
    journal = Journal(str(tmp_path / "journal"), LIMIT, [])
    with pytest.raises(FileExistsError):
        journal.mkdir(f"{user}/data", 0o777, lambda: os.mkdir(f"{user}/data"))
    journal.claim(f"{user}/data/train.bin", LINK)
    assert os.listdir(tmp_path / "journal" / "store") == [os.listdir(tmp_path / "journal" / "claims")[0]]


@pytest.fixture
def after_audit(user, tmp_path):
    """(the user's folder after the audited run, the shadow of an experiment over its journal, the disk's files)."""
    _audited_run(user, Journal(str(tmp_path / "journal"), LIMIT, []))
    shadow = Shadow(str(tmp_path / "arm"), str(tmp_path / "journal"), LIMIT, [])
    return user, shadow, file_states(user)


def _read(shadow: Shadow, path: str) -> bytes:
    found = shadow.for_read(path)
    with open(found or path, "rb") as handle:
        return handle.read()


def test_an_experiment_sees_the_files_as_the_audited_run_found_them(after_audit):
    user, shadow, _ = after_audit
    assert _read(shadow, f"{user}/ckpt.pt") == b"step 8"  # resumes from the same step as the audited run did
    assert _read(shadow, f"{user}/metrics.csv") == b"0\n1\n"
    assert _read(shadow, f"{user}/data/train.bin") == b"x" * 100  # untouched data: read from the disk itself
    assert shadow.for_read(f"{user}/data/train.bin") is None
    assert _read(shadow, f"{user}/old/a.txt") == b"a"  # removed by the audited run, there again
    for created in (f"{user}/runs", f"{user}/runs/log.txt", f"{user}/ckpt.tmp"):
        with pytest.raises(FileNotFoundError):
            shadow.for_read(created)
    assert sorted(shadow.listdir(user)) == ["ckpt.pt", "data", "metrics.csv", "old"]


def test_an_experiments_writes_stay_in_its_shadow(after_audit):
    user, shadow, disk = after_audit
    target = shadow.for_write(f"{user}/metrics.csv", keep=True, exclusive=False)
    with open(target, "a") as log:
        log.write("experiment\n")
    assert _read(shadow, f"{user}/metrics.csv") == b"0\n1\nexperiment\n"  # its own write, over the audited run's start
    with open(shadow.for_write(f"{user}/ckpt.pt", keep=False, exclusive=False), "wb") as checkpoint:
        checkpoint.write(b"step 99")
    shadow.remove(f"{user}/data/train.bin", None)
    shadow.rename(f"{user}/ckpt.pt", f"{user}/best.pt", None)
    shadow.mkdir(f"{user}/runs", 0o777, None)
    shadow.rmtree(f"{user}/old", None)
    assert _read(shadow, f"{user}/best.pt") == b"step 99"
    for gone in (f"{user}/ckpt.pt", f"{user}/data/train.bin", f"{user}/old"):
        with pytest.raises(FileNotFoundError):
            shadow.for_read(gone)
    assert sorted(shadow.listdir(user)) == ["best.pt", "data", "metrics.csv", "runs"]
    assert shadow.listdir(f"{user}/data") == [] and shadow.listdir(f"{user}/runs") == []
    assert file_states(user) == disk  # nothing on the disk changed


def test_a_folder_removed_and_made_again_shows_only_what_the_run_put_in_it(after_audit):
    user, shadow, disk = after_audit
    shadow.rmtree(f"{user}/data", None)
    shadow.mkdir(f"{user}/data", 0o777, None)
    with open(shadow.for_write(f"{user}/data/new.bin", keep=False, exclusive=False), "wb") as handle:
        handle.write(b"n")
    assert shadow.listdir(f"{user}/data") == ["new.bin"]
    with pytest.raises(FileNotFoundError):
        shadow.for_read(f"{user}/data/train.bin")
    assert file_states(user) == disk


def test_an_experiment_that_deletes_its_working_folder_changes_nothing(after_audit):
    user, shadow, disk = after_audit
    shadow.rmtree(user, None)
    with pytest.raises(FileNotFoundError):
        shadow.for_read(f"{user}/ckpt.pt")
    with pytest.raises(FileNotFoundError):  # its parent is gone too, in its view
        shadow.for_write(f"{user}/ckpt.pt", keep=False, exclusive=False)
    assert file_states(user) == disk


@pytest.mark.parametrize("operation, error", [
    (lambda s, u: s.for_write(f"{u}/ckpt.pt", keep=False, exclusive=True), FileExistsError),
    (lambda s, u: s.for_write(f"{u}/nowhere/x.pt", keep=False, exclusive=False), FileNotFoundError),
    (lambda s, u: s.mkdir(f"{u}/data", 0o777, None), FileExistsError),
    (lambda s, u: s.remove(f"{u}/data", None), IsADirectoryError),
    (lambda s, u: s.rmdir(f"{u}/data", None), OSError),
    (lambda s, u: s.rename(f"{u}/missing", f"{u}/x", None), FileNotFoundError),
])
def test_the_shadow_refuses_what_the_disk_would(after_audit, operation, error):
    user, shadow, disk = after_audit
    with pytest.raises(error):
        operation(shadow, user)
    assert file_states(user) == disk


def test_a_write_past_the_shadows_limit_fails_naming_the_users_file(after_audit, tmp_path):
    user, _, disk = after_audit
    shadow = Shadow(str(tmp_path / "small"), str(tmp_path / "journal"), 150, [])
    copied = shadow.for_write(f"{user}/data/train.bin", keep=True, exclusive=False)  # 100 bytes: it fits
    with open(copied, "ab") as handle:
        shadow.opened(f"{user}/data/train.bin", copied, handle)
        handle.write(b"y" * 100)  # the script goes on writing through the file it holds open
        handle.flush()
        with pytest.raises(OSError) as full:
            shadow.for_write(f"{user}/out.bin", keep=False, exclusive=False)
    assert full.value.errno == errno.ENOSPC and full.value.filename == f"{user}/out.bin"
    assert f"full: {user}/data/train.bin (0.0 MB) does not fit" in str(full.value)  # the file that filled it
    assert "--shadow-limit" in str(full.value) and f"the write of {user}/out.bin was refused" in str(full.value)
    assert file_states(user) == disk


def test_a_write_the_disk_would_refuse_is_refused_in_the_shadow_too(tmp_path):
    folder = read_only_folder()
    if folder is None:
        pytest.skip("no read-only file system is mounted on this machine")
    shadow = Shadow(str(tmp_path / "arm"), None, LIMIT, [])
    with pytest.raises(OSError) as refused:
        shadow.for_write(os.path.join(os.path.realpath(folder), "new.txt"), keep=False, exclusive=False)
    assert refused.value.errno == errno.EROFS


def test_a_file_renamed_then_changed_in_place_keeps_its_first_state(user, tmp_path):
    journal = Journal(str(tmp_path / "journal"), LIMIT, [])
    journal.rename(f"{user}/metrics.csv", f"{user}/metrics.old",
                   lambda: os.rename(f"{user}/metrics.csv", f"{user}/metrics.old"))  # kept by a hard link
    journal.for_write(f"{user}/metrics.old", keep=True, exclusive=False)  # the link becomes a copy first
    with open(f"{user}/metrics.old", "a") as log:
        log.write("appended after the rename\n")
    shadow = Shadow(str(tmp_path / "arm"), str(tmp_path / "journal"), LIMIT, [])
    assert _read(shadow, f"{user}/metrics.csv") == b"0\n1\n"
    with pytest.raises(FileNotFoundError):
        shadow.for_read(f"{user}/metrics.old")
