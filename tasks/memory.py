"""Freed memory kept for reuse by the process: glibc's allocator thresholds, set once.

glibc serves each allocation above its mmap threshold (128 KiB at start) with a mapping of its
own, returned to the kernel when freed, and gives back the heap's free top above its trim
threshold; it raises both only as freed blocks show it larger sizes, and never past 32 MiB. The
statistics allocate and free many arrays of a few hundred KiB to tens of MiB, so every one of
them costs fresh pages (minor page faults, kernel time), the first ``audit_frame`` of a process
far more than the second (benchmarks/results/start_cost.md). Both thresholds set at glibc's own
ceiling (mmap 32 MiB, trim twice that, as glibc pairs them) give the first audit the second
one's allocator. Not set where the C library is not glibc, nor where the environment sets either threshold (``MALLOC_MMAP_THRESHOLD_``,
``MALLOC_TRIM_THRESHOLD_``).
"""

from __future__ import annotations

import ctypes
import functools
import os
import platform

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters (malloc.h)
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 * 1024 * 1024  # glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit systems
TRIM_THRESHOLD = 2 * MMAP_THRESHOLD
ENVIRONMENT = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")


@functools.cache
def keep_freed_memory() -> bool:
    """Set glibc's mmap and trim thresholds (once per process); whether they were set."""
    if platform.libc_ver()[0] != "glibc" or any(name in os.environ for name in ENVIRONMENT):
        return False
    mallopt = ctypes.CDLL(None).mallopt
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
        mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    )
