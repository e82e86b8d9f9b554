//! Where time-zone file checks come from, most specific first: the frames
//! of a sampled `stat` of `/etc/localtime` (call kind `tzfile`).

use crate::sources::{KnownSource, Pattern};

/// What the fix removes, as measured for this signal (C `localtime()` in a
/// loop, glibc 2.36, AMD EPYC with SRSO mitigations).
pub const TZ_GAIN: &str = "one system call less per call: a C localtime() took 3.9-4.9 us with \
                           TZ unset and 0.11-0.14 us with TZ=:/etc/localtime";

pub const SOURCES: &[KnownSource] = &[
    KnownSource {
        id: "perl_localtime",
        frames: &[
            Pattern::FunctionPrefix("Perl_pp_gmtime"),
            Pattern::FunctionPrefix("Perl_pp_localtime"),
            Pattern::FunctionPrefix("Perl_localtime64"),
            Pattern::Module("libperl.so"),
        ],
        cause: "Perl's localtime() (and POSIX::strftime, POSIX::mktime) calls the C library's \
                tzset() before each conversion; with TZ unset, glibc stats /etc/localtime on \
                every call to see whether the zone changed.",
        fix: "Set TZ=:/etc/localtime (or the zone, e.g. TZ=Europe/Berlin) in the service's \
              environment, or $ENV{TZ} = ':/etc/localtime' at the start of the script: \
              glibc then reads the zone once.",
        expected_gain: Some(TZ_GAIN),
        example: (
            "Perl_pp_gmtime",
            "/usr/lib/x86_64-linux-gnu/libperl.so.5.36.0",
        ),
    },
    KnownSource {
        id: "glibc_localtime",
        frames: &[
            Pattern::Function("localtime"),
            Pattern::Function("localtime64"),
            Pattern::Function("mktime"),
            Pattern::Function("mktime64"),
            Pattern::Function("timelocal"),
            Pattern::Function("ctime"),
            Pattern::Function("strftime"),
            Pattern::Function("strftime_l"),
            Pattern::Function("tzset"),
            Pattern::Function("tz_convert"),
            Pattern::Function("tzset_internal"),
            Pattern::Function("tzfile_read"),
        ],
        cause: "glibc's localtime(), mktime(), ctime(), strftime() and tzset() check the \
                default time-zone file with a stat of /etc/localtime on every call when TZ is \
                unset, to see whether it changed: {caller} calls one of them in a hot path \
                (localtime_r() does not check).",
        fix: "Set TZ=:/etc/localtime (or the zone, e.g. TZ=Europe/Berlin) in the service's \
              environment: glibc then reads the zone once. In C, localtime_r() after one \
              tzset() at start does the same without the environment.",
        expected_gain: Some(TZ_GAIN),
        example: ("__tz_convert", "/usr/lib/x86_64-linux-gnu/libc.so.6"),
    },
];
