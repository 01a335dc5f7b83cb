"""The shape of the house: one idea per module, data flowing one way, no import circles."""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parent.parent
MAX_LINES = 400


def _package_files() -> list[Path]:
    return sorted([*(ROOT / "advisor").rglob("*.py"), *(ROOT / "rules").glob("*.py")])


def _module_name(path: Path) -> str:
    relative = path.relative_to(ROOT).with_suffix("")
    parts = list(relative.parts)
    if parts[0] == "rules":
        parts = ["advisor", "rules", *parts[1:]]
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _runtime_imports(path: Path) -> set[str]:
    """advisor modules this file imports when it runs (``if TYPE_CHECKING:`` blocks excluded)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
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


def _import_graph() -> nx.DiGraph:
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


def test_rules_never_run_the_model():
    graph = _import_graph()
    for module in (m for m in graph if m.startswith("advisor.rules.")):
        reached = nx.descendants(graph, module)
        assert not {m for m in reached if m.startswith(("advisor.sandbox", "advisor.verify", "advisor.commands.audit"))}, module
