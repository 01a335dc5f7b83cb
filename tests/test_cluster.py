"""``advisor analyze --cluster``: a folder's ranks summarised on a local Dask cluster match the local run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from advisor.commands.analyze import AnalyzeOptions, run_analyze
from advisor.trace.cluster import ClusterError, cluster_executor
from devkit.synthetic_ranks import make_ranks

distributed = pytest.importorskip("distributed")

pytestmark = pytest.mark.slow
# a two-rank gloo DDP job advisor recorded (tests/data/ddp): CPU collectives, a launch offset per step for each
DDP_TRACE = Path(__file__).parent / "data" / "ddp" / "ddp_train.trace.json.gz"
VOLATILE = {"created", "advisor_version"}  # when and by which build the report was written: not what it found


@pytest.fixture(scope="module")
def scheduler():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        yield cluster.scheduler_address


def _task_prefixes(address: str) -> list[str]:
    with distributed.Client(address, set_as_default=False) as client:
        return client.run_on_scheduler(lambda dask_scheduler: sorted(dask_scheduler.task_prefixes))


def test_the_ranks_summarised_on_a_dask_cluster_match_the_local_run(tmp_path, scheduler):
    folder = tmp_path / "ranks"
    folder.mkdir()
    make_ranks(str(folder), 6, str(DDP_TRACE))
    local = run_analyze(AnalyzeOptions(paths=(str(folder),), out_dir=str(tmp_path / "local")))
    on_cluster = run_analyze(AnalyzeOptions(paths=(str(folder),), cluster=scheduler, out_dir=str(tmp_path / "dask")))
    assert not on_cluster.report.errors
    assert [rank.rank for rank in on_cluster.evidence.ranks] == list(range(6))
    assert on_cluster.evidence.ranks == local.evidence.ranks  # every summary, in order
    assert on_cluster.report.model_dump(exclude=VOLATILE) == local.report.model_dump(exclude=VOLATILE)
    assert "summarize_file" in _task_prefixes(scheduler)  # the work ran on the cluster, not here


def test_a_broken_rank_on_the_cluster_is_the_reports_error_naming_its_file(tmp_path, scheduler):
    folder = tmp_path / "ranks"
    folder.mkdir()
    make_ranks(str(folder), 3, str(DDP_TRACE))
    (folder / "rank002.json.gz").write_bytes(b"\x1f\x8b not a gzip stream")
    result = run_analyze(AnalyzeOptions(paths=(str(folder),), cluster=scheduler, out_dir=str(tmp_path / "out")))
    assert [error.stage for error in result.report.errors] == ["parse"]
    assert "rank002.json.gz" in result.report.errors[0].message


def test_a_cluster_address_that_does_not_answer_is_a_clear_error(tmp_path):
    with pytest.raises(ClusterError, match=r"tcp://127\.0\.0\.1:9: no Dask scheduler answered within 1 s"):
        with cluster_executor("tcp://127.0.0.1:9", timeout_s=1):
            pass
    folder = tmp_path / "ranks"
    folder.mkdir()
    make_ranks(str(folder), 2, str(DDP_TRACE))
    done = subprocess.run([sys.executable, "-m", "advisor", "analyze", str(folder), "--cluster", "no-port-here",
                           "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "no-port-here: not a Dask scheduler's address" in done.stderr and "Traceback" not in done.stderr
