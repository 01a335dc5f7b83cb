"""A synchronous torch.save inside the step.

What it detects:
    ``torch.save`` called from user code while the audited step runs, with the time it took
    (measured by watching the step's calls), as a share of the step.

Why it matters:
    ``torch.save`` serializes and writes on the training thread: the GPU idles until the
    file is written (and tensors on the GPU are first copied to the host). Saving every step,
    or saving large state often, can cost more than the step itself.

How to fix:
    Save less often (every N steps or once per epoch), outside the step, and asynchronously:
    ``torch.distributed.checkpoint.async_save``, or copy the state to CPU and write it from a
    background thread.

Example:
    Before::

        def forward(self, x):
            torch.save(self.state_dict(), "ckpt.pt")
            ...

    After::

        if step % 1000 == 0:
            dcp.async_save(model.state_dict(), checkpoint_id=f"ckpt/{step}")
"""

from __future__ import annotations

from typing import Iterator

from advisor.evidence import Evidence
from advisor.patch.codemods import NoEdit
from advisor.rulekit.fixing import silenced, with_switches
from advisor.rulekit.helpers import no_calls
from advisor.rulekit.rule import Clean, Finding, Fix, Layer, Location, Severity, Threshold, Thresholds, rule

API = "torch.save"


@rule(
    slug="checkpoint-in-step",
    code="ADV133",
    layer=Layer.APPLICATION,
    severity=Severity.MEDIUM,
    high_at="high_share",
    thresholds={"high_share": Threshold(0.2, "share of the step spent saving that makes it high")},
)
def check(ev: Evidence, th: Thresholds) -> Iterator[Finding]:
    sites = ev.call_sites(API, runtime=True)
    if not sites:
        yield Clean(why=no_calls(ev, "torch.save"))
        return
    save_ms = sum(site.ms for site in sites)
    step_ms = ev.step_ms
    share = min(1.0, save_ms / step_ms) if step_ms else None
    yield Finding(
        message=(f"torch.save runs {sum(s.count for s in sites):g} time(s) per step, taking {save_ms:.3g} ms"
                 + (f" ({share:.0%} of the step)" if share is not None else "")
                 + ": the step waits while the file is written"),
        impact=share,
        evidence={"saves_per_step": sum(s.count for s in sites), "save_ms_per_step": save_ms,
                  "share_of_step": round(share, 4) if share is not None else None},
        locations=[Location.at(s.file, s.line, count_per_step=s.count, note=f"{s.ms:.3g} ms") for s in sites],
        fix=Fix(summary="move checkpointing out of the step, less often, and asynchronously "
                        "(torch.distributed.checkpoint.async_save or a background thread)",
                docs=["https://pytorch.org/docs/stable/distributed.checkpoint.html",
                      "https://pytorch.org/tutorials/recipes/distributed_async_checkpoint_recipe.html"]),
    )


@check.fix(tolerance=1e-6, what="save moved off the step",
           whole_runs="its saves fall on some steps only, which blocks of steps may miss")
def fix(target, finding):
    """Run the step with torch.save doing nothing: the most an asynchronous save can gain."""
    import torch


    return with_switches(target, silenced(torch, "save"))


WRITER = "checkpoint_writer"


@check.patch(safe=False, what="torch.save handed to a background writer, on a snapshot taken in the step")
def patch(files, finding):
    """Each ``torch.save(obj, path)`` the finding names becomes ``checkpoint_writer.submit(torch.save,
    copy.deepcopy(obj), path)`` on one writer thread (made after the imports; the interpreter waits for it at
    exit). The step pays the snapshot, not the write; the file appears after the call returns, so code that
    reads it at once must wait (unsafe)."""
    changes = []
    for place in finding.locations:
        source = files.read(place.file)
        call = source.call(place.line, "save")
        if len(call.args) < 2 or call.args[0].keyword is not None:
            raise NoEdit(f"the save at {place.file}:{place.line} is not torch.save(obj, path, ...)")
        code = source.module.code_for_node
        rest = ", ".join(code(arg).rstrip().rstrip(",") for arg in call.args[1:])
        changes.append(source.replace_statement(
            call, f"{WRITER}.submit({{func}}, copy.deepcopy({code(call.args[0].value)}), " + rest + ")"))
        changes.append(source.after_imports("import concurrent.futures", "import copy",
                                            f"{WRITER} = concurrent.futures.ThreadPoolExecutor(max_workers=1)"))
    return changes

