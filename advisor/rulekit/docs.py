"""A rule's documentation, parsed from its module docstring: the title line, then the sections *What it
detects*, *Why it matters*, *How to fix* and *Example* (a ``Before::`` and an ``After::`` block).

The Example is written once: it is what ``advisor rules explain`` shows and the before/after snippet
of every finding whose rule does not write one from what it measured."""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass, field

SECTIONS = ("What it detects", "Why it matters", "How to fix", "Example")
_HEADING = re.compile(r"^(%s):[ \t]*$" % "|".join(SECTIONS), re.M)
_EXAMPLE = re.compile(r"Before::\n(?P<before>.*?)\n\s*After::\n(?P<after>.*)", re.S)


@dataclass
class RuleDoc:
    title: str
    sections: dict[str, str] = field(default_factory=dict)
    before: str = ""
    after: str = ""

    @property
    def problems(self) -> list[str]:
        """What the documentation lacks: a section, or an Example with its Before and After."""
        found = [f"no {name!r} section" for name in SECTIONS if name not in self.sections]
        if "Example" in self.sections and not (self.before and self.after):
            found.append("its Example has no 'Before::' and 'After::' blocks")
        return found


def parse_doc(doc: str) -> RuleDoc:
    lines = doc.strip().splitlines()
    if not lines:
        return RuleDoc(title="")
    parts = _HEADING.split(textwrap.dedent("\n".join(lines[1:])))
    sections = {name: textwrap.dedent(text).strip("\n") for name, text in zip(parts[1::2], parts[2::2])}
    parsed = RuleDoc(title=lines[0].strip().rstrip("."), sections=sections)
    if (example := _EXAMPLE.search(sections.get("Example", ""))) is not None:
        parsed.before = textwrap.dedent(example.group("before")).strip("\n")
        parsed.after = textwrap.dedent(example.group("after")).strip("\n")
    return parsed
