"""The library zoo: popular libraries' own published quickstarts and examples, run as their users run them under
``advisor run``, each report printed for a performance engineer to read, and checked against what every run must
give: an exit code of the findings (0 or 1), the step read right (the mode and the model's class), no margin made
from a measurement that failed, no finding above LOW at a line that is only a library's.

Each case is a short script in ``bench/zoo/`` that uses one library the way its quickstart or example does (our
code calling the library; nothing of the library's is copied here), with its data made in memory and its models
built from a configuration: this machine reaches no model hub. The libraries install from PyPI into an environment
of their own, beside torch (``--setup VENV`` makes one with ``--system-site-packages`` and installs them):

    python bench/zoo.py --setup /tmp/zoo-venv             # once: a venv seeing this torch and advisor
    python bench/zoo.py --python /tmp/zoo-venv/bin/python [--only 'hf_*,sb3*'] [--verify] [--reports DIR]

By hand; never part of the test suite. Exit 1 when a case breaks one of the checks. Each case's verdict, read by
hand, is kept in ``bench/README.md``.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from corpus import summarize  # noqa: E402 - the corpus runner's reading of a report, shared

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ZOO = os.path.join(ROOT, "bench", "zoo")
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "WANDB_DISABLED": "true",
           "TOKENIZERS_PARALLELISM": "false"}


@dataclass(frozen=True)
class Case:
    name: str  # bench/zoo/<name>.py
    library: str
    kind: str  # what it stands for in the zoo
    mode: str  # the mode the run must read
    model_class: str  # the model's class the run must read ("" where any)


CASES = (
    Case("sb3_ppo", "stable-baselines3", "reinforcement learning (on-policy, rollouts)", "train", "ActorCriticPolicy"),
    Case("hf_trainer_bert", "transformers Trainer", "a Trainer framework, model(**batch)", "train",
         "BertForSequenceClassification"),
    Case("lightning_autoencoder", "lightning", "a Lightning Trainer", "train", "LitAutoEncoder"),
    Case("pyg_gcn", "torch_geometric", "graph network (message passing)", "train", "GCN"),
    Case("diffusers_ddpm", "diffusers", "diffusion (UNet, noise scheduler)", "train", "UNet2DModel"),
    Case("sentence_embeddings", "sentence-transformers", "embeddings / retrieval (inference)", "inference",
         "SentenceTransformer"),
    Case("peft_lora", "peft", "LoRA fine-tuning", "train", "PeftModelForCausalLM"),
    Case("skorch_tabular", "skorch", "tabular, scikit-learn style", "train", "ClassifierModule"),
    Case("gpytorch_exact_gp", "gpytorch", "Gaussian processes", "train", "ExactGPModel"),
    Case("pyro_svi", "pyro-ppl", "probabilistic programming (SVI)", "train", ""),
    Case("torchdiffeq_ode", "torchdiffeq", "neural ODE (adaptive solver)", "train", "ODEFunc"),
    Case("x_transformers_lm", "x-transformers", "transformer language model library", "train",
         "AutoregressiveWrapper"),
    Case("metric_learning", "pytorch-metric-learning", "metric learning (miners, losses)", "train", "Sequential"),
    Case("accelerate_loop", "accelerate", "Accelerator training loop", "train", "Sequential"),
    Case("hf_wav2vec2_ctc", "transformers (speech)", "speech front end (convolutions over raw audio), CTC", "train",
         "Wav2Vec2ForCTC"),
    Case("hf_generate", "transformers generate", "generation (inference, growing sequence)", "inference",
         "GPT2LMHeadModel"),
)
REQUIREMENTS = ("stable-baselines3", "gymnasium[classic-control]", "transformers", "accelerate", "lightning",
                "torch_geometric", "diffusers", "peft", "sentence-transformers", "skorch", "scikit-learn",
                "gpytorch", "pyro-ppl", "torchdiffeq", "x-transformers", "einops", "pytorch-metric-learning")


def setup(venv: str) -> None:
    """A venv that sees this interpreter's torch and advisor, with the zoo's libraries installed into it."""
    import torch

    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", venv], check=True)
    pip = [os.path.join(venv, "bin", "python"), "-m", "pip", "install", "-q"]
    subprocess.run([*pip, f"torch=={torch.__version__.split('+')[0]}", *REQUIREMENTS], check=True)


def checks(case: Case, returncode: int, report: dict) -> list[str]:
    """What this run broke of what every run must give."""
    broken = []
    if returncode not in (0, 1):
        broken.append(f"exit {returncode}")
    target = report.get("target") or {}
    if target.get("mode") != case.mode:
        broken.append(f"mode {target.get('mode')!r}, not {case.mode!r}")
    if case.model_class and target.get("model_class") != case.model_class:
        broken.append(f"model class {target.get('model_class')!r}, not {case.model_class!r}")
    flops = report.get("flops") or {}
    for decided in report.get("rules") or []:
        margin = decided.get("margin") or {}
        if flops.get("method") == "none" and "FLOP" in margin.get("quantity", ""):
            broken.append(f"{decided['slug']}'s margin {margin['quantity']} from a FLOP count that failed")
    for finding in report.get("findings") or []:
        places = [loc.get("file") or "" for loc in finding.get("locations") or []]
        in_libraries = places and all("site-packages" in place or "dist-packages" in place for place in places)
        if in_libraries and finding.get("severity") in ("high", "medium"):
            broken.append(f"{finding['slug']} {finding['severity'].upper()} at a library's line only")
    return broken


def run_case(case: Case, python: str, args: argparse.Namespace) -> list[str]:
    work = tempfile.mkdtemp(prefix=f"zoo-{case.name}-")
    out = os.path.join(work, "reports")
    script = os.path.join(ZOO, f"{case.name}.py")
    command = [python, "-m", "advisor", "run", "--out", out, *([] if args.verify else ["--no-verify"]),
               *args.advisor_args, "--", python, script]
    started = time.monotonic()
    done = subprocess.run(command, cwd=work, env={**os.environ, **OFFLINE}, capture_output=True, text=True,
                          timeout=args.timeout)
    wall = time.monotonic() - started
    path = os.path.join(out, f"{case.name}.json")
    print(f"== {case.name} ({case.library}: {case.kind})\n    exit {done.returncode}, {wall:.1f} s wall")
    if not os.path.exists(path):
        print("    NO REPORT; stderr tail:\n" + "\n".join("      " + line for line in done.stderr.splitlines()[-15:]))
        return ["no report"]
    with open(path, encoding="utf-8") as handle:
        report = json.load(handle)
    print("\n".join(summarize(report)))
    broken = checks(case, done.returncode, report)
    print(f"    CHECKS: {'; '.join(broken) if broken else 'all hold'}")
    sys.stdout.flush()
    if args.reports:
        shutil.copytree(out, os.path.join(args.reports, case.name), dirs_exist_ok=True)
    shutil.rmtree(work, ignore_errors=True)
    return broken


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--setup", metavar="VENV", help="make the zoo's environment and install its libraries")
    parser.add_argument("--python", default=sys.executable, help="the zoo environment's interpreter")
    parser.add_argument("--only", default="*", help="comma-separated glob patterns of case names")
    parser.add_argument("--verify", action="store_true", help="verify the fixes too (default: --no-verify)")
    parser.add_argument("--reports", default="", help="copy each case's reports into this folder")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds one advisor run may take")
    parser.add_argument("advisor_args", nargs="*", help="further options for advisor run (after --)")
    args = parser.parse_args()
    if args.setup:
        setup(args.setup)
        return 0
    patterns = args.only.split(",")
    chosen = [case for case in CASES if any(fnmatch.fnmatch(case.name, p) for p in patterns)]
    results = {case.name: run_case(case, args.python, args) for case in chosen}
    print("\n== summary")
    for name, broken in results.items():
        print(f"    {name:24} {'; '.join(broken) if broken else 'ok'}")
    return 1 if any(results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
