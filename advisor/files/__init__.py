"""The user's files: what advisor's own runs may do to them.

The audited run is the user's run, so its writes are real. Before a path first changes in it,
the ``Journal`` keeps what the path held (a copy, or a hard link when the entry is only replaced).
Every other run advisor starts (verification arms, numerics, all fixes together, each rank of a
DDP arm) writes into a copy-on-write ``Shadow`` over the files *as they were when the audited run
began*: the journal's copies first, then the disk. The shadow is thrown away after each run, so
experiments never change the user's files, and every arm starts from the same state.

Both layers are installed by interposition in each Python process of the run (``interpose``),
from the bootstrap (``advisor/script/boot``), before the script's first line. ``gate`` counts the
writes in flight, so that a process advisor stops is stopped between two writes, with every open
file flushed; ``stop`` carries advisor's stop request to the process.

What interposition cannot see is stated in the report: programs other than Python that a run
starts, C extensions that open files themselves (besides torch.save/load, sqlite3 and
safetensors, which are routed), and the network.

Nothing here imports torch or the rest of advisor: it runs at the start of every process.
"""
