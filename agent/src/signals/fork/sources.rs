//! Which runtime forks, most specific first: the frames of a sampled fork
//! that copies (call kind `fork`), taken at the fork's syscall entry. Each
//! runtime's own function that calls fork names it (glibc's fork wrapper,
//! `_Fork`/`__libc_fork`, is in every such stack and names nothing).

use crate::sources::{KnownSource, Pattern};

/// What a fix gives back: the copy's time, as the public cases measured it.
pub const FORK_GAIN: &str = "the page-table copy on every fork, and its teardown in the child: \
                             16 ms against 0.5 ms per spawn of a 10 GB Go process with vfork, \
                             41.4 s against 0.97 s for 1,000 spawns of a 100 MB Ruby process \
                             with posix_spawn, 3.46 s per Redis BGSAVE fork at 11.5 GB on Xen";

pub const SOURCES: &[KnownSource] = &[
    KnownSource {
        id: "redis_bgsave",
        frames: &[
            Pattern::Function("redisFork"),
            Pattern::Function("rdbSaveBackground"),
            Pattern::Function("rewriteAppendOnlyFileBackground"),
            Pattern::ModuleIs("redis-server"),
            Pattern::ModuleIs("redis-check-rdb"),
        ],
        cause: "Redis forks a copy of itself for every background save (BGSAVE, the save \
                points, a replica's full sync) and AOF rewrite: the fork copies the page tables \
                of its whole dataset, and Redis serves no command until it returns \
                (INFO's latest_fork_usec).",
        fix: "Turn transparent huge pages off for Redis (echo never > \
              /sys/kernel/mm/transparent_hugepage/enabled: Redis warns about it at start), keep \
              less data per instance (shard; maxmemory), save less often (fewer save points, \
              AOF with fewer rewrites, or snapshots from a replica), and avoid Xen PV guests, \
              whose forks take seconds at a few GB.",
        expected_gain: Some(FORK_GAIN),
        example: ("rdbSaveBackground", "/usr/bin/redis-server"),
    },
    KnownSource {
        id: "jvm_fork_launch",
        frames: &[
            Pattern::Function("forkChild"),
            Pattern::FunctionContains("ProcessImpl_forkAndExec"),
            Pattern::Module("libjava.so"),
        ],
        cause: "The JVM starts processes (ProcessBuilder, Runtime.exec) with fork(): \
                jdk.lang.Process.launchMechanism=FORK copies the whole Java heap's page tables \
                on every spawn.",
        fix: "-Djdk.lang.Process.launchMechanism=POSIX_SPAWN (the default on Linux since JDK \
              13) or VFORK, so that no spawn copies the heap.",
        expected_gain: Some(FORK_GAIN),
        example: (
            "forkChild",
            "/usr/lib/jvm/java-17-openjdk-amd64/lib/libjava.so",
        ),
    },
    KnownSource {
        id: "cpython_os_fork",
        frames: &[
            Pattern::Function("os_fork_impl"),
            Pattern::Function("os_fork"),
            Pattern::FunctionContains("PyOS_BeforeFork"),
            Pattern::Function("subprocess_fork_exec"),
            Pattern::FunctionContains("do_fork_exec"),
            // Debian's interpreter keeps no symbols of its own functions
            Pattern::Module("libpython"),
            Pattern::Module("python"),
        ],
        cause: "Python forks: os.fork() (multiprocessing's fork start method, a pre-fork \
                server, a daemonizing step) or subprocess with a preexec_fn, or on a Python \
                before 3.10, which copy the interpreter's whole heap.",
        fix: "Spawn with subprocess without preexec_fn on Python 3.10+ (it uses vfork) or \
              os.posix_spawn; for multiprocessing, the forkserver or spawn start method \
              (multiprocessing.set_start_method('forkserver')), which forks from a small \
              process.",
        expected_gain: Some(FORK_GAIN),
        example: ("os_fork_impl", "/usr/bin/python3.11"),
    },
    KnownSource {
        id: "ruby_fork",
        frames: &[
            Pattern::FunctionContains("rb_fork_ruby"),
            Pattern::FunctionContains("rb_f_fork"),
            Pattern::FunctionContains("rb_f_system"),
            Pattern::Module("libruby"),
        ],
        cause: "Ruby forks (fork, Kernel#system and backticks on Rubies that fork, a pre-fork \
                server's workers), copying the interpreter's heap each time.",
        fix: "Process.spawn (posix_spawn where it can) for commands; for pre-fork servers \
              (Unicorn, Puma's cluster mode), preload and fork the workers once at start, and \
              call GC.compact before forking.",
        expected_gain: Some(FORK_GAIN),
        example: (
            "rb_fork_ruby",
            "/usr/lib/x86_64-linux-gnu/libruby-3.1.so.3.1",
        ),
    },
    KnownSource {
        id: "node_child_process",
        frames: &[
            Pattern::FunctionContains("uv__spawn_and_init_child"),
            Pattern::Function("uv_spawn"),
            Pattern::FunctionContains("uv__process_child_init"),
        ],
        cause: "Node's child_process (libuv's uv_spawn) forks the whole Node process for each \
                spawn where libuv cannot use posix_spawn or vfork.",
        fix: "A libuv and Node recent enough to spawn with posix_spawn or vfork (Node 20+ on \
              glibc), or spawn from a small helper process; keep the V8 heap small in the \
              process that spawns.",
        expected_gain: Some(FORK_GAIN),
        example: ("uv_spawn", "/usr/bin/node"),
    },
    KnownSource {
        id: "go_fork_exec",
        frames: &[
            Pattern::FunctionPrefix("syscall.forkAndExecInChild"),
            Pattern::FunctionPrefix("syscall.forkExec"),
        ],
        cause: "A Go program forks to start commands (os/exec): Go before 1.9 copied the \
                whole address space on every spawn (16 ms against 0.5 ms at 10 GB), holding \
                syscall.ForkLock, and later Go still forks when it cannot use CLONE_VFORK (a \
                SysProcAttr with Ptrace or a new user namespace).",
        fix: "Go 1.9 or later (CLONE_VM|CLONE_VFORK), and a SysProcAttr that lets it vfork; or \
              spawn from a small helper process.",
        expected_gain: Some(FORK_GAIN),
        example: ("syscall.forkAndExecInChild1", "/usr/local/bin/app"),
    },
    KnownSource {
        id: "glibc_system_popen",
        frames: &[
            Pattern::Function("do_system"),
            Pattern::Function("system"),
            Pattern::Function("popen"),
            Pattern::FunctionContains("spawn_process"),
        ],
        cause: "The program starts commands with system() or popen() on a glibc that forks \
                for them (before 2.29 system() and popen() used fork; a static or musl build may \
                still), copying its address space each time.",
        fix: "posix_spawn() in place of system()/popen(), or glibc 2.29 or later, whose \
              system() and popen() use posix_spawn (clone with CLONE_VM|CLONE_VFORK).",
        expected_gain: Some(FORK_GAIN),
        example: ("do_system", "/usr/lib/x86_64-linux-gnu/libc.so.6"),
    },
];
