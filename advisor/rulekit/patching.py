"""The places rules' findings usually point at, found in the user's source and given the usual edit: the
``DataLoader(...)`` call a loader finding names, each watched call site, DDP's constructor; the user's files
as a rule's patch reads them (``Files``). Built on ``codemods``."""

from __future__ import annotations

from typing import Any, Callable

from advisor.rulekit.codemods import Change, NoEdit, Source

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
