"""The places rules' findings usually point at, found in the user's source and given the usual edit: the
``DataLoader(...)`` call a loader finding names, each watched call site, DDP's constructor; the user's files
as a rule's patch reads them (``Files``). Built on ``codemods``."""

from __future__ import annotations

from typing import Any, Callable

from advisor.patch.codemods import Change, NoEdit, Source
from advisor.patch.cst_nodes import ends_with_name

LOADER_CALL_NOTE = "the DataLoader(...) call"


class Files:
    """The user's files as a rule's patch reads them: ``read(path)`` parses one (each once), ``entry`` is the
    model file or script the audit ran (where library flags go)."""

    def __init__(self, entry: str, read: Callable[[str], Source]):
        self.entry = entry
        self.read = read


def at_loader_call(files: Files, finding: Any, **keywords: Any) -> list[Change]:
    """The finding's ``DataLoader(...)`` call (its first location, as the audit saw it created) with these
    keywords set."""
    place = next((loc for loc in finding.locations if loc.note.startswith(LOADER_CALL_NOTE)), None)
    if place is None:
        raise NoEdit("the audit did not see where the DataLoader was created")
    source = files.read(place.file)
    names = tuple(dict.fromkeys(name for name in (place.function, "DataLoader") if name))
    for name in names:
        if source.calls(name, place.line):
            return [source.set_keywords(source.call(place.line, name), **keywords)]
    raise NoEdit(f"no {' or '.join(names)}(...) call at {place.file}:{place.line} (a subclass building its "
                 "loader inside its own __init__ is changed by hand)")


def at_call_sites(files: Files, finding: Any, name: str,
                  edit: Callable[[Source, Any], Change]) -> list[Change]:
    """``edit`` made at the call of ``name`` on each of the finding's lines."""
    changes = []
    for place in finding.locations:
        if place.file:
            source = files.read(place.file)
            changes.append(edit(source, source.call(place.line, name)))
    return changes


def removed_call(source: Source, call: Any) -> Change:
    """A call taken out of the code: its own statement removed, or the with-statement it opens unwrapped."""
    import libcst

    if isinstance(source.parents.get(call), libcst.WithItem):
        return source.unwrap_with(call)
    return source.remove_statement(call)


DDP_NAMES = ("DistributedDataParallel", "DDP")


def at_ddp_call(files: Files, finding: Any, **keywords: Any) -> list[Change]:
    """The finding's ``DistributedDataParallel(...)`` call (its location: where the script built DDP, by its
    own name or the usual ``DDP`` alias) with these keywords set."""
    place = next((loc for loc in finding.locations if loc.file), None)
    if place is None:
        raise NoEdit("the run did not see where DistributedDataParallel was built")
    source = files.read(place.file)
    found = [call for name in DDP_NAMES for call in source.calls(name, place.line)]
    if len(found) != 1:
        raise NoEdit(f"{len(found) or 'no'} DistributedDataParallel(...) call(s) at {place.file}:{place.line}")
    return [source.set_keywords(found[0], **keywords)]


def no_sync_loop(files: Files, finding: Any) -> list[Change]:
    """The micro-step loop around the finding's forward (``for i in range(n):`` holding the DDP model's call
    and a ``.backward()``), its body run under ``model.no_sync()`` on every iteration but the last."""
    import libcst

    place = next((loc for loc in finding.locations if loc.file), None)
    if place is None:
        raise NoEdit("the run did not see where the micro-steps' forward is")
    source = files.read(place.file)
    ddp_names = {target.target.value for node in source.positions if isinstance(node, libcst.Assign)
                 for target in node.targets if isinstance(target.target, libcst.Name)
                 and isinstance(node.value, libcst.Call) and _ddp_call(node.value)}
    model = next((call.func.value for call in source.calls_on_line(place.line)
                  if isinstance(call.func, libcst.Name) and call.func.value in ddp_names), None)
    if model is None:
        raise NoEdit(f"no call of the DistributedDataParallel model at {place.file}:{place.line}")
    loop = source.parents.get(source.statement_at(place.line))
    while loop is not None and not isinstance(loop, libcst.For):
        loop = source.parents.get(loop)
    if loop is None or not isinstance(loop.target, libcst.Name) or not _is_range_of_one(loop.iter):
        raise NoEdit(f"the forward at {place.file}:{place.line} is not in a `for i in range(n):` micro-step loop")
    if not any(source.calls("backward", line) for line in range(*_lines_plus_one(source.span(loop)))):
        raise NoEdit(f"the loop at {place.file}:{source.span(loop)[0]} holds no backward()")
    index, count = loop.target.value, source.module.code_for_node(loop.iter.args[0].value)
    guard = (f"(contextlib.nullcontext() if {index} == {count} - 1 else {model}.no_sync())")
    changes = [source.wrap_body(loop, guard, what=f"{model}.no_sync() on all micro-steps but the last")]
    if not source.imports("contextlib"):
        changes.insert(0, source.after_imports("import contextlib"))
    return changes


def _ddp_call(call: Any) -> bool:
    import libcst

    name = call.func.attr.value if isinstance(call.func, libcst.Attribute) else getattr(call.func, "value", "")
    return name in DDP_NAMES


def _is_range_of_one(node: Any) -> bool:
    import libcst

    return (isinstance(node, libcst.Call) and isinstance(node.func, libcst.Name) and node.func.value == "range"
            and len(node.args) == 1)


def _lines_plus_one(span: tuple[int, int]) -> tuple[int, int]:
    return span[0], span[1] + 1



def forward_and_loss(source: Source, line: int) -> list[Any]:
    """The statement at ``line`` that calls the model, and the next one where it computes a loss from that
    output (``logits = model(x)``, then ``loss = F.cross_entropy(logits, y)``): what autocast wraps. Never
    a backward(): gradients are computed outside autocast."""
    import libcst
    from libcst import matchers

    forward = source.statement_at(line)
    if _calls_backward(forward):
        raise NoEdit(f"the forward at {source.path}:{line} and its backward() share one statement; autocast must "
                     "end before the backward")
    block = source.parents.get(forward)
    body = list(block.body) if isinstance(block, (libcst.IndentedBlock, libcst.Module)) else [forward]
    index = next(i for i, statement in enumerate(body) if statement is forward)
    statements = [forward]
    following = body[index + 1] if index + 1 < len(body) else None
    if isinstance(following, libcst.SimpleStatementLine) and not _calls_backward(following):
        read = {name.value for name in matchers.findall(following, matchers.Name())}
        if any("loss" in name.lower() for name in _assigned(following)) and _assigned(forward) & read:
            statements.append(following)
    return statements


def _assigned(statement: Any) -> set[str]:
    """The plain names a simple statement assigns (``a, b = ...``: a and b)."""
    import libcst
    from libcst import matchers

    targets = [t.target for part in statement.body if isinstance(part, libcst.Assign) for t in part.targets]
    targets += [part.target for part in statement.body if isinstance(part, (libcst.AnnAssign, libcst.AugAssign))]
    return {name.value for target in targets for name in matchers.findall(target, matchers.Name())}


def _calls_backward(statement: Any) -> bool:
    from libcst import matchers

    return bool(matchers.findall(statement, matchers.Call(func=matchers.Attribute(attr=matchers.Name("backward")))))


def model_built_for(source: Source, line: int) -> Any:
    """The expression that builds the model a script calls at ``line`` (``model = Net(...)`` for
    ``out = model(x)``): the one assignment of that plain name, from a call, in the same function (or at the
    top level) before the call. NoEdit where the model is reached another way (an attribute, an argument, a
    name assigned twice): where it is built is then not certain."""
    import libcst

    statement = source.statement_at(line)
    callees = {call.func.value for call in source.calls_on_line(line) if isinstance(call.func, libcst.Name)}
    if not callees:
        raise NoEdit(f"the model called at {source.path}:{line} is not called by a plain name (an attribute, an "
                     "item): where it is built is not certain, so torch.compile goes in by hand")
    scope = source.parents.get(statement)
    while scope is not None and not isinstance(scope, (libcst.FunctionDef, libcst.Module)):
        scope = source.parents.get(scope)
    built = [node for node in source.positions if isinstance(node, libcst.Assign) and len(node.targets) == 1
             and isinstance(node.targets[0].target, libcst.Name) and node.targets[0].target.value in callees
             and _scope_of(source, node) is scope and source.span(node)[0] < line]
    names = {node.targets[0].target.value for node in built}
    if len(built) != 1 or not isinstance(built[0].value, libcst.Call):
        called = " or ".join(sorted(callees))
        how = "assigned more than once" if len(built) > 1 else "not built by a call" if built else \
            "not built in the same function"
        raise NoEdit(f"the model called at {source.path}:{line} ({called}) is {how}: where it is built is not "
                     "certain, so torch.compile goes in by hand")
    if ends_with_name(built[0].value.func, "compile"):
        raise NoEdit(f"{names.pop()} is compiled where it is built ({source.path}:{source.span(built[0])[0]})")
    return built[0].value


def _scope_of(source: Source, node: Any) -> Any:
    import libcst

    scope = source.parents.get(node)
    while scope is not None and not isinstance(scope, (libcst.FunctionDef, libcst.Module, libcst.ClassDef)):
        scope = source.parents.get(scope)
    return scope
