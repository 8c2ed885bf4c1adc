"""Resident memory of a process (Linux): its peak, and giving back pages of read-only libraries.

Numba's import maps LLVM (`libllvmlite.so`, about 170 MB of code) and its start-up and kernel
loading touch most of it: about 90 MB of the library's code pages become resident although the
bot needs LLVM only while Numba loads its cached kernels. `release_library_pages` asks the kernel
to drop the resident pages of a library's read-only, unmodified mappings (`madvise`
`MADV_DONTNEED`): they are exact copies of the file, so a later access simply reads them back
from the page cache; writable mappings and pages the loader modified (relocations) are never
touched. Elsewhere than Linux both functions do nothing. Imports nothing from the package.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import threading
from collections.abc import Iterator

__all__ = ["peak_rss_mb", "release_library_pages", "releasing_library_pages", "rss_mb"]

MADV_DONTNEED = 4  # linux/mman.h


def _status_field(field: str, pid: int | str = "self") -> float | None:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024.0  # kB -> MiB
    except (OSError, ValueError, IndexError):
        return None
    return None


def peak_rss_mb(pid: int | str = "self") -> float | None:
    """Peak resident memory (VmHWM) of a process in MiB, None where /proc cannot tell."""
    return _status_field("VmHWM", pid)


def rss_mb(pid: int | str = "self") -> float | None:
    """Current resident memory (VmRSS) of a process in MiB, None where /proc cannot tell."""
    return _status_field("VmRSS", pid)


def _clean_read_only_mappings(name_part: str) -> list[tuple[int, int]]:
    """`(start, end)` of this process's mappings of files whose path contains `name_part`,
    mapped without write permission, with no private dirty or anonymous pages."""
    mappings: list[list[int]] = []
    current: list[int] | None = None
    with open("/proc/self/smaps", encoding="utf-8", errors="replace") as handle:
        for line in handle:
            fields = line.split()
            if not fields:
                continue
            # a mapping's first line: range perms offset dev inode path
            if not fields[0].endswith(":"):
                current = None
                if len(fields) >= 6 and name_part in fields[5] and "w" not in fields[1]:
                    start, end = (int(bound, 16) for bound in fields[0].split("-"))
                    current = [start, end, 0]
                    mappings.append(current)
            elif current is not None and fields[0] in ("Private_Dirty:", "Anonymous:"):
                current[2] += int(fields[1])
    return [(start, end) for start, end, modified in mappings if modified == 0]


def release_library_pages(name_part: str) -> int:
    """Drop the resident pages of read-only, unmodified mappings of matching libraries.

    Args:
        name_part: a part of the library's path, e.g. `"libllvmlite"`.

    Returns:
        Bytes of address space advised (0 where nothing matched or on other systems).
    """
    try:
        mappings = _clean_read_only_mappings(name_part)
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    except OSError:
        return 0
    madvise = libc.madvise
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    released = 0
    for start, end in mappings:
        if madvise(start, end - start, MADV_DONTNEED) == 0:
            released += end - start
    return released


@contextlib.contextmanager
def releasing_library_pages(name_part: str, every_s: float = 0.02) -> Iterator[None]:
    """Release a library's pages (`release_library_pages`) every `every_s` seconds while the
    block runs, and once more when it ends.

    Loading Numba's kernels touches much of LLVM's code, and how much of it becomes resident
    depends on what the page cache holds (a fault maps the cached pages around it too): 40 MiB
    more in a fresh clone's first run than on a warm machine. Releasing during the loading keeps
    the resident share of the library, and so the process's peak, to what a few milliseconds of
    loading touch.
    """
    stop = threading.Event()

    def release_until_stopped() -> None:
        while not stop.wait(every_s):
            release_library_pages(name_part)

    thread = threading.Thread(target=release_until_stopped, name="release-library-pages",
                              daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        release_library_pages(name_part)
