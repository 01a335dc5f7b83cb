"""advisor.stats' own median and mean: the statistics module's answers, without its imports."""

from __future__ import annotations

import random
import statistics
import subprocess
import sys

import pytest

from advisor.stats import fmean, median


def test_the_median_and_mean_are_the_statistics_modules_to_the_last_bit():
    rng = random.Random(3)
    for count in (1, 2, 3, 10, 11, 1000):
        values = [rng.lognormvariate(0, 2) for _ in range(count)]
        assert median(values) == statistics.median(values)
        assert median(iter(values)) == statistics.median(values)  # a generator, as callers pass
        assert fmean(values) == statistics.fmean(values)
        assert fmean(value for value in values) == statistics.fmean(values)
    assert median([1, 3]) == 2.0 and median([5, 1, 3]) == 3
    for empty in ([], ()):
        with pytest.raises(ValueError):
            median(empty)
        with pytest.raises(ValueError):
            fmean(empty)


def test_analyze_loads_its_rules_without_the_statistics_module():
    # it imports fractions, decimal and random: a megabyte of advisor analyze's 28 MB, for two functions
    # (nor nvidia-smi's XML reader and subprocess, for GPU state it never reads); counted from what the interpreter
    # had already loaded at start-up, which depends on the environment's .pth files
    loaded = subprocess.run([sys.executable, "-c", "import sys\nbefore = set(sys.modules)\nimport advisor.cli.entry\n"
                             "from advisor.rulekit.engine import RuleConfig\nRuleConfig.load([], [], [])\n"
                             "print(sorted({'statistics', 'random', 'xml.etree.ElementTree', 'subprocess'}"
                             " & (set(sys.modules) - before)))"],
                            capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == "[]", loaded.stdout
