"""purge: calls that give memory back to the kernel (madvise by advice,
munmap) and their bytes (allocator purge storms)."""

import mmap

CALLS = "slowpath_memory_purge_calls_total"
BYTES = "slowpath_memory_purge_bytes_total"
N = 1000
KIB64 = 64 * 1024

PRODUCIBLE = None

# N rounds of MADV_DONTNEED, MADV_FREE and MADV_PAGEOUT on 64 KiB and a
# munmap of 128 KiB (sp-workload purge-raw); the dynamic loader unmaps its
# cache once at start
WORKLOAD = ["purge-raw", N]


def workload_counted(own):
    return (own(CALLS, syscall="madvise", advice="dontneed") == N
            and own(CALLS, syscall="madvise", advice="free") == N
            and own(CALLS, syscall="madvise", advice="other") == N
            and own(BYTES, syscall="madvise") == 3 * N * KIB64
            and own(CALLS, syscall="munmap") == N + 1)


def own_calls():
    region = mmap.mmap(-1, KIB64)
    for _ in range(N):
        region.madvise(mmap.MADV_DONTNEED)
    region.close()


def kernel_counted(c):
    return c["purge_calls"][0] >= N and c["purge_bytes"][0] >= N * KIB64


# static binaries in the guests: no loader, so exactly N unmaps
GUEST_WORKLOADS = """
section w_purge sp-workload purge-raw 2000
"""


def guest_exact(run):
    """Each purge kind 2,000 times with its bytes, munmap 2,000 times of
    128 KiB; MADV_WILLNEED not counted (MADV_PAGEOUT, which 5.4+ knows, is
    counted as made wherever the kernel refuses it)."""
    for advice in ("dontneed", "free", "other"):
        assert run.own(CALLS, "w_purge", syscall="madvise", advice=advice) == 2000, advice
        assert run.own(BYTES, "w_purge", syscall="madvise", advice=advice) == 2000 * KIB64, advice
    assert run.own(CALLS, "w_purge", syscall="munmap") == 2000
    assert run.own(BYTES, "w_purge", syscall="munmap") == 2000 * 2 * KIB64


# None: the busy node's programs purge nothing beyond the loader's one unmap,
# below the series threshold; test_series_budget.py checks they add no series
BUSY_NODE = None

DASHBOARD_WORKLOADS = [["purge-raw", 20000]]
DASHBOARD_UNIT_WORKLOADS = [["purge-raw", 5000]]
DASHBOARD_EMPTY_ALLOWED = set()
DASHBOARD_EMPTY_UNLESS_PRODUCIBLE = set()
DASHBOARD_ZERO_NORMAL = set()
