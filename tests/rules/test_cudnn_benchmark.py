"""cudnn-benchmark (ADV123): cuDNN autotuning off for a convolutional network with fixed input shapes, on CUDA. Its
cases: the bundled samples' saved evidence replayed, then its own."""

from __future__ import annotations

from evidence_cases import replayed

test_fires_where_the_samples_expect_it, test_is_silent_elsewhere = replayed("cudnn-benchmark")
