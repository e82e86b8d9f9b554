//! Which allocator gives the memory back, most specific first: the frames of
//! a sampled purging `madvise()` or `munmap()` (call kind `purge`). A frame
//! of the allocator's own library names it even without symbols (Debian's
//! libjemalloc2 exports only the malloc API); the Go runtime is named by
//! its functions, which every Go binary carries.

use crate::sources::{KnownSource, Pattern};

/// What a fix gives back: the system calls, the TLB shootdowns and the
/// refaults of the memory given back, as the public cases measured them.
pub const PURGE_GAIN: &str = "the purge calls, a TLB shootdown per call on every CPU that ran the \
                              process's threads, and the refault of every page given back: about \
                              18 % of a jemalloc service's CPU at dirty_decay_ms:0, a 1.8x slower \
                              Python loop under jemalloc with dirty_decay_ms:0 here";

pub const SOURCES: &[KnownSource] = &[
    KnownSource {
        id: "jemalloc_decay",
        frames: &[
            Pattern::FunctionContains("pages_purge"),
            Pattern::FunctionContains("je_extent_dalloc"),
            Pattern::Module("libjemalloc.so"),
        ],
        cause: "jemalloc gives dirty pages back as soon as they are freed (MALLOC_CONF \
                dirty_decay_ms:0 or muzzy_decay_ms:0, or a short decay without background \
                threads, so the purge runs in the freeing thread): each free of an extent is a \
                madvise, and the next allocation faults the pages in again.",
        fix: "Let jemalloc keep freed pages a while and purge them off the application's \
              threads: MALLOC_CONF=background_thread:true,dirty_decay_ms:10000,muzzy_decay_ms:10000 \
              (jemalloc's defaults, with the purge on its own thread; a Rust binary linking \
              tikv-jemallocator reads _RJEM_MALLOC_CONF), or a decay time no shorter than the \
              allocation pattern's period.",
        expected_gain: Some(PURGE_GAIN),
        example: ("je_malloc", "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"),
    },
    KnownSource {
        id: "go_scavenger",
        frames: &[
            Pattern::Function("runtime/debug.FreeOSMemory"),
            Pattern::FunctionPrefix("runtime.sysUnused"),
            Pattern::FunctionContains("scavenge"),
            Pattern::Function("runtime.madvise"),
        ],
        cause: "The Go runtime returns the heap's free pages to the kernel (madvise \
                MADV_DONTNEED) and faults them in again: debug.FreeOSMemory() called in a loop \
                (each call a full GC and a scavenge of every free page), or a GOMEMLIMIT the live \
                heap keeps reaching, which makes the scavenger run hot.",
        fix: "Call debug.FreeOSMemory() at most after a large, rare drop of the heap, never in a \
              loop or a ticker; leave GOMEMLIMIT well above the live heap (or unset), and raise \
              GOGC if the heap grows and shrinks every cycle. GODEBUG=madvdontneed=0 makes the \
              runtime use MADV_FREE, which defers the work to memory pressure.",
        expected_gain: Some(PURGE_GAIN),
        example: ("runtime.sysUnusedOS", "/usr/local/bin/app"),
    },
    KnownSource {
        id: "tcmalloc_release",
        frames: &[
            Pattern::FunctionContains("SystemRelease"),
            Pattern::FunctionContains("ReleaseToSystem"),
            Pattern::Module("libtcmalloc"),
        ],
        cause: "tcmalloc releases free spans to the kernel (madvise MADV_DONTNEED) eagerly: a \
                high TCMALLOC_RELEASE_RATE, or MallocExtension::ReleaseFreeMemory called often.",
        fix: "Lower TCMALLOC_RELEASE_RATE (0 releases only on demand), and call \
              ReleaseFreeMemory/ReleaseMemoryToSystem only after a large, rare drop of the heap.",
        expected_gain: Some(PURGE_GAIN),
        example: (
            "TCMalloc_SystemRelease",
            "/usr/lib/x86_64-linux-gnu/libtcmalloc.so.4",
        ),
    },
    KnownSource {
        id: "mimalloc_purge",
        frames: &[
            Pattern::FunctionContains("mi_os_purge"),
            Pattern::FunctionContains("mi_os_reset"),
            Pattern::Module("libmimalloc"),
        ],
        cause: "mimalloc purges freed OS pages at once (MIMALLOC_PURGE_DELAY=0, or \
                MIMALLOC_RESET_DELAY=0 before 2.1).",
        fix: "MIMALLOC_PURGE_DELAY=10 (its default, in ms) or longer, or \
              MIMALLOC_ARENA_EAGER_COMMIT=1 so that arenas stay committed.",
        expected_gain: Some(PURGE_GAIN),
        example: ("_mi_os_purge", "/usr/lib/x86_64-linux-gnu/libmimalloc.so.2"),
    },
    KnownSource {
        id: "glibc_malloc_trim",
        frames: &[Pattern::Function("malloc_trim")],
        cause: "The program calls glibc's malloc_trim() often: each call walks every arena and \
                gives back every free page with madvise(MADV_DONTNEED), which the next \
                allocations fault in again.",
        fix: "Call malloc_trim() only after a large, rare drop of the heap (or never: glibc \
              trims the top of the heap by itself past M_TRIM_THRESHOLD).",
        expected_gain: Some(PURGE_GAIN),
        example: ("malloc_trim", "/usr/lib/x86_64-linux-gnu/libc.so.6"),
    },
    KnownSource {
        id: "glibc_malloc",
        frames: &[
            // glibc's own functions by name only: its madvise() and munmap()
            // wrappers, in every process's stack, are libc.so's too
            Pattern::Function("free"),
            Pattern::Function("__libc_free"),
            Pattern::Function("realloc"),
            Pattern::FunctionPrefix("munmap_chunk"),
            Pattern::FunctionContains("heap_trim"),
            Pattern::FunctionContains("systrim"),
        ],
        cause: "glibc malloc gives memory back on free: a buffer at or above the mmap threshold \
                is its own mapping, unmapped on every free() (buffers above 32 MiB always; smaller \
                ones while the adaptive threshold is below their size), and a thread's arena \
                shrinks its heap with madvise(MADV_DONTNEED) when its top passes \
                M_TRIM_THRESHOLD.",
        fix: "Set glibc's thresholds, which also turns the adaptive mmap threshold off: \
              MALLOC_MMAP_THRESHOLD_ above the buffers the program allocates and frees in a loop \
              (e.g. 67108864), MALLOC_TRIM_THRESHOLD_ above the heap's swing (e.g. 268435456), \
              or mallopt(M_MMAP_THRESHOLD/M_TRIM_THRESHOLD) in the program; or keep the buffers \
              and reuse them.",
        expected_gain: Some(PURGE_GAIN),
        example: ("free", "/usr/lib/x86_64-linux-gnu/libc.so.6"),
    },
];
