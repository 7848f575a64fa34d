"""What the C heap keeps after the work that needed it: given back to the system.

glibc's malloc keeps freed memory for reuse. Its heaps shrink only from their top, so a long
input's many medium buffers, freed in the middle of a heap, stayed resident with no client
left: 3-62 MiB after one long input (``test_attacks`` 32.4, six runs of its module), and
``malloc_trim`` gave back all but 1-3 MiB of it (three of those runs). Both functions do
nothing where the C library is not glibc.
"""

from __future__ import annotations

import ctypes
import functools

MMAP_THRESHOLD = 1 << 20
"""Buffers this large or larger are mapped on their own by glibc's malloc (``mallopt``):
onnxruntime's arena regions past its first, and long audio. With 256 KiB memory came back
as well, at more system calls; with 4 MiB, 47 MiB stayed (one run each)."""


def map_large_buffers() -> None:
    """Make glibc map every buffer of ``MMAP_THRESHOLD`` or more on its own, so that freeing
    it gives it back to the system. By default the threshold rises to the largest buffer
    freed so far (up to 32 MiB), and from then on such buffers come from heaps that shrink
    only from their top: the session-abuse family left 122-126 MiB that way (and 290 MiB
    once onnxruntime's arena gave its regions back to glibc), kept with no client connected;
    with this, 4 MiB."""
    m_mmap_threshold = -3
    libc = _glibc()
    if libc is not None:
        libc.mallopt(m_mmap_threshold, MMAP_THRESHOLD)


def trim() -> None:
    """Give the free pages inside every heap back to the system (0.2-0.4 ms in a server of
    260 MiB): the compute worker does it each time it falls idle."""
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    """The C library where it is glibc (it has ``malloc_trim``), else None."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return None
    return libc if hasattr(libc, "malloc_trim") else None
