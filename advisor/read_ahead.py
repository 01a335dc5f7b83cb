"""A file's text in chunks, read and gunzipped one chunk ahead of its reader in a thread of its own.

Reading and inflating release the GIL, so on a second core they cost the reader little: for a
gzipped trace they are a seventh of its parse, which otherwise waits on each chunk in turn.
"""

from __future__ import annotations

import codecs
import queue
import sys
import threading
import zlib
from typing import Iterator

AHEAD = 2  # chunks read before the reader asks for them
# While reading ahead, the GIL changes hands every 0.5 ms rather than every 5: the reading thread
# needs it for a moment between inflating blocks, and would otherwise wait out the decoding thread's
# turns and fall behind it (measured: the reader waited 30 ms of a 230 ms parse, then 8-12 ms).
SWITCH_INTERVAL_S = 0.0005
GZIP_WBITS = zlib.MAX_WBITS | 16  # a gzip header and trailer (its CRC checked) around the deflate stream


class ReadAhead:
    """``read()`` returns the next chunk of text ("" at the end) and raises what reading raised."""

    def __init__(self, path: str, chunk_size: int, gzipped: bool):
        self._handle = open(path, "rb")
        self._chunk_size = chunk_size
        self._gzipped = gzipped
        self._chunks: queue.Queue = queue.Queue(maxsize=AHEAD)
        self._stop = threading.Event()
        self._text = codecs.getincrementaldecoder("utf-8")()
        self._thread: threading.Thread | None = None

    def read(self) -> str:
        if self._thread is None:  # started by the first read: a stream never read holds no thread
            self._switch_interval = sys.getswitchinterval()
            sys.setswitchinterval(SWITCH_INTERVAL_S)
            self._thread = threading.Thread(target=self._read_ahead, name="advisor-read-ahead", daemon=True)
            self._thread.start()
        data = self._chunks.get()
        if isinstance(data, BaseException):
            raise data
        return self._text.decode(data, final=not data)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            while self._thread.is_alive():  # empty the queue so that a waiting put() sees the stop
                try:
                    self._chunks.get(timeout=0.05)
                except queue.Empty:
                    pass
            if sys.getswitchinterval() == SWITCH_INTERVAL_S:  # unless someone else changed it since
                sys.setswitchinterval(self._switch_interval)
        self._handle.close()

    def _read_ahead(self) -> None:
        try:
            for data in (self._inflated() if self._gzipped else iter(lambda: self._handle.read(self._chunk_size), b"")):
                if self._stop.is_set():
                    return
                self._put(data)
            self._put(b"")
        except BaseException as broken:  # noqa: BLE001 - handed to the reader, who raises it
            self._put(broken)

    def _inflated(self) -> Iterator[bytes]:
        """The gzip members' contents, a chunk at a time, inflated by zlib itself: the gzip module
        inflates 8 KB at a time from Python, taking the GIL back a hundred times a megabyte."""
        inflate = zlib.decompressobj(GZIP_WBITS)
        pending = b""
        while True:
            if not pending:
                pending = self._handle.read(self._chunk_size // 8)  # traces compress 6-13x
                if not pending:
                    if not inflate.eof:
                        raise EOFError("the file ends before the gzip stream's end marker")
                    return
            try:
                data = inflate.decompress(pending, self._chunk_size)  # no more than a chunk: the reader's batches stay small
                pending = inflate.unconsumed_tail
                if inflate.eof and inflate.unused_data:  # another gzip member follows
                    pending, inflate = inflate.unused_data, zlib.decompressobj(GZIP_WBITS)
            except zlib.error as broken:
                raise OSError(f"not a valid gzip stream: {broken}") from None
            if data:
                yield data

    def _put(self, item: bytes | BaseException) -> None:
        while not self._stop.is_set():
            try:
                self._chunks.put(item, timeout=0.05)
                return
            except queue.Full:
                continue
