"""The commands: ``advisor audit``, ``run``, ``ready``, ``analyze``, ``diff``, ``rules [explain SLUG]`` (``fix``: its own
module)."""

from __future__ import annotations

import os
import sys

import click

import advisor.cli.flags as flags
from advisor.cli.common import (
    EXIT_FAILED,
    check_model_file,
    fail,
    formats_of,
    model_file_options,
    no_such_file,
    report_options,
    summarize,
)
from advisor.cli.config import configured
from advisor.cli.fix_command import fix
from advisor.commands.analyze import AnalyzeOptions, run_analyze
from advisor.errors import stop_name, stop_on_signals
from advisor.report.terminal import print_problems
from advisor.report.write import write_reports
from advisor.rulekit import severity
from advisor.rulekit.engine import load_rules
from advisor.rulekit.thresholds import SettingError, with_settings
from advisor.run.window_spec import TIMED_STEPS, WARMUP_STEPS
from advisor.trace.cluster import ClusterError
from advisor.trace.gc_pause import gc_paused
from advisor.version import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="advisor")
def cli() -> None:
    """advisor: a PyTorch performance auditor."""


@cli.command()
@click.argument("model_file", type=click.Path(dir_okay=False))
@report_options
@model_file_options
@click.option("--wait-for-quiet", "wait_for_quiet", type=click.FloatRange(min=0), default=None, metavar="SECONDS",
              help="When another job held the CPUs while the steps were timed, wait up to this long for the machine "
                   "to be quiet and time them again (default: $ADVISOR_WAIT_FOR_QUIET, else 15; 0: never).")
def audit(model_file, out_dir, formats, mode, device, timeout, rule_dirs, settings, disabled, fail_on, verify,
          budget, pairs, shadow_limit, quiet, debug, wait_for_quiet) -> None:
    """Audit MODEL_FILE (defines get_model() and get_inputs()) and write its report."""
    chosen = formats_of(formats)
    check_model_file(model_file)
    from advisor.commands.audit import AuditOptions, run_audit  # here: analyze and diff need none of the audit's machinery

    options = AuditOptions(
        model_file=model_file, out_dir=out_dir, formats=chosen, mode=mode, device=device, timeout=timeout,
        rule_dirs=tuple(rule_dirs), settings=tuple(settings), disabled=tuple(disabled), fail_on=fail_on,
        verify=verify, budget=budget, pairs=pairs, shadow_limit_mb=shadow_limit, wait_for_quiet_s=wait_for_quiet,
    )
    options = _configured(options, model_file, debug)
    stem = os.path.splitext(os.path.basename(model_file))[0]
    _audit_and_report(lambda progress: run_audit(options, progress), model_file, stem, out_dir, chosen,
                      options.fail_on, quiet, debug)


def _configured(options, subject: str, debug: bool):
    """The options with [tool.advisor]'s values where the command line gave none (cli/config.py)."""
    try:
        return configured(options, subject)
    except SettingError as bad:
        fail(str(bad), debug)


def _audit_and_report(audit_with, subject: str, stem: str, out_dir: str, formats: tuple[str, ...], fail_on: str,
                      quiet: bool, debug: bool) -> None:
    """Run an audit (``audit_with(progress)``), write its reports, print its summary, exit with its code."""
    progress = (lambda text: None) if quiet else (lambda text: click.echo(f"[advisor] {text}", err=True))
    try:
        result = audit_with(progress)
    except SettingError as bad:
        fail(str(bad), debug)
    except KeyboardInterrupt as interruption:  # where no partial report can be written (advisor run writes one)
        fail(f"{subject}: interrupted ({stop_name(interruption)}); every process advisor started was ended", debug)
    except Exception as unexpected:  # noqa: BLE001 - a clear line, not a traceback
        fail(f"{subject}: internal error in advisor: {type(unexpected).__name__}: {unexpected}", debug)
    try:
        result.written = write_reports(result.report, out_dir, stem, formats)
    except ValueError as refused:
        fail(str(refused), debug)
    except OSError as refused:
        print_problems(result.report, subject, debug)
        fail(f"{subject}: the reports could not be written to {os.path.abspath(out_dir)}: "
              f"{refused.strerror or refused} (a script that removed its own working folder removes the reports' "
              "folder too; pass --out elsewhere)", debug)
    print_problems(result.report, subject, debug)
    summarize(result.report, result.written)
    sys.exit(result.exit_code(fail_on))


@cli.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@report_options
@click.option("--warmup-steps", type=click.IntRange(min=0), default=WARMUP_STEPS, show_default=True,
              help="Steps the script runs before timing starts.")
@click.option("--steps", type=click.IntRange(min=2), default=TIMED_STEPS, show_default=True,
              help="Steps timed profiler-free.")
@click.option("--full", is_flag=True, help="Let the script finish after the window (default: stop it).")
@click.option("--show-output", is_flag=True, help="Show the script's stdout and stderr as it runs.")
@flags.verify("Verify injectable fixes by running the script again.")
@flags.budget()
@click.option("--step-marker", default="", metavar="QUALNAME",
              help="A function whose every return ends a step (train_step, or module:Class.method).")
@flags.mode("auto: train once the script creates an optimizer or runs a backward (a step is an optimizer step), "
            "else inference (a step is a forward of the outermost module).")
@flags.timeout("Seconds the script may run before it is stopped (between two steps).")
@flags.pairs()
@flags.SHADOW_LIMIT
@flags.QUIET
@flags.DEBUG
def run(command, out_dir, formats, rule_dirs, settings, disabled, fail_on, warmup_steps, steps, full, show_output,
        step_marker, mode, verify, budget, timeout, pairs, shadow_limit, quiet, debug) -> None:
    """Audit an unmodified script: advisor run [OPTIONS] -- python train.py --its --args"""
    from advisor.commands.run import RunOptions, run_script

    _refuse_an_option_as_command(command)
    chosen = formats_of(formats)
    options = RunOptions(command=tuple(command), out_dir=out_dir, formats=chosen, warmup_steps=warmup_steps,
                         steps=steps, full=full, timeout=timeout, rule_dirs=tuple(rule_dirs),
                         settings=tuple(settings), disabled=tuple(disabled), fail_on=fail_on, show_output=show_output,
                         step_marker=step_marker, mode=mode, verify=verify, budget=budget, pairs=pairs,
                         shadow_limit_mb=shadow_limit)
    script = options.script
    if script.endswith(".py") and not os.path.isfile(script):
        fail(no_such_file(script, "advisor run runs the command after --, e.g. advisor run -- python train.py"))
    options = _configured(options, script if script.endswith(".py") else os.getcwd(), debug)
    _audit_and_report(lambda progress: run_script(options, progress), script, options.stem, out_dir, chosen,
                      options.fail_on, quiet, debug)


def _refuse_an_option_as_command(command: tuple[str, ...]) -> None:
    """``run`` passes the script's own options through, so click hands it an option it does not know as the
    command's first word; no command starts with a dash."""
    if not command[0].startswith("-"):
        return
    import difflib

    known = [name for param in click.get_current_context().command.params for name in param.opts]
    close = difflib.get_close_matches(command[0].split("=")[0], known, n=1)
    fail(f"{command[0]}: not an option of advisor run{f' (did you mean {close[0]}?)' if close else ''}; advisor's "
         "options go before --, the command after it (advisor run --steps 10 -- python train.py)")


def _batch_sizes(value: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(part) for part in value.split(",") if part.strip())
    except ValueError:
        sizes = ()
    if not sizes or any(size < 1 for size in sizes):
        raise click.BadParameter(f"expected comma-separated positive integers such as 1,8,32; got {value!r}")
    return tuple(sorted(set(sizes), key=sizes.index))


@cli.command()
@click.argument("model_file", type=click.Path(dir_okay=False))
@click.option("--batch-sizes", default="1,8,32", show_default=True, help="Comma-separated batch sizes to measure.")
@click.option("--latency-budget", "latency_budget", type=click.FloatRange(min=0, min_open=True), default=None,
              metavar="MS", help="p99 latency each call must meet, in ms.")
@click.option("--precision", type=click.Choice(["bf16", "fp16"]), default="bf16", show_default=True,
              help="Reduced precision to compare against fp32.")
@click.option("--precision-tolerance", type=click.FloatRange(min=0), default=0.05, show_default=True,
              help="Largest change of the outputs under reduced precision, over their magnitude.")
@click.option("--determinism-tolerance", type=click.FloatRange(min=0), default=0.0, show_default=True,
              help="Largest difference between two calls, over the outputs' magnitude (0: bit for bit).")
@flags.DEVICE
@flags.out()
@flags.FORMAT
@flags.fail_on(["fail", "warn"], "fail", "Exit 1 when a check fails (or also when one warns).")
@flags.settings("ready.LIMIT=VALUE", "Override a readiness limit (memory_warn_share, cold_start_warn_ms, ...; see the "
                                     "docs of advisor ready).")
@flags.timeout()
@flags.QUIET
@flags.DEBUG
def ready(model_file, batch_sizes, latency_budget, precision, precision_tolerance, determinism_tolerance, device,
          out_dir, formats, fail_on, settings, timeout, quiet, debug) -> None:
    """Check MODEL_FILE is ready to deploy: export, compile, latency per batch size, memory, ..."""
    from advisor.commands.ready import ReadyRunOptions, run_ready
    from advisor.ready.checks import LIMITS, LIMITS_OWNER, ReadyOptions

    chosen = formats_of(formats)
    sizes = _batch_sizes(batch_sizes)
    check_model_file(model_file)
    try:
        limits = with_settings(LIMITS_OWNER, LIMITS, settings)
    except SettingError as bad:
        fail(str(bad), debug)
    options = ReadyRunOptions(
        model_file=model_file, out_dir=out_dir, formats=chosen, batch_sizes=sizes, device=device, timeout=timeout,
        fail_on=fail_on, checks=ReadyOptions(latency_budget_ms=latency_budget, precision=precision,
                                             precision_tolerance=precision_tolerance,
                                             determinism_tolerance=determinism_tolerance, limits=limits))
    stem = os.path.splitext(os.path.basename(model_file))[0]
    _audit_and_report(lambda progress: run_ready(options, progress), model_file, stem, out_dir, chosen, fail_on,
                      quiet, debug)


@cli.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--cluster", metavar="ADDRESS",
              help="A Dask scheduler (tcp://host:8786) whose workers summarise the ranks of a large trace folder; "
                   "they must see the same files and have advisor installed. Default: processes on this machine.")
@report_options
@flags.DEBUG
def analyze(paths, cluster, out_dir, formats, rule_dirs, settings, disabled, fail_on, debug) -> None:
    """Audit recorded Kineto traces (.json / .json.gz, or a folder of per-rank traces)."""
    chosen = formats_of(formats)
    options = _configured(AnalyzeOptions(paths=tuple(paths), cluster=cluster, out_dir=out_dir, fail_on=fail_on,
                                         rule_dirs=tuple(rule_dirs), settings=tuple(settings),
                                         disabled=tuple(disabled)), paths[0], debug)
    fail_on = options.fail_on
    # One pass over a large acyclic trace: the cyclic collector would only walk it again and again.
    # It is back on once the trace is freed (when _analyze returns), so it never walks it at all.
    with gc_paused():
        code = _analyze(options, paths[0], out_dir, chosen, fail_on, debug)
    global _exit_at_once
    _exit_at_once = True
    sys.exit(code)


def _analyze(options: AnalyzeOptions, first_path: str, out_dir: str, chosen: tuple[str, ...], fail_on: str,
             debug: bool) -> int:
    try:
        result = run_analyze(options)
    except (SettingError, ClusterError) as bad:
        fail(str(bad), debug)
    except Exception as unexpected:  # noqa: BLE001
        fail(f"{first_path}: internal error in advisor: {type(unexpected).__name__}: {unexpected}", debug)
    for error in result.report.errors:
        click.echo(f"advisor: {error.message}", err=True)
    if result.report.errors:
        return EXIT_FAILED
    written = write_reports(result.report, out_dir, result.stem, chosen)
    print_problems(result.report, first_path, debug)
    summarize(result.report, written)
    return result.report.exit_code(fail_on)


@cli.command()
@click.argument("old_report", type=click.Path())
@click.argument("new_report", type=click.Path())
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
@click.option("--threshold", type=click.FloatRange(min=0), default=0.05, show_default=True,
              help="Change (0.05 = 5%) the 95% interval of the step time (or a latency percentile) must "
                   "clear before the diff calls it; exit 1 on a regression or a readiness check that got worse.")
@click.option("--html", "html_path", type=click.Path(dir_okay=False), help="Also write the diff as HTML here.")
@click.option("--markdown", "markdown_path", type=click.Path(dir_okay=False),
              help="Also write the diff as Markdown here (a pull request's comment).")
@flags.fail_on(default=None, help="Also exit 1 when the new report adds a finding at or above this severity "
                                 "(default: only a regression fails).")
@click.option("--remeasure", is_flag=True,
              help="OLD and NEW are two model files, or two scripts (run as `python FILE -- ARGS`): time their steps "
                   "against each other in interleaved pairs (a diff within noise settled); outputs are not compared.")
@click.option("--step-time/--no-step-time", "judge_step", default=True,
              help="Judge the step time of the two reports (--no-step-time: a gate that times it with --remeasure).")
@flags.budget("--remeasure: seconds of interleaved pairs.", default=60.0, least=1)
@flags.pairs("--remeasure: exactly N pairs instead of --budget.")
def diff(old_report, new_report, script_args, threshold, html_path, markdown_path, fail_on, judge_step, remeasure,
         budget, pairs) -> None:
    """Compare two JSON reports: step time, findings, readiness checks and latency (exit 1 on regression);
    with --remeasure, time two model files (or two scripts, given the same ARGS after --) against each other."""
    from advisor.commands.diff import DiffOptions, run_diff
    from advisor.report.compare import DiffInputError

    if remeasure:
        _remeasure(old_report, new_report, tuple(script_args), threshold, budget, pairs)
    if script_args:
        fail(f"{' '.join(script_args)}: arguments are for two scripts' --remeasure, not a diff of reports")
    try:
        result = run_diff(DiffOptions(old_report=old_report, new_report=new_report, threshold=threshold,
                                      html_path=html_path, markdown_path=markdown_path, fail_on=fail_on,
                                      judge_step=judge_step))
    except DiffInputError as bad:
        fail(str(bad))
    except OSError as bad:
        fail(f"{bad.filename}: cannot write the diff: {bad.strerror}")
    click.echo(result.text)
    sys.exit(result.exit_code)


def _remeasure(old_file: str, new_file: str, script_args: tuple[str, ...], threshold: float, budget: float,
               pairs: int | None) -> None:
    from advisor.commands.remeasure import RemeasureOptions, run_remeasure
    from advisor.report.compare import DiffInputError

    try:
        result = run_remeasure(RemeasureOptions(old_file=old_file, new_file=new_file, script_args=script_args,
                                                threshold=threshold, budget=budget, pairs=pairs),
                               lambda text: click.echo(f"advisor: {text}", err=True))
    except DiffInputError as bad:
        fail(str(bad))
    click.echo(result.text)
    sys.exit(result.exit_code)


@cli.group(invoke_without_command=True)
@flags.RULES
@click.pass_context
def rules(ctx: click.Context, rule_dirs) -> None:
    """List the rules (or explain one: advisor rules explain SLUG)."""
    ctx.obj = load_rules(rule_dirs)
    for problem in ctx.obj.problems:
        click.echo(f"advisor: rule file {problem.source} {problem.message}", err=True)
    if ctx.invoked_subcommand is None:
        for item in ctx.obj.rules:
            click.echo(f"{item.code}  {item.slug:<28} {item.layer.value:<18} {item.severity.value:<7} {item.title}")


@rules.command()
@click.argument("slug")
@click.option("--code", default="USR001", show_default=True, help="The rule's code (two to five capitals, three digits).")
@click.option("--layer", type=click.Choice(["hardware", "runtime", "model", "application"]), default="model",
              show_default=True, help="Where the latency it finds hides.")
@flags.out("the rule file (load it with --rules FOLDER) and its samples", "my_rules", "folder",
           type=click.Path(file_okay=False))
@click.pass_obj
def new(ruleset, slug: str, code: str, layer: str, folder: str) -> None:
    """Write a new rule's file and a positive and a negative sample for it."""
    from advisor.rulekit.rule import CODE_PATTERN, SLUG_PATTERN
    from advisor.rulekit.scaffold import scaffold

    if not SLUG_PATTERN.match(slug):
        fail(f"{slug!r}: a rule's slug is lower-case words joined by '-' (e.g. my-rule)")
    if not CODE_PATTERN.match(code):
        fail(f"{code!r}: a rule's code is two to five capitals and three digits (e.g. USR001)")
    if ruleset.get(slug) is not None or any(r.code == code for r in ruleset.rules):
        fail(f"{slug} or {code} is taken by a built-in rule; choose another")
    try:
        written = scaffold(slug, code, layer, folder)
    except FileExistsError as taken:
        fail(str(taken))
    for path in written:
        click.echo(f"wrote {path}")
    positive = written[1]
    click.echo(f"try it: advisor audit {positive} --rules {folder}   (then edit {written[0]})")


@rules.command()
@click.argument("slug")
@click.pass_obj
def explain(ruleset, slug: str) -> None:
    """Print a rule's documentation and thresholds."""
    found = ruleset.get(slug) or next((r for r in ruleset.rules if r.code == slug.upper()), None)
    if found is None:
        fail(f"no rule named {slug!r}; 'advisor rules' lists them")
    click.echo(f"{found.code} {found.slug} ({found.layer.value}, default severity {found.severity.value})\n")
    click.echo(found.doc)
    if found.needs:
        click.echo(f"\nReads: {', '.join(found.needs)} (not run without them; the report says why)")
    if found.thresholds:
        click.echo("\nThresholds (override with --set " + found.slug + ".NAME=VALUE):")
        for name, threshold in found.thresholds.items():
            unit = f" {threshold.unit}" if threshold.unit else ""
            click.echo(f"  {name} = {threshold.default:g}{unit}: {threshold.help}")
    scale = ", ".join(f"{name.split('_')[0]} from {t.default:.0%} (--set {severity.SCALE}.{name})"
                      for name, t in severity.SCALE_THRESHOLDS.items())
    if found.high_at:
        click.echo(f"\nHIGH from {found.high_at} = {found.thresholds[found.high_at].default:g} of the step, MEDIUM below it.")
    click.echo(f"\nSeverity follows measured cost: a finding's severity is at most what its share of the step "
               f"allows ({scale}; below that info).")


cli.add_command(fix)


def main() -> None:
    stop_on_signals()
    try:
        cli(prog_name="advisor")
    except SystemExit as done:
        if _exit_at_once:
            # Tearing the interpreter down frees every object one by one and collects once more: 15 ms
            # of a 260 ms analyze, with nothing left to clean up (its files are written and closed, its
            # pool shut down). As mypy does, the command's process ends here, its output flushed.
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(done.code if isinstance(done.code, int) else 1)
        raise


_exit_at_once = False  # set by a command that leaves nothing to clean up (analyze); only main() reads it
