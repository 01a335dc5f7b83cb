"""The shape of the house: one idea per module, data flowing one way, no import circles."""

from __future__ import annotations

import ast
import functools
import re
import subprocess
import sys
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parent.parent
MAX_LINES = 400


def _package_files() -> list[Path]:
    return sorted((ROOT / "advisor").rglob("*.py"))


@functools.lru_cache(maxsize=None)
def _tree(path: Path) -> ast.Module:
    """A file's syntax tree, parsed once for all the tests here (each walks every file)."""
    return ast.parse(path.read_text(encoding="utf-8"))


def _module_name(path: Path) -> str:
    relative = path.relative_to(ROOT).with_suffix("")
    parts = list(relative.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _runtime_imports(path: Path) -> set[str]:
    """advisor modules this file imports when it runs (``if TYPE_CHECKING:`` blocks excluded)."""
    tree = _tree(path)
    skipped = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
               for n in ast.walk(node)}
    found = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("advisor"):
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("advisor"))
    return found


@functools.lru_cache(maxsize=None)
def _import_graph() -> nx.DiGraph:  # shared: the tests only read it
    modules = {_module_name(p): p for p in _package_files()}
    graph = nx.DiGraph()
    for name, path in modules.items():
        graph.add_node(name)
        for imported in _runtime_imports(path):
            if imported in modules and imported != name:
                graph.add_edge(name, imported)
    return graph


def test_no_module_is_over_400_lines():
    long = {str(p.relative_to(ROOT)): n for p in _package_files()
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert long == {}


def test_capture_imports_neither_the_engine_nor_verification():
    graph = _import_graph()
    for module in (m for m in graph if m.startswith("advisor.capture")):
        bad = {m for m in nx.descendants(graph, module) if m in ("advisor.rulekit.engine",) or m.startswith("advisor.verify")}
        assert not bad, f"{module} reaches {bad}"


def test_rules_and_report_have_no_import_circle():
    graph = _import_graph()
    report = graph.subgraph(m for m in graph if m.startswith("advisor.report"))
    assert list(nx.simple_cycles(report)) == []
    # the package's __init__ is a facade: advisor.audit() imports the API when called
    modules = graph.subgraph(m for m in graph if m != "advisor")
    assert list(nx.simple_cycles(modules)) == [], "advisor's modules import each other in a circle"


def test_no_circle_even_through_imports_made_only_for_types():
    """A type-only import is still a dependency of data: the watcher that names the window's type depends on it."""
    modules = {_module_name(p): p for p in _package_files()}
    graph = nx.DiGraph()
    for name, path in modules.items():
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                named = {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
            elif isinstance(node, ast.Import):
                named = {alias.name for alias in node.names}
            else:
                continue
            graph.add_edges_from((name, m) for m in named if m in modules and m not in (name, "advisor"))
    assert list(nx.simple_cycles(graph.subgraph(m for m in graph if m != "advisor"))) == []


def test_no_folder_holds_more_than_twenty_modules():
    crowded = {}
    for folder in {p.parent for p in _package_files()}:
        if (count := len(list(folder.glob("*.py")))) > 20:
            crowded[str(folder.relative_to(ROOT))] = count
    assert crowded == {}


def test_rules_never_run_the_model():
    graph = _import_graph()
    for module in (m for m in graph if m.startswith("advisor.rules.")):
        reached = nx.descendants(graph, module)
        assert not {m for m in reached if m.startswith(("advisor.sandbox", "advisor.verify", "advisor.commands.audit"))}, module


# The layers, top to bottom: a module may import from its own room and from rooms below it, never above.
# (Entry points; their commands; the report's assembly; what a command runs; the child and its stages; the rules
# and the report record; the rule kit; what was gathered and the records everything shares; the machine's state;
# the base every layer may use. docs/architecture.md says the same in words.)
LAYERS = (
    ("advisor", "cli", "__main__"),
    ("commands", "integrations"),
    ("assembly",),
    ("script",),
    ("ready",),
    ("capture",),
    ("verify",),
    ("run",),
    ("sandbox",),
    ("rules",),
    ("patch",),
    ("report",),
    ("rulekit",),
    ("workload",),
    ("gathered",),
    ("evidence",),
    ("trace",),
    ("files",),
    ("machine",),
    ("stats", "sources", "opnames", "errors", "records", "version"),
)
_FLOOR = {room: floor for floor, rooms in enumerate(LAYERS) for room in rooms}


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _every_import(path: Path) -> set[str]:
    """advisor modules this file names in any import: at the top, in a function, under TYPE_CHECKING."""
    found = set()
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module.startswith("advisor"):
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("advisor"))
    return found


def test_every_room_sits_on_a_floor():
    rooms = {_room(_module_name(p)) for p in _package_files()}
    assert rooms - set(_FLOOR) == set(), "place the new room in LAYERS (where does it sit in the flow?)"


def test_no_arrow_runs_back_up():
    back = set()
    for path in _package_files():
        here = _module_name(path)
        for imported in _every_import(path):
            if _FLOOR.get(_room(imported), -1) < _FLOOR[_room(here)]:
                back.add(f"{here} -> {imported}")
    assert back == set()


def test_no_two_modules_share_a_name():
    by_name: dict[str, list[str]] = {}
    for path in _package_files():
        if path.name not in ("__init__.py", "__main__.py"):
            by_name.setdefault(path.stem, []).append(str(path.relative_to(ROOT)))
    assert {name: paths for name, paths in by_name.items() if len(paths) > 1} == {}


def _defined_in(predicate) -> set[str]:
    """Files (relative) holding a node the predicate accepts."""
    found = set()
    for path in _package_files():
        if any(predicate(node) for node in ast.walk(_tree(path))):
            found.add(str(path.relative_to(ROOT)))
    return found


def test_statistics_are_computed_in_one_module():
    def resamples_or_ranks(node) -> bool:
        if isinstance(node, ast.Call):
            called = ast.unparse(node.func)
            return called.endswith(("random.Random", ".choices", "statistics.quantiles"))
        return isinstance(node, ast.FunctionDef) and node.name.lstrip("_") in ("percentile", "bootstrap")
    assert _defined_in(resamples_or_ranks) == {"advisor/stats.py"}


def test_the_user_frame_is_recognised_in_one_module():
    def frame_knowledge(node) -> bool:
        if not isinstance(node, ast.Constant) or not isinstance(node.value, str):
            return False
        return "site-packages" in node.value or "dist-packages" in node.value or "line(?:no)?" in node.value
    assert _defined_in(frame_knowledge) == {"advisor/sources.py"}


def _names_operators(node) -> bool:
    """A literal collection of two or more operator names: profiler ops or captured graph targets."""
    if not isinstance(node, (ast.Set, ast.List, ast.Tuple)):
        return False
    names = [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return sum(1 for n in names if n.startswith("aten::") or re.fullmatch(r"(torch|F)\.[a-z]\w*", n)) >= 2


def test_operator_names_are_listed_in_one_module():
    assert _defined_in(_names_operators) == {"advisor/opnames.py"}


def test_severity_is_decided_in_one_place():
    """Rules give a judgement at most; the scale, the cap and the demotion are rulekit/severity.py's,
    called by the engine (decide) and by verification (demote) alone."""
    def calls_the_scale(node) -> bool:
        return isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "severity" \
            and node.attr in ("decide", "capped", "for_share", "demote")
    assert _defined_in(calls_the_scale) == {"advisor/rulekit/engine.py", "advisor/assembly/verification.py"}
    importers = _defined_in(lambda n: isinstance(n, ast.ImportFrom) and n.module == "advisor.rulekit.severity"
                            and any(a.name != "Severity" for a in n.names))
    assert importers == set()


def test_diff_analyze_and_the_parents_of_audit_and_run_start_without_torch():
    """diff and analyze run no model: reading two reports or a trace must not pay torch's import. The parents
    of audit and run start the child that runs it: their own import of torch (2 s) would come before it."""
    probe = ("import sys, advisor.cli, advisor.commands.diff, advisor.commands.analyze, advisor.commands.audit\n"
             "import advisor.commands.run, advisor.commands.ready\n"
             "from advisor.rulekit.engine import RuleConfig\n"
             "RuleConfig.load((), {}, ())\n"
             "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, check=True)
    assert result.stdout.strip() == "[]"


def test_every_command_line_option_is_declared_once():
    """An option several commands take is declared once (``advisor/cli/flags.py``) and shared, so its help, default
    and type cannot drift apart between the commands."""
    declared: dict[str, list[str]] = {}
    for path in sorted((ROOT / "advisor" / "cli").glob("*.py")):
        for node in ast.walk(_tree(path)):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "option"
                    and node.args and isinstance(node.args[0], ast.Constant)):
                declared.setdefault(node.args[0].value, []).append(f"{path.name}:{node.lineno}")
    assert declared and {name: places for name, places in declared.items() if len(places) > 1} == {}


def test_at_most_ten_modules_lie_flat_in_the_package():
    """What is not a package of its own is shared by all of them (records, errors, statistics, places in the source);
    anything else belongs in the package of its idea."""
    flat = sorted(p.name for p in (ROOT / "advisor").glob("*.py"))
    assert len(flat) <= 10, flat


def _classes_defined_in(*relative: str) -> set[str]:
    return {node.name for path in relative for node in ast.walk(_tree(ROOT / path)) if isinstance(node, ast.ClassDef)}


def test_no_command_builds_evidence():
    """A command gathers through capture/, run/, ready/ (each builds its own evidence, and what it gathered) and hands
    that to the assembly; it never fills a record of evidence itself."""
    records = _classes_defined_in("advisor/evidence/__init__.py", "advisor/evidence/graph_records.py",
                                  "advisor/gathered.py", "advisor/ready/measured.py",
                                  "advisor/machine/state.py")
    assert {"Evidence", "TargetInfo", "Gathered", "StageRecord", "ReadyEvidence"} <= records
    built = set()
    for path in sorted((ROOT / "advisor" / "commands").glob("*.py")):
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.Call):
                called = node.func.id if isinstance(node.func, ast.Name) else \
                    node.func.attr if isinstance(node.func, ast.Attribute) else ""
                if called in records:
                    built.add(f"{path.name}:{node.lineno} {called}")
    assert built == set()


def test_capture_and_verification_import_neither_the_report_nor_its_assembly():
    graph = _import_graph()
    for module in (m for m in graph if m.startswith(("advisor.capture", "advisor.verify"))):
        reached = nx.descendants(graph, module) | {m for path in _package_files() if _module_name(path) == module
                                                   for m in _every_import(path)}
        assert not {m for m in reached if m.startswith(("advisor.report", "advisor.assembly"))}, module


def test_children_are_started_and_ended_in_one_module():
    """One launcher: how a child is started (its own session, stdin closed, its output to files), stopped between
    writes and its group ended is written once, for the capture worker and the user's script alike."""
    def starts_or_ends_a_group(node) -> bool:
        return isinstance(node, ast.Call) and ast.unparse(node.func) in ("subprocess.Popen", "os.killpg")
    assert _defined_in(starts_or_ends_a_group) == {"advisor/sandbox/child.py"}


def _names_proc(node) -> bool:
    """A string that is, or starts, a path under /proc."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value == "/proc" or node.value.startswith("/proc/")
    if isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
        return str(node.values[0].value).startswith("/proc")
    return False


FILE_CALLS = ("open", "io.open", "os.open", "os.listdir", "os.scandir", "os.readlink", "os.path.exists", "os.path.isdir",
              "os.path.isfile", "Path", "pathlib.Path")


def test_proc_is_read_in_one_module():
    def reads_proc(node) -> bool:
        return isinstance(node, ast.Call) and ast.unparse(node.func) in FILE_CALLS and any(map(_names_proc, node.args))
    assert _defined_in(reads_proc) == set()  # procfs.py names its files through PROC, once
    assert _defined_in(lambda n: isinstance(n, ast.Assign) and _names_proc(n.value)) == {"advisor/machine/procfs.py"}


def test_bench_and_tests_import_nothing_of_each_other():
    """What both need (contention, the saved evidence, synthetic ranks) is devkit/'s. bench/findings_dump.py reads an
    older revision's fixtures from that revision's own tests/ (``except ImportError``): not this checkout's."""
    def imported(path: Path) -> set[str]:
        tree, found = _tree(path), set()
        fallback = {id(n) for handler in ast.walk(tree) if isinstance(handler, ast.ExceptHandler)
                    and ast.unparse(handler.type or ast.Name("")) == "ImportError" for n in ast.walk(handler)}
        for node in ast.walk(tree):
            if id(node) in fallback:
                continue
            if isinstance(node, ast.ImportFrom) and node.module:
                found.add(node.module.split(".")[0])
            elif isinstance(node, ast.Import):
                found.update(alias.name.split(".")[0] for alias in node.names)
        return found
    test_modules, bench_modules = ({p.stem for p in (ROOT / folder).glob("*.py")} for folder in ("tests", "bench"))
    crossing = {f"bench/{p.name}: {m}" for p in (ROOT / "bench").glob("*.py") for m in imported(p) & test_modules}
    crossing |= {f"tests/{p.name}: {m}" for p in (ROOT / "tests").glob("*.py") for m in imported(p) & bench_modules}
    loaded = {f"tests/{p.name}" for p in (ROOT / "tests").glob("*.py") for node in ast.walk(_tree(p))
              if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("spec_from_file_location")
              and "bench" in ast.unparse(node)}  # a bench script loaded by its path
    assert crossing == set() and loaded == set()
