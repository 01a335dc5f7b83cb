"""The ranks' summaries on a Dask cluster, for trace folders one machine cannot read in time.

``advisor analyze FOLDER --cluster tcp://scheduler:8786`` hands each rank's summary (``ranks.summarize_file``:
one trace parsed for what the rank-aware rules read, a few hundred numbers back) to the cluster's workers, a task
per rank; the first rank is still read whole here, while they work. The result is the local run's: the same
function over the same files, gathered in the same order.

Why Dask (``distributed``) and not Ray: the work is a plain map of one Python function over file paths, each task
independent, which ``Client.get_executor()`` runs behind the ``concurrent.futures`` interface the local process
pool already has, so the two paths share their code. Dask is pure Python (the scheduler and the workers are
``pip install distributed`` and one command each, or a LocalCluster), where Ray brings a native runtime, an
object store and a dashboard for a job that passes file names in and small summaries out.

The workers read the traces by path, so they must see the same files (a shared file system, as the ranks that
wrote them usually do), and need advisor installed. A worker holds one rank's trace per thread it runs: start
workers with ``--nthreads 1`` (parsing is Python and holds the interpreter's lock anyway) for memory bounded by
one rank's trace each.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Iterator

if TYPE_CHECKING:
    from concurrent.futures import Executor

CONNECT_TIMEOUT_S = 30


class ClusterError(RuntimeError):
    """The cluster cannot do the work: no scheduler at the address, no Dask here, or workers without advisor."""


@contextlib.contextmanager
def cluster_executor(address: str, timeout_s: float = CONNECT_TIMEOUT_S) -> Iterator[Executor]:
    """An executor whose tasks run on the Dask cluster at ``address``; the connection is closed on leaving
    (tasks not yet gathered are cancelled with it)."""
    try:
        from distributed import Client
    except ImportError:
        raise ClusterError(f"--cluster {address}: Dask's distributed client is not installed here "
                           "(pip install 'advisor[cluster]', here and on the cluster's workers)") from None
    from distributed.comm.addressing import parse_address, parse_host_port

    try:  # checked first: a Client made from a malformed address fails again, with a traceback, when collected
        parse_host_port(parse_address(address)[1])
    except ValueError as malformed:
        raise ClusterError(f"--cluster {address}: not a Dask scheduler's address ({malformed}); "
                           "give one like tcp://host:8786") from None
    try:
        client = Client(address, timeout=timeout_s, set_as_default=False)
    except (OSError, TimeoutError) as failure:
        raise ClusterError(f"--cluster {address}: no Dask scheduler answered within {timeout_s:g} s "
                           f"({type(failure).__name__}: {failure})") from None
    try:
        yield client.get_executor(pure=False)  # each rank's file read anew: a file may change between runs
    except (ModuleNotFoundError, ImportError) as missing:
        raise ClusterError(f"--cluster {address}: the cluster's workers cannot run advisor's code ({missing}); "
                           "install advisor on them, the same version as here") from None
    finally:
        client.close()
