"""gpu-idle (ADV109): The GPU sits idle for a large share of each step. Its cases: the bundled samples' saved
evidence replayed, then its own."""

from __future__ import annotations

import subprocess
import sys

import pytest
from test_analyze import _findings

from advisor.commands.analyze import AnalyzeOptions, run_analyze
from conftest import shared_trace
from evidence_cases import replayed

test_fires_where_the_samples_expect_it, test_is_silent_elsewhere = replayed("gpu-idle")


def test_gpu_idle_split_on_a_real_ddp_trace():
    idle = _findings("nccl_parser_config/nccl_data.json.gz")["gpu-idle"]
    assert 0.7 < idle.evidence["idle_share"] < 0.8  # 222 ms steps, ~55 ms of GPU work
    assert idle.evidence["host_wait_share"] > 0.9 * idle.evidence["idle_share"]


@pytest.mark.slow
def test_folder_of_ranks_and_the_cli(tmp_path):
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    source = shared_trace("critical_path/cuda_event_sync/event_sync_trace.json.gz").read_bytes()
    for rank in (0, 1):
        (ranks / f"rank-{rank}.json.gz").write_bytes(source)
    result = run_analyze(AnalyzeOptions(paths=(str(ranks),), out_dir=str(tmp_path / "out")))
    assert len(result.evidence.ranks) == 2 and result.stem == "rank-0"
    completed = subprocess.run([sys.executable, "-m", "advisor", "analyze", str(ranks), "--out", str(tmp_path / "out"),
                                "--fail-on", "high"], capture_output=True, text=True, timeout=120)
    assert completed.returncode == 1 and (tmp_path / "out" / "rank-0.html").exists()  # gpu-idle is high there
    assert "gpu-idle" in completed.stdout
