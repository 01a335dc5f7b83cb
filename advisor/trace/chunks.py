"""A file's UTF-8 text a chunk at a time, gunzipped by zlib itself when the file is gzipped.

The gzip module inflates 8 KB at a time from Python: reading a gzipped trace through it was 8%
of its parse. Here zlib inflates up to a chunk per call. Newlines are left as written (no
universal-newline translation), so positions in the text are positions in the file's text.
Reading raises EOFError for a gzip stream cut short, zlib.error or OSError for a corrupt one,
UnicodeDecodeError for bytes that are not UTF-8.
"""

from __future__ import annotations

import codecs
import zlib

GZIP_WBITS = zlib.MAX_WBITS | 16  # a gzip header and trailer (its CRC checked) around the deflate stream
GZIP_MAGIC = b"\x1f\x8b"


class TextChunks:
    def __init__(self, path: str):
        self._handle = open(path, "rb")
        self._inflate = zlib.decompressobj(GZIP_WBITS) if self._handle.peek(2)[:2] == GZIP_MAGIC else None
        self._pending = b""  # compressed bytes read and not yet inflated
        self._text = codecs.getincrementaldecoder("utf-8")()

    def read(self, size: int) -> str:
        """Up to about ``size`` characters of text; "" at the end of the file."""
        while True:
            data = self._inflated(size) if self._inflate is not None else self._handle.read(size)
            text = self._text.decode(data, final=not data)
            if text or not data:
                return text

    def close(self) -> None:
        self._handle.close()

    def __enter__(self) -> TextChunks:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _inflated(self, size: int) -> bytes:
        while True:
            if not self._pending:
                self._pending = self._handle.read(max(size // 8, 1))  # traces compress 6-13x
                if not self._pending:
                    if not self._inflate.eof:
                        raise EOFError("the file ends before the gzip stream's end marker")
                    return b""
            data = self._inflate.decompress(self._pending, size)
            self._pending = self._inflate.unconsumed_tail
            if self._inflate.eof and self._inflate.unused_data:  # another gzip member follows
                self._pending, self._inflate = self._inflate.unused_data, zlib.decompressobj(GZIP_WBITS)
            if data:
                return data
