"""A script that writes its working folder in every way Python code does, and checks that it reads back
what it wrote (run by tests/test_files_routes.py under the audited run's journal and an experiment's
shadow). It starts from ``counter.txt`` and prints the value it found, as a resuming job prints its step."""

import io
import os
import pathlib
import pickle
import shutil
import sqlite3
import sys
import tempfile

import numpy as np
import torch

work = pathlib.Path(sys.argv[1])
os.chdir(work)
counter = int(open("counter.txt").read())
print(f"found counter {counter}", flush=True)

# open: write, append, exclusive create, read-write; io.open; os.open; os.fdopen
open("counter.txt", "w").write(str(counter + 1))
with open("log.txt", "a") as log:
    log.write(f"run {counter}\n")
with open("fresh.txt", "x") as new:
    new.write("x")
with open("data.bin", "r+b") as data:
    data.seek(0)
    data.write(b"Z")
with io.open("io.txt", "w") as handle:
    handle.write("io")
descriptor = os.open("raw.bin", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
os.write(descriptor, b"raw")
os.close(descriptor)
descriptor = os.open("log.txt", os.O_WRONLY | os.O_APPEND)
with os.fdopen(descriptor, "w") as log:
    log.write("appended raw\n")
assert open("counter.txt").read() == str(counter + 1) and open("data.bin", "rb").read(1) == b"Z"
assert open("log.txt").read().endswith(f"run {counter}\nappended raw\n")

# pathlib
(work / "path.txt").write_text("text")
(work / "path.bin").write_bytes(b"bytes")
(work / "touched").touch()
(work / "path.txt").rename(work / "renamed.txt")
(work / "renamed.txt").replace(work / "replaced.txt")
(work / "made").mkdir()
(work / "made" / "inner").mkdir()
(work / "made" / "inner").rmdir()
(work / "touched").unlink()
assert (work / "replaced.txt").read_text() == "text" and not (work / "path.txt").exists()
assert sorted(p.name for p in (work / "made").iterdir()) == []

# os
os.makedirs("deep/er/est", exist_ok=True)
os.makedirs("deep/er/est", exist_ok=True)
os.replace("raw.bin", "deep/raw.bin")
os.rename("io.txt", "deep/io.txt")
os.remove("fresh.txt")
open("gone.txt", "w").write("g")
os.unlink("gone.txt")
os.rmdir("deep/er/est")
os.removedirs("deep/er")
os.truncate("deep/raw.bin", 1)
os.chmod("deep/raw.bin", 0o600)
os.utime("deep/raw.bin", (1, 1))
os.symlink("deep/raw.bin", "link.bin")
os.link("deep/io.txt", "hard.txt")
assert os.path.getsize("deep/raw.bin") == 1 and os.stat("deep/raw.bin").st_mtime == 1
assert os.readlink("link.bin") == "deep/raw.bin" and open("hard.txt").read() == "io"
assert sorted(os.listdir("deep")) == ["io.txt", "raw.bin"]
assert sorted(entry.name for entry in os.scandir("deep")) == ["io.txt", "raw.bin"]
assert [sorted(files) for _, _, files in os.walk("deep")] == [["io.txt", "raw.bin"]]

# shutil: copies, trees, moves, removal
shutil.copy("counter.txt", "copy.txt")
shutil.copy2("data.bin", "copy2.bin")
shutil.copyfile("log.txt", "copyfile.txt")
shutil.copytree("deep", "tree")
shutil.move("copy.txt", "tree/moved.txt")
shutil.rmtree("old")
assert open("tree/moved.txt").read() == str(counter + 1) and not os.path.exists("old")

# torch, numpy, sqlite3
torch.save({"counter": counter + 1}, "state.pt")
assert torch.load("state.pt")["counter"] == counter + 1
np.save("array.npy", np.arange(4))
np.savez("arrays.npz", a=np.arange(3))
np.arange(2).tofile("array.raw")
written = np.memmap("map.bin", dtype="float32", mode="w+", shape=(4,))
written[:] = 7
written.flush()
del written
changed = np.memmap("map.bin", dtype="float32", mode="r+", shape=(4,))
changed[0] = 1
changed.flush()
del changed
assert np.load("array.npy").tolist() == [0, 1, 2, 3] and np.load("arrays.npz")["a"].tolist() == [0, 1, 2]
assert np.fromfile("map.bin", dtype="float32").tolist() == [1, 7, 7, 7]
database = sqlite3.connect("results.db")
database.execute("create table if not exists runs (counter integer)")
database.execute("insert into runs values (?)", (counter,))
database.commit()
rows = [row[0] for row in database.execute("select counter from runs")]
database.close()
print(f"database rows {rows}", flush=True)
try:
    from safetensors.torch import load_file, save_file
except ImportError:
    pass
else:
    save_file({"w": torch.ones(2)}, "weights.safetensors")
    assert load_file("weights.safetensors")["w"].tolist() == [1.0, 1.0]

# tempfile: its own scratch
with tempfile.NamedTemporaryFile("w", suffix=".tmp", delete=False) as scratch:
    scratch.write("t")
made, name = tempfile.mkstemp()
os.close(made)
os.remove(name)
with tempfile.TemporaryDirectory() as folder:
    open(os.path.join(folder, "x"), "w").write("x")
os.remove(scratch.name)
print(f"tempdir {tempfile.gettempdir()}", flush=True)
# the routed functions are the ones found under their names: they pickle (pool.map(os.remove, paths))
assert all(pickle.loads(pickle.dumps(f)) is f for f in (open, io.open, os.remove, os.stat, shutil.rmtree, torch.save))
print("done", flush=True)
