//! Where close sweeps come from, most specific first: the frames of a
//! sampled close of a descriptor that is not open (call kind `fd_close`).

use crate::sources::{KnownSource, Pattern};

/// What the fix removes, as measured for this signal (glibc 2.36, Intel
/// Xeon and AMD EPYC): a close that returns EBADF costs a system call.
pub const SWEEP_GAIN: &str = "one system call per descriptor up to the limit at every spawn: \
                              20,000 closes took 3.1 ms, so about 0.16 s at a limit of \
                              1,048,576 and minutes at 1,073,741,816; close_range() takes \
                              microseconds at any limit";

pub const SOURCES: &[KnownSource] = &[
    KnownSource {
        id: "perl_close_loop",
        frames: &[
            Pattern::FunctionPrefix("XS_POSIX_close"),
            Pattern::Module("POSIX.so"),
            Pattern::Module("libperl.so"),
        ],
        cause: "A Perl script closes every descriptor up to POSIX::sysconf(_SC_OPEN_MAX) one \
                POSIX::close at a time, as Proc::Daemon::Init does when it daemonizes (0.23, \
                in Debian's libproc-daemon-perl): one system call per descriptor up to the \
                open-files limit.",
        fix: "Give the service a sane open-files limit (LimitNOFILE=1024:524288 in its \
              systemd unit, or the container runtime's default ulimit), or close only the \
              descriptors that are open: list /proc/self/fd, or call POSIX::close on the \
              handles the script opened.",
        expected_gain: Some(SWEEP_GAIN),
        example: (
            "Perl_pp_entersub",
            "/usr/lib/x86_64-linux-gnu/libperl.so.5.36.0",
        ),
    },
    KnownSource {
        id: "python2_close_fds",
        frames: &[
            Pattern::Function("os_closerange"),
            Pattern::Module("libpython2"),
            Pattern::ModuleIs("python2.7"),
        ],
        cause: "Python 2's subprocess (close_fds=True) and os.closerange() close every \
                descriptor up to the open-files limit one close() at a time in the forked \
                child (Python 3.8 and later use close_range() or /proc/self/fd).",
        fix: "Move to Python 3, or lower the service's soft open-files limit \
              (LimitNOFILE=1024:524288, or resource.setrlimit(RLIMIT_NOFILE) before \
              spawning).",
        expected_gain: Some(SWEEP_GAIN),
        example: (
            "os_closerange",
            "/usr/lib/x86_64-linux-gnu/libpython2.7.so.1.0",
        ),
    },
    KnownSource {
        id: "d_std_process",
        frames: &[Pattern::FunctionContains("std.process")],
        cause: "D's std.process (spawnProcess) closes every descriptor up to the open-files \
                limit in the child before it execs, one close() at a time in older Phobos \
                releases.",
        fix: "Update Phobos (later releases poll the open descriptors), or pass \
              Config.inheritFDs and lower the soft open-files limit.",
        expected_gain: Some(SWEEP_GAIN),
        example: ("std.process.spawnProcessImpl", "/usr/bin/app"),
    },
];
