"""Read a Kineto (Chrome trace) JSON document one event at a time, gzip or plain."""

from __future__ import annotations

import json
import re
import zlib
from typing import Any, Iterator

from advisor.trace.chunks import TextChunks


class TraceFormatError(ValueError):
    """The file is not a readable Kineto trace; the message names the file and the problem."""


_EVENT_BOUNDARY = re.compile(r"\}\s*,\s*(?=\{)")
# Flow arrows ("ph": "s"/"f"/"t", cat ac2g / fwdbwd / async_cpu_to_gpu) are a third of a GPU trace and
# are never used (launches are linked by correlation id). Outside strings, '{"ph"' can only open an
# object (inside a string the quotes are escaped), and flow objects hold no braces; a cut that went
# wrong leaves invalid JSON, and the batch is then decoded event by event from the original text.
_FLOW_EVENT = re.compile(r'\{\s*"ph"\s*:\s*"[sft]"[^{}]*\}\s*,\s*')
# The same cut in Kineto's own layout: a literal start is found faster (30% less time over a trace).
# Removing flows only saves decoding them; a file laid out otherwise gets the general pattern.
_KINETO_FLOW_EVENT = re.compile(r'\{\n    "ph": "[sft]"[^{}]*\},\n  ')
_ANY_FLOW = re.compile(r'"ph"\s*:\s*"[sft]"')


# torch.profiler writes names verbatim: a record_function label or a module class holding a double
# quote comes out as "name": "say "hi"", invalid JSON. Kineto writes one member per line, so such a
# line is repaired by escaping the quotes between the member's opening and closing quote.
_MEMBER_LINE = re.compile(r'^(?P<head>\s*"[^"\\]*"\s*:\s*")(?P<text>.*)(?P<tail>"\s*,?\s*)$')
_BARE_QUOTE = re.compile(r'(?<!\\)"')
MAX_REPAIRS = 10_000


def repair_member_line(line: str) -> str | None:
    """The line with unescaped quotes inside its string value escaped; None when it is not such a line."""
    match = _MEMBER_LINE.match(line)
    if match is None or not _BARE_QUOTE.search(match.group("text")):
        return None
    return match.group("head") + _BARE_QUOTE.sub(r'\\"', match.group("text")) + match.group("tail")


def _last_event_boundary(text: str, start: int) -> re.Match | None:
    """The last "},{" between events after ``start``: found from the end, a brace at a time."""
    end = len(text)
    while True:
        brace = text.rfind("}", start + 1, end)
        if brace < 0:
            return None
        match = _EVENT_BOUNDARY.match(text, brace)
        if match is not None:
            return match
        end = brace


class EventStream:
    """Decode a Kineto JSON document one trace event at a time.

    The top-level object's small members (deviceProperties, distributedInfo, ...) are decoded
    whole; the ``traceEvents`` array is yielded element by element, so a large trace is never
    held as one list of dicts. Errors name the file and what is wrong with it.
    """

    # decoded text held at once: 128 KB parsed the HTA traces 4-6% faster than 512 KB (the batch stays in the
    # caches) and held 1 MB less of the events a batch decodes to
    CHUNK = 1 << 17

    def __init__(self, path: str):
        self.path = path
        self.members: dict[str, Any] = {}
        self._decoder = json.JSONDecoder()
        self._buffer = ""
        self._pos = 0
        self._eof = False
        # Line numbers are for error messages only: the newlines of the text already dropped from the
        # buffer are counted again from the file when one is needed (counting them on every drop cost
        # 3-4% of a parse). Repairs add characters, never newlines: (where in the stream, how many).
        self._dropped = 0
        self._repairs: list[tuple[int, int]] = []
        self._no_batch_before = 0  # a stream position: the events before it are decoded one by one (see _batch)
        self.repaired_lines = 0  # names with unescaped quotes, repaired (see repair_member_line)
        self._handle = TextChunks(path)

    def _fill(self) -> bool:
        if self._eof:
            return False
        try:
            chunk = self._handle.read(self.CHUNK)
        except (EOFError, OSError, zlib.error) as broken:
            raise TraceFormatError(f"{self.path}: the gzip stream is truncated or corrupt ({broken})") from None
        except UnicodeDecodeError:
            raise TraceFormatError(f"{self.path}: not a text JSON file") from None
        if not chunk:
            self._eof = True
            return False
        self._dropped += self._pos
        self._buffer = self._buffer[self._pos:] + chunk
        self._pos = 0
        return True

    def _peek(self) -> str:
        while True:
            while self._pos < len(self._buffer) and self._buffer[self._pos] in " \t\r\n":
                self._pos += 1
            if self._pos < len(self._buffer):
                return self._buffer[self._pos]
            if not self._fill():
                return ""

    def _expect(self, chars: str) -> str:
        found = self._peek()
        if not found or found not in chars:
            where = "the end of the file (it may be truncated)" if not found else repr(found)
            raise TraceFormatError(f"{self.path}: expected {' or '.join(map(repr, chars))} at line "
                                   f"{self._line()}, found {where}")
        self._pos += 1
        return found

    def _line(self) -> int:
        return self._where(self._pos)[0]

    def _where(self, pos: int) -> tuple[int, int]:
        line = 1 + self._dropped_newlines() + self._buffer.count("\n", 0, pos)
        return line, pos - self._buffer.rfind("\n", 0, pos)

    def _dropped_newlines(self) -> int:
        """Newlines in the text dropped from the buffer, read again from the file's start."""
        left = self._dropped - sum(added for at, added in self._repairs if at < self._dropped)
        count = 0
        with TextChunks(self.path) as handle:
            while left > 0:
                chunk = handle.read(min(left, self.CHUNK))
                if not chunk:
                    break
                count += chunk.count("\n")
                left -= len(chunk)
        return count

    def _value(self) -> Any:
        self._peek()
        while True:
            try:
                value, end = self._decoder.raw_decode(self._buffer, self._pos)
            except json.JSONDecodeError as broken:
                if self._fill():
                    continue  # the value may run past the buffer: read on, decide at the end
                if broken.pos >= len(self._buffer) - 1 or "Unterminated" in broken.msg:
                    raise TraceFormatError(f"{self.path}: the file ends inside a value at line {self._line()}; "
                                           "it is truncated") from None
                if self.repaired_lines < MAX_REPAIRS and self._repair(broken.pos):
                    continue
                line, column = self._where(broken.pos)
                raise TraceFormatError(f"{self.path}: not valid JSON at line {line}, column {column} "
                                       f"({broken.msg})") from None
            if end == len(self._buffer) and not self._eof and isinstance(value, (int, float)) and self._fill():
                continue  # a number may continue in the next chunk
            self._pos = end
            return value

    def _repair(self, pos: int) -> bool:
        """Repair the buffer's line holding ``pos`` when it is a member with bare quotes in its value."""
        start = self._buffer.rfind("\n", 0, pos) + 1
        end = self._buffer.find("\n", pos)
        end = len(self._buffer) if end < 0 else end
        fixed = repair_member_line(self._buffer[start:end])
        if fixed is None:
            return False
        self._buffer = self._buffer[:start] + fixed + self._buffer[end:]
        self._repairs.append((self._dropped + start, len(fixed) - (end - start)))
        self.repaired_lines += 1
        return True

    def events(self) -> Iterator[dict]:
        """Yield the trace events; the other members are in ``members`` once this is exhausted."""
        for batch in self.batches():
            for event in batch:
                if event.__class__ is dict:
                    yield event

    def batches(self) -> Iterator[list]:
        """The trace events in lists as they were decoded together (elements that are not objects
        included: skip them); a reader that loops over each list itself saves a generator step per event."""
        try:
            first = self._peek()
            if first == "[":  # a bare array of events
                yield from self._array()
                return
            self._expect("{")
            found_events = False
            if self._peek() == "}":
                self._pos += 1
            else:
                while True:
                    key = self._value()
                    if not isinstance(key, str):
                        raise TraceFormatError(f"{self.path}: expected a member name at line {self._line()}")
                    self._expect(":")
                    if key == "traceEvents":
                        found_events = True
                        if self._peek() != "[":
                            raise TraceFormatError(f"{self.path}: 'traceEvents' is not a list")
                        yield from self._array()
                    else:
                        self.members[key] = self._value()
                    if self._expect(",}") == "}":
                        break
            if not found_events:
                raise TraceFormatError(f"{self.path}: no 'traceEvents' list; this is not a Kineto/Chrome trace")
        finally:
            self._handle.close()

    def _batch(self) -> list[dict]:
        """Decode many whole events with one C-level json.loads, up to the last "},{" in the buffer.

        A boundary that falls inside a string makes that parse fail; then nothing is taken and
        the events are decoded one by one, so the shortcut never changes the result. They are up to
        the failed batch's end: a name the profiler wrote with bare quotes fails every batch holding it,
        and trying again at each event would parse that megabyte once per event before it.
        """
        if self._dropped + self._pos < self._no_batch_before:
            return []
        if self._buffer[self._pos:self._pos + 1] != "{" or len(self._buffer) - self._pos < self.CHUNK // 4:
            self._peek()
            if not self._eof and len(self._buffer) - self._pos < self.CHUNK // 4:
                self._fill()
        match = _last_event_boundary(self._buffer, self._pos)
        if match is None:
            return []
        text, cut = _KINETO_FLOW_EVENT.subn("", self._buffer[self._pos:match.start() + 1])
        if not cut and _ANY_FLOW.search(text):  # flow events laid out otherwise
            text = _FLOW_EVENT.sub("", text)
        try:
            events = json.loads("[" + text + "]")
        except json.JSONDecodeError:
            self._no_batch_before = self._dropped + match.start()
            return []
        self._pos = match.start() + 1
        self._expect(",")
        return events

    def _array(self) -> Iterator[list]:
        self._expect("[")
        if self._peek() == "]":
            self._pos += 1
            return
        while True:
            batch = self._batch()
            if batch:
                yield batch
                if not self._eof:  # what is left is an event the chunk's end cut: read on before decoding it
                    self._fill()
            yield [self._value()]
            if self._expect(",]") == "]":
                return
            if self._pos > self.CHUNK:  # drop what has been decoded
                self._dropped += self._pos
                self._buffer = self._buffer[self._pos:]
                self._pos = 0
