"""Append-only segment files holding the stored form of groups.

A group's payload is written once, read when its batch is formed (and by inspection), and
deleted in roughly arrival order. In SQLite every payload byte would be written twice (to the
WAL, then into the database by a checkpoint), one write call per 4 KiB page. Here a payload is
one ``write`` to the end of the current segment file; SQLite keeps only its :class:`Extent`
(segment, offset, length, CRC-32) in the group's row, committed after the payload is written.

Durability follows the store's ``synchronous`` setting: without ``fsync`` a written payload is
in the page cache before the row that points to it commits, so it survives a crash of the
process (``kill -9``); with ``fsync`` it is also on disk, so it survives power loss.

Segments are reference-counted by the rows that point to them: a segment that is not the one
being written and has no rows left is deleted. Bytes of rows that never committed (a rolled
back transaction) stay as unreferenced garbage until their segment is deleted.
"""

from __future__ import annotations

import collections
import contextlib
import os
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

try:  # ISA-L's CRC-32 is faster than zlib's on large buffers
    from isal.isal_zlib import crc32
except ImportError:  # pragma: no cover - isal is a dependency; zlib is the fallback
    from zlib import crc32

#: A new segment is started once the current one reaches this size.
DEFAULT_SEGMENT_BYTES = 64 * 1024 * 1024
_SUFFIX = ".log"


class PayloadError(RuntimeError):
    """A payload cannot be written or read back intact (disk full, I/O error, corruption)."""


@dataclass(frozen=True, slots=True)
class Extent:
    """Where one payload lives: ``length`` bytes at ``offset`` of segment ``segment``."""

    segment: int
    offset: int
    length: int
    crc: int


class PayloadLog:
    """The segment files under one directory; used by one process (the store's owner).

    ``append`` and ``read`` are called from the request thread; ``sync`` may be called from
    another thread (the store's checkpointer).
    """

    def __init__(self, directory: Path, *, fsync: bool = False, segment_bytes: int = DEFAULT_SEGMENT_BYTES):
        self.directory = Path(directory)
        self.fsync = fsync
        self.segment_bytes = segment_bytes
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise PayloadError(f"cannot create {self.directory}: {exc.strerror or exc}") from None
        self._refs: dict[int, int] = {}
        self._pending: collections.Counter[int] = collections.Counter()
        self._readers: dict[int, int] = {}
        self._lock = threading.Lock()
        self._sync_lock = threading.Lock()
        self._segment = max(self.segments(), default=0) + 1
        self._fd: int | None = None
        self._end = 0
        #: Descriptors of segments rotated out with writes not yet flushed (see sync()).
        self._unsynced: list[int] = []

    # ------------------------------------------------------------------ files

    def path(self, segment: int) -> Path:
        return self.directory / f"{segment:010d}{_SUFFIX}"

    def segments(self) -> list[int]:
        """Numbers of the segment files present, ascending."""
        found = []
        for entry in self.directory.iterdir():
            if entry.suffix == _SUFFIX and entry.stem.isdigit():
                found.append(int(entry.stem))
        return sorted(found)

    def size(self, segment: int) -> int:
        """Bytes in a segment file; 0 when it does not exist."""
        try:
            return self.path(segment).stat().st_size
        except FileNotFoundError:
            return 0

    # ------------------------------------------------------------------ writing

    def append(self, data: bytes) -> Extent:
        """Write ``data`` at the end of the current segment; raises :class:`PayloadError`."""
        with self._lock:
            if self._fd is None or self._end >= self.segment_bytes:
                self._rotate()
            fd, offset = self._fd, self._end
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
            except OSError as exc:
                self._end = os.fstat(fd).st_size  # whatever landed is garbage after this point
                raise PayloadError(f"cannot write group data: {exc.strerror or exc}") from None
            self._end = offset + len(data)
            self._pending[self._segment] += 1
            return Extent(self._segment, offset, len(data), crc32(data))

    def _rotate(self) -> None:
        if self._fd is not None:
            old = self._segment
            # Flushed by the next sync(), not here: this runs on the request path.
            self._unsynced.append(self._fd)
            self._fd = None
            self._segment += 1
            self._collect(old)
        try:
            self._fd = os.open(self.path(self._segment), os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as exc:
            raise PayloadError(
                f"cannot create a segment in {self.directory}: {exc.strerror or exc}"
            ) from None
        self._end = os.fstat(self._fd).st_size

    def sync(self) -> None:
        """Flush everything written so far to disk: the segment being written and any rotated out
        since the last sync.

        The flush runs without holding the lock, so appends on the request thread go on while
        another thread (the checkpointer) waits for the disk. Raises :class:`PayloadError` when
        the disk reports an error; the segments that failed are flushed again by the next call.
        """
        # One flush at a time: a commit's flush (synchronous=full) must not return while segments
        # it wrote to are still being flushed by the checkpointer.
        with self._sync_lock:
            with self._lock:
                try:
                    current = os.dup(self._fd) if self._fd is not None else None
                except OSError as exc:
                    raise PayloadError(f"cannot flush group data: {exc.strerror or exc}") from None
                rotated, self._unsynced = self._unsynced, []
            failed: list[int] = []
            error: OSError | None = None
            for fd in rotated:
                try:
                    os.fdatasync(fd)
                except OSError as exc:
                    error = error or exc
                    failed.append(fd)
                else:
                    os.close(fd)
            if current is not None:
                try:
                    os.fdatasync(current)
                except OSError as exc:
                    error = error or exc
                finally:
                    os.close(current)
            if failed:
                with self._lock:
                    self._unsynced[:0] = failed
        if error is not None:
            raise PayloadError(f"cannot flush group data: {error.strerror or error}") from None

    # ------------------------------------------------------------------ reading

    def read(self, extent: Extent) -> bytes:
        """The payload at ``extent``; raises :class:`PayloadError` when missing or corrupt."""
        fd = self._reader(extent.segment)
        try:
            data = os.pread(fd, extent.length, extent.offset)
        except OSError as exc:
            raise PayloadError(f"cannot read group data: {exc.strerror or exc}") from None
        if len(data) != extent.length or crc32(data) != extent.crc:
            raise PayloadError(
                f"group data in {self.path(extent.segment).name} at {extent.offset} is damaged "
                "(the disk lost or changed it)"
            )
        return data

    def _reader(self, segment: int) -> int:
        if segment == self._segment and self._fd is not None:
            return self._fd
        fd = self._readers.get(segment)
        if fd is None:
            try:
                fd = os.open(self.path(segment), os.O_RDONLY)
            except OSError as exc:
                raise PayloadError(
                    f"group data segment {segment} is missing: {exc.strerror or exc}"
                ) from None
            self._readers[segment] = fd
        return fd

    # ------------------------------------------------------------------ references

    def set_references(self, counts: Mapping[int, int]) -> None:
        """Start-up: the rows per segment as committed; deletes segment files nothing points to."""
        self._refs = {seg: n for seg, n in counts.items() if n > 0}
        for segment in self.segments():
            if segment not in self._refs and segment != self._segment:
                self._delete(segment)

    def settle(self, appended: Iterable[int], dropped: Iterable[int], committed: bool) -> None:
        """A transaction ended: rows pointing into ``appended`` segments were added (one entry
        per row) and rows in ``dropped`` deleted, if ``committed``; segments left without rows
        or pending writes are deleted (never the one being written).
        """
        touched = set()
        for segment in appended:
            self._pending[segment] -= 1
            if committed:
                self._refs[segment] = self._refs.get(segment, 0) + 1
            touched.add(segment)
        if committed:
            for segment in dropped:
                self._refs[segment] = self._refs.get(segment, 0) - 1
                touched.add(segment)
        for segment in touched:
            self._collect(segment)

    def _collect(self, segment: int) -> None:
        if self._refs.get(segment, 0) <= 0:
            self._refs.pop(segment, None)
            if not self._pending.get(segment) and segment != self._segment:
                self._pending.pop(segment, None)
                self._delete(segment)

    def clear(self) -> None:
        """Delete every segment (after a committed reset) and start a fresh one."""
        with self._lock:
            self._close_written()
            self._refs.clear()
            self._pending.clear()
            for segment in self.segments():
                self._delete(segment)
            self._segment += 1

    def _delete(self, segment: int) -> None:
        fd = self._readers.pop(segment, None)
        if fd is not None:
            os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            self.path(segment).unlink()

    def _close_written(self) -> None:
        """Close the segment being written and those rotated out unflushed (lock held)."""
        for fd in [self._fd, *self._unsynced]:
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._fd = None
        self._unsynced.clear()

    def close(self) -> None:
        with self._lock:
            self._close_written()
            for fd in self._readers.values():
                with contextlib.suppress(OSError):
                    os.close(fd)
            self._readers.clear()
