"""More compute threads than CPU cores: oversubscription.

What it detects:
    From the environment read after the model file ran:

    * ``torch.get_num_threads()`` above the cores this process may use (its CPU affinity,
      which is what a container or ``taskset`` grants), or
    * ``OMP_NUM_THREADS`` set above those cores, or
    * intra-op threads plus data-loader workers more than ``max_oversubscription`` times the
      cores, when the model itself runs on the CPU (more workers than cores is
      dataloader-too-many-workers' finding).

Why it matters:
    PyTorch's CPU kernels split work across an OpenMP thread pool and wait for the slowest
    thread. With more threads than cores the operating system time-slices them, each parallel
    region waits for descheduled threads, and spin-waiting threads steal time from the ones
    doing work: CPU steps often get several times slower. Containers make this common:
    ``os.cpu_count()`` reports the host's cores, not the container's share.

How to fix:
    Size the pool from the affinity mask: ``torch.set_num_threads(len(os.sched_getaffinity(0)))``
    (less the cores given to data-loader workers), or export ``OMP_NUM_THREADS`` accordingly.

Example:
    Before::

        torch.set_num_threads(os.cpu_count())

    After::

        torch.set_num_threads(len(os.sched_getaffinity(0)))
"""

from __future__ import annotations

from typing import Iterator

from advisor.evidence import Evidence
from advisor.patch.codemods import NoEdit
from advisor.rulekit.fixing import with_threads
from advisor.rulekit.rule import Clean, Finding, Fix, Layer, Severity, Threshold, Thresholds, rule


@rule(
    slug="cpu-threads",
    code="ADV127",
    layer=Layer.HARDWARE,
    needs=("env",),
    severity=Severity.MEDIUM,
    thresholds={
        "max_oversubscription": Threshold(1.5, "threads (intra-op + loader workers) per usable core on a CPU run"),
        "high_ratio": Threshold(2.0, "intra-op threads per usable core that makes it high"),
    },
)
def check(ev: Evidence, th: Thresholds) -> Iterator[Finding]:
    env = ev.env
    if env is None or not env.cpu_cores_available or not env.torch_threads:
        yield Clean(why="the run's thread settings were not recorded (a trace recorded elsewhere)")
        return
    cores, threads = env.cpu_cores_available, env.torch_threads
    omp = int(env.omp_num_threads) if (env.omp_num_threads or "").isdigit() else None
    workers = ev.data.num_workers if ev.data is not None else 0
    problems = []
    if threads > cores:
        problems.append(f"torch uses {threads} intra-op threads on {cores} usable cores")
    if omp is not None and omp > cores:
        problems.append(f"OMP_NUM_THREADS={omp} exceeds the {cores} usable cores")
    if not problems and not ev.on_cuda and 0 < workers <= cores and (threads + workers) > th.max_oversubscription * cores:
        problems.append(f"{threads} intra-op threads plus {workers} loader workers compete for {cores} cores")
    if not problems:
        yield Clean(why=f"{threads} intra-op thread(s) and {workers} loader worker(s) on {cores} usable core(s): "
                        "no oversubscription")
        return
    suggested = max(1, cores - (workers if not ev.on_cuda and workers else 0))
    yield Finding(
        severity=Severity.HIGH if threads >= th.high_ratio * cores and not ev.on_cuda else Severity.MEDIUM,
        message="CPU oversubscription: " + "; ".join(problems)
                + (f" (the machine has {env.cpu_cores_logical} cores, this process may use {cores})"
                   if env.cpu_cores_logical != cores else ""),
        evidence={"torch_threads": threads, "cores_available": cores, "cores_logical": env.cpu_cores_logical,
                  "omp_num_threads": env.omp_num_threads, "loader_workers": workers, "threads_suggested": suggested},
        fix=Fix(summary=f"use at most {suggested} intra-op "
                        "threads: torch.set_num_threads(len(os.sched_getaffinity(0))) minus the cores the "
                        "loader workers need",
                docs=["https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html#utilize-openmp",
                      "https://pytorch.org/docs/stable/notes/cpu_threading_torchscript_inference.html"]),
    )


@check.fix(tolerance=1e-4, what="threads = usable cores")
def fix(target, finding):
    """Run the step with one intra-op thread per usable core (reductions split differently: 1e-4)."""
    return with_threads(target, finding.evidence["threads_suggested"])


@check.patch(what="torch.set_num_threads(usable cores) in the entry file")
def patch(files, finding):
    """The entry file's one ``torch.set_num_threads(...)`` set to the usable cores, or the call added after its
    imports where it has none."""
    source = files.read(files.entry)
    threads = finding.evidence["threads_suggested"]
    calls = source.calls("set_num_threads")
    if len(calls) > 1:
        raise NoEdit(f"{len(calls)} calls of set_num_threads(...) in {files.entry}: which one decides is not certain")
    if calls:
        return [source.set_arguments(calls[0], threads)]
    return source.with_torch([source.after_imports(f"torch.set_num_threads({threads})")])
