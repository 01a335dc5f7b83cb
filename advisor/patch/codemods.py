"""What a rule author imports to write its patch, an edit of the user's source: find the call a finding
names, change its keywords, remove it, or add a statement after the imports.

    @check.patch(what="zero_grad() with its default")
    def patch(files, finding):
        source = files.read(finding.locations[0].file)
        call = source.call(finding.locations[0].line, "zero_grad")
        return [source.set_keywords(call, set_to_none=None)]

Edits are made on a concrete syntax tree (libcst), which keeps the user's comments and formatting:
the patch changes only what the fix names. A place that cannot be found with confidence raises
NoEdit with the reason, and nothing is edited (never a guess). A statement removed takes the comment
lines just above it along (libcst keeps them as its leading lines): they describe what is removed.

Importing this module imports no libcst: rule files load it for offline trace analysis too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from advisor.patch.cst_nodes import after_imports_index, commas_fixed, dotted, ends_with_name, is_docstring


class NoEdit(Exception):
    """The fix's place in the source is not certain (or there is nothing to edit): the reason."""


@dataclass(frozen=True)
class Change:
    """One edit of one file: the node it replaces (by identity in the parsed tree), and how; or
    statements added after the module's imports."""

    path: str
    node: Any = None  # a libcst node of the parsed tree; None for an insertion after the imports
    replace: Callable[[Any], Any] | None = None  # updated node -> new node (or libcst.RemoveFromParent())
    lines: tuple[int, int] = (0, 0)  # the first and last line the edit touches, for overlaps and the report
    insert: tuple[str, ...] = ()  # statements to add after the imports (those already there are skipped)
    what: str = ""
    keywords: tuple[str, ...] = ()  # the keywords a set_keywords change sets: two such changes of one call merge
    unsafe: str = ""  # why this edit changes results by design, where the rule's edits are otherwise safe


@dataclass
class Source:
    """One parsed user file, with the position of every node."""

    path: str
    text: str
    module: Any
    positions: Any
    parents: Any

    @classmethod
    def read(cls, path: str) -> "Source":
        """Parse ``path``; a file that does not parse raises NoEdit naming the line."""
        import libcst
        from libcst.metadata import MetadataWrapper, ParentNodeProvider, PositionProvider

        with open(path, encoding="utf-8") as handle:
            text = handle.read()
        try:
            module = libcst.parse_module(text)
        except libcst.ParserSyntaxError as bad:
            raise NoEdit(f"{path} does not parse (line {bad.raw_line}: {bad.message}), so it is not edited") from None
        wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
        return cls(path=path, text=text, module=module, positions=wrapper.resolve(PositionProvider),
                   parents=wrapper.resolve(ParentNodeProvider))

    def span(self, node: Any) -> tuple[int, int]:
        where = self.positions[node]
        return where.start.line, where.end.line

    # ---- finding the place ---------------------------------------------------------------------

    def calls(self, name: str, line: int | None = None) -> list[Any]:
        """Calls whose callee ends in ``name`` (``zero_grad``, ``optim.AdamW``, ``DataLoader``), on ``line``
        (a call that starts there, or a multi-line call that spans it) or anywhere in the file."""
        import libcst

        found = [node for node in self.positions if isinstance(node, libcst.Call) and ends_with_name(node.func, name)]
        if line is not None:
            starting = [node for node in found if self.span(node)[0] == line]
            found = starting or [node for node in found if self.span(node)[0] <= line <= self.span(node)[1]]
        return sorted(found, key=lambda node: self.span(node))

    def calls_on_line(self, line: int) -> list[Any]:
        """Every call that starts on ``line``."""
        import libcst

        return [node for node in self.positions if isinstance(node, libcst.Call) and self.span(node)[0] == line]

    def statement_at(self, line: int) -> Any:
        """The innermost simple statement that starts on ``line``."""
        import libcst

        found = [node for node in self.positions if isinstance(node, libcst.SimpleStatementLine)
                 and self.span(node)[0] == line]
        if not found:
            raise NoEdit(f"no statement starts at {self.path}:{line}")
        return found[0]

    def imports(self, module: str) -> bool:
        """``import <module>`` at the top level of the file."""
        import libcst

        return any(isinstance(part, libcst.Import) and any(dotted(alias.name) == module and alias.asname is None
                                                          for alias in part.names)
                   for statement in self.module.body if isinstance(statement, libcst.SimpleStatementLine)
                   for part in statement.body)

    def call(self, line: int, name: str) -> Any:
        """The one call of ``name`` at ``line``; NoEdit when there is none or more than one."""
        found = self.calls(name, line)
        if not found:
            raise NoEdit(f"no call of {name}(...) at {self.path}:{line}")
        if len(found) > 1:
            raise NoEdit(f"{len(found)} calls of {name}(...) at {self.path}:{line}: which one is meant is not certain")
        return found[0]

    def only_call(self, names: tuple[str, ...]) -> Any:
        """The one call in the file of any of ``names`` (an optimizer's constructor, named by its class);
        NoEdit when there is none or several."""
        found = [node for name in names for node in self.calls(name)]
        found = list({id(node): node for node in found}.values())
        if len(found) != 1:
            counted = "no call" if not found else f"{len(found)} calls"
            raise NoEdit(f"{counted} of {' / '.join(names)}(...) in {self.path}: the place to change is not certain")
        return found[0]

    # ---- edits ---------------------------------------------------------------------------------

    def set_keywords(self, call: Any, **values: Any) -> Change:
        """The call with these keywords set (a Python value, written as its repr) or removed (None). A keyword
        the call does not name, where it passes a ``**mapping``, is set in that mapping (``**{**kwargs, "k": v}``):
        the mapping may hold it already, and naming it twice fails when the call runs."""
        import libcst

        mappings = [arg for arg in call.args if arg.star == "**"]
        named = {arg.keyword.value for arg in call.args if arg.keyword is not None}
        if len(mappings) > 1 and any(value is not None and name not in named for name, value in values.items()):
            raise NoEdit(f"the call at {self.path}:{self.span(call)[0]} passes {len(mappings)} ** mappings, any of "
                         f"which may already set {', '.join(values)}: the edit is not certain")

        def rewrite(node: Any) -> Any:
            args = [arg for arg in node.args if not (arg.keyword is not None and arg.keyword.value in values
                                                     and values[arg.keyword.value] is None)]
            into_mapping: dict[str, Any] = {}
            for name, value in values.items():
                if value is None:
                    continue
                expression = libcst.parse_expression(repr(value))
                for index, arg in enumerate(args):
                    if arg.keyword is not None and arg.keyword.value == name:
                        args[index] = arg.with_changes(value=expression)
                        break
                else:
                    if mappings:
                        into_mapping[name] = value
                        continue
                    args.append(libcst.Arg(keyword=libcst.Name(name), value=expression,
                                           equal=libcst.AssignEqual(whitespace_before=libcst.SimpleWhitespace(""),
                                                                    whitespace_after=libcst.SimpleWhitespace(""))))
            if into_mapping:
                index = next(i for i, arg in enumerate(args) if arg.star == "**")
                inner = libcst.Module([]).code_for_node(args[index].value)
                merged = ", ".join(f'"{name}": {value!r}' for name, value in into_mapping.items())
                args[index] = args[index].with_changes(value=libcst.parse_expression(f"{{**{inner}, {merged}}}"))
            return node.with_changes(args=commas_fixed(args, node.args))

        said = ", ".join(f"{k}={v!r}" if v is not None else f"without {k}" for k, v in values.items())
        return Change(path=self.path, node=call, replace=rewrite, lines=self.span(call), what=said,
                      keywords=tuple(values))

    def drop_positional(self, call: Any, index: int) -> Change:
        """The call without its ``index``-th positional argument (``zero_grad(False)``)."""
        def rewrite(node: Any) -> Any:
            positional = [arg for arg in node.args if arg.keyword is None and not arg.star]
            kept = [arg for arg in node.args if arg is not positional[index]] if index < len(positional) else list(node.args)
            return node.with_changes(args=commas_fixed(kept, node.args))
        return Change(path=self.path, node=call, replace=rewrite, lines=self.span(call), what="argument removed")

    def remove_statement(self, call: Any) -> Change:
        """Remove the statement that is exactly this call (``torch.cuda.empty_cache()`` on its own line);
        a block left empty gets ``pass``. NoEdit when the call's value is used."""
        import libcst

        expression = self.parents.get(call)
        statement = self.parents.get(expression) if isinstance(expression, libcst.Expr) else None
        if not isinstance(statement, libcst.SimpleStatementLine) or len(statement.body) != 1:
            raise NoEdit(f"the call at {self.path}:{self.span(call)[0]} is part of a larger statement; "
                         "removing it by hand keeps the rest")
        block = self.parents.get(statement)
        alone = isinstance(block, libcst.IndentedBlock) and len(block.body) == 1

        def rewrite(node: Any) -> Any:
            if alone:
                return node.with_changes(body=[libcst.Pass()])
            return libcst.RemoveFromParent()
        return Change(path=self.path, node=statement, replace=rewrite, lines=self.span(statement), what="removed")

    def unwrap_with(self, call: Any) -> Change:
        """``with <call>:`` replaced by its body, dedented (a ``with torch.autograd.detect_anomaly():``)."""
        import libcst

        item = self.parents.get(call)
        statement = self.parents.get(item) if isinstance(item, libcst.WithItem) else None
        if not isinstance(statement, libcst.With) or len(statement.items) != 1:
            raise NoEdit(f"the context manager at {self.path}:{self.span(call)[0]} shares its with-statement; "
                         "not edited")
        if not isinstance(statement.body, libcst.IndentedBlock):
            raise NoEdit(f"the with-statement at {self.path}:{self.span(call)[0]} is on one line; not edited")

        def rewrite(node: Any) -> Any:
            return libcst.FlattenSentinel(node.body.body)
        return Change(path=self.path, node=statement, replace=rewrite, lines=self.span(statement), what="unwrapped")

    def returned_by(self, function: str) -> Any:
        """The expression the module-level ``function`` returns (``get_model``'s model): its one return."""
        import libcst

        defined = [node for node in self.module.body if isinstance(node, libcst.FunctionDef) and node.name.value == function]
        if len(defined) != 1:
            raise NoEdit(f"{self.path} defines {len(defined) or 'no'} {function}() at its top level")
        returns = [node for node in self.positions if isinstance(node, libcst.Return)
                   and self.span(defined[0])[0] <= self.span(node)[0] <= self.span(defined[0])[1]]
        if len(returns) != 1 or returns[0].value is None:
            raise NoEdit(f"{function}() at {self.path}:{self.span(defined[0])[0]} has {len(returns)} return statements: "
                         "which value to change is not certain")
        return returns[0].value

    def wrap(self, expression: Any, template: str, what: str = "") -> Change:
        """``expression`` rewritten by ``template``, ``{}`` standing for it as written (``torch.compile({})``)."""
        import libcst

        def rewrite(node: Any) -> Any:
            code = self.module.code_for_node(node)
            if not isinstance(node, (libcst.Name, libcst.Attribute, libcst.Call, libcst.Subscript)):
                code = f"({code})"
            return libcst.parse_expression(template.replace("{}", code))
        return Change(path=self.path, node=expression, replace=rewrite, lines=self.span(expression),
                      what=what or template.replace("{}", "..."))

    def set_arguments(self, call: Any, *values: Any) -> Change:
        """The call with exactly these positional arguments (``torch.set_num_threads(2)``)."""
        import libcst

        def rewrite(node: Any) -> Any:
            return node.with_changes(args=[libcst.Arg(value=libcst.parse_expression(repr(v))) for v in values])
        return Change(path=self.path, node=call, replace=rewrite, lines=self.span(call),
                      what=", ".join(map(repr, values)))

    def imports_torch(self) -> bool:
        return self.imports("torch")

    def with_torch(self, changes: list[Change]) -> list[Change]:
        """``changes`` that name ``torch.``, with ``import torch`` added where the file lacks it."""
        return changes if self.imports_torch() else [self.after_imports("import torch"), *changes]

    def unwrap_method(self, call: Any) -> Change:
        """``x.contiguous()`` replaced by ``x``: a method call dropped, its receiver kept as written."""
        import libcst

        if not isinstance(call.func, libcst.Attribute) or call.args:
            raise NoEdit(f"the call at {self.path}:{self.span(call)[0]} is not a bare method call")
        receiver = call.func.value
        return Change(path=self.path, node=call, replace=lambda node: node.func.value.with_changes(
            lpar=receiver.lpar, rpar=receiver.rpar), lines=self.span(call), what=f"without .{call.func.attr.value}()")

    def method_used_by(self, call: Any) -> str:
        """The method called on this call's value at once (``x.contiguous().view(...)``: ``view``), or ""."""
        import libcst

        parent = self.parents.get(call)
        return parent.attr.value if isinstance(parent, libcst.Attribute) and parent.value is call else ""

    def method_of_returned_class(self, function: str, method: str) -> Any:
        """``method`` of the class whose instance ``function`` returns, where the file defines that class
        (``get_model()`` returning ``Net(...)``: ``Net.forward``); NoEdit otherwise (a library's module)."""
        import libcst

        returned = self.returned_by(function)
        while isinstance(returned, libcst.Call) and isinstance(returned.func, libcst.Attribute):
            returned = returned.func.value  # Net(...).eval() -> Net(...)
        name = dotted(returned.func) if isinstance(returned, libcst.Call) else ""
        classes = [node for node in self.module.body if isinstance(node, libcst.ClassDef) and node.name.value == name]
        if not classes:
            raise NoEdit(f"{function}() in {self.path} returns no instance of a class the file defines, so there "
                         f"is no {method} of the user's to edit")
        methods = [node for node in classes[0].body.body if isinstance(node, libcst.FunctionDef)
                   and node.name.value == method]
        if len(methods) != 1:
            raise NoEdit(f"{name} in {self.path} defines no {method}() of its own")
        return methods[0]

    def wrap_body(self, function: Any, with_item: str, what: str = "") -> Change:
        """The function's body (after its docstring) inside ``with <with_item>:``."""
        import libcst

        def rewrite(node: Any) -> Any:
            body = list(node.body.body)
            docstring = body[:1] if body and is_docstring(body[0]) else []
            inner = body[len(docstring):]
            block = libcst.With(items=[libcst.WithItem(item=libcst.parse_expression(with_item))],
                                body=libcst.IndentedBlock(body=inner))
            return node.with_changes(body=node.body.with_changes(body=[*docstring, block]))
        return Change(path=self.path, node=function, replace=rewrite, lines=self.span(function),
                      what=what or f"with {with_item}:")

    def wrap_statements(self, statements: list[Any], with_item: str, what: str = "") -> list[Change]:
        """Consecutive statements of one block inside ``with <with_item>:`` (the comments above the first
        stay above the with)."""
        import libcst

        first, rest = statements[0], statements[1:]

        def rewrite(node: Any) -> Any:
            return libcst.With(items=[libcst.WithItem(item=libcst.parse_expression(with_item))],
                               body=libcst.IndentedBlock(body=[node.with_changes(leading_lines=()), *rest]),
                               leading_lines=node.leading_lines)
        what = what or f"with {with_item}:"
        return [Change(path=self.path, node=first, replace=rewrite, lines=(self.span(first)[0],
                                                                           self.span(statements[-1])[1]), what=what),
                *(Change(path=self.path, node=statement, replace=lambda node: libcst.RemoveFromParent(),
                         lines=self.span(statement), what=what) for statement in rest)]

    def replace_statement(self, call: Any, template: str, what: str = "") -> Change:
        """The statement that is exactly this call rewritten by ``template``, where ``{func}`` stands for the
        call's callee as written (``writer.submit({func}, ...)``)."""
        import libcst

        expression = self.parents.get(call)
        statement = self.parents.get(expression) if isinstance(expression, libcst.Expr) else None
        if not isinstance(statement, libcst.SimpleStatementLine) or len(statement.body) != 1:
            raise NoEdit(f"the call at {self.path}:{self.span(call)[0]} is part of a larger statement")
        text = template.replace("{func}", self.module.code_for_node(call.func))  # the user's code may hold braces

        def rewrite(node: Any) -> Any:
            return node.with_changes(body=[libcst.parse_statement(text + "\n").body[0]])
        return Change(path=self.path, node=statement, replace=rewrite, lines=self.span(statement),
                      what=what or text)

    def after_imports(self, *statements: str, what: str = "") -> Change:
        """Statements added after the module's imports (library flags at the top of the entry point)."""
        import libcst

        for code in statements:
            libcst.parse_statement(code)  # a rule's typo fails here, not in the user's file
        at = after_imports_index(self.module)
        line = self.span(self.module.body[at - 1])[1] if at else 0
        return Change(path=self.path, insert=tuple(statements), lines=(line + 1, line + 1),
                      what=what or "; ".join(statements))
