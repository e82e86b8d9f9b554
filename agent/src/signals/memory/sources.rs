//! Whose code faults in huge pages (call kind `thp_fault`), most specific
//! first: the frames of a sampled THP fault.

use crate::sources::{KnownSource, Pattern};

/// Whose code faults in huge pages, most specific first.
pub const SOURCES: &[KnownSource] = &[
    KnownSource {
        id: "jvm_pretouch",
        frames: &[
            Pattern::FunctionContains("pretouch"),
            Pattern::FunctionContains("PretouchTask"),
        ],
        cause: "The JVM pre-touches its whole heap (-XX:+AlwaysPreTouch: os::pretouch_memory \
                in libjvm): with huge pages for the heap (-XX:+UseTransparentHugePages, or THP \
                enabled=always) every 2 MiB is a huge-page fault, and compaction when memory \
                is fragmented.",
        fix: "Expected once at start: keep it where the heap should be huge pages and start-up \
              time does not matter (prefer THP enabled=madvise with \
              -XX:+UseTransparentHugePages, so only the heap gets them); drop \
              -XX:+AlwaysPreTouch where start-up stalls or start-up compaction hurt.",
        expected_gain: None,
        example: (
            "os::pretouch_memory(void*, void*, unsigned long)",
            "/usr/lib/jvm/java-17-openjdk-amd64/lib/server/libjvm.so",
        ),
    },
    KnownSource {
        id: "jvm_heap",
        frames: &[Pattern::Module("libjvm.so")],
        cause: "The JVM's heap is backed by transparent huge pages (-XX:+UseTransparentHugePages, \
                or THP enabled=always): its GC and allocation fault huge pages in as they \
                touch new heap regions.",
        fix: "With enabled=always every JVM gets huge pages whether it gains or not: set \
              enabled=madvise and pass -XX:+UseTransparentHugePages to the JVMs with large \
              heaps; add -XX:+AlwaysPreTouch to take the faults at start, not under load.",
        expected_gain: Some(
            "php-fpm under load with THP enabled=always: turning THP off halved system time",
        ),
        example: (
            "G1ParScanThreadState::copy_to_survivor_space",
            "/usr/lib/jvm/java-17-openjdk-amd64/lib/server/libjvm.so",
        ),
    },
    KnownSource {
        id: "jemalloc_arenas",
        frames: &[
            Pattern::Module("libjemalloc"),
            Pattern::FunctionPrefix("je_"),
        ],
        cause: "jemalloc's arenas fault in huge pages as they grow (its thp/metadata_thp \
                options, or THP enabled=always).",
        fix: "MALLOC_CONF=thp:never,metadata_thp:disabled for this process, or THP \
              enabled=madvise; longer dirty_decay_ms/muzzy_decay_ms make jemalloc re-fault \
              fresh memory less often.",
        expected_gain: None,
        example: (
            "je_extent_alloc_wrapper",
            "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2",
        ),
    },
    KnownSource {
        id: "glibc_malloc_arenas",
        frames: &[
            Pattern::Function("sysmalloc"),
            Pattern::Function("int_malloc"),
            Pattern::Function("int_realloc"),
            Pattern::Function("int_memalign"),
            Pattern::Function("libc_malloc"),
            Pattern::Function("libc_calloc"),
            Pattern::Function("libc_realloc"),
            Pattern::Function("malloc"),
            Pattern::Function("calloc"),
            Pattern::Function("realloc"),
            Pattern::Function("malloc_consolidate"),
        ],
        cause: "glibc malloc grows its heap and thread arenas into memory THP backs with huge \
                pages: {caller} allocates fresh memory at a high rate.",
        fix: "Keep freed memory instead of returning and re-faulting it \
              (GLIBC_TUNABLES=glibc.malloc.trim_threshold=...:glibc.malloc.mmap_threshold=...), \
              cap arenas (glibc.malloc.arena_max), reuse buffers, or set THP enabled=madvise.",
        expected_gain: None,
        example: ("_int_malloc", "/usr/lib/x86_64-linux-gnu/libc.so.6"),
    },
];
