//! The listening socket and the limits that depend on the process: the
//! address is bound with a deep accept queue, bind errors say what to do,
//! and the connection cap is fitted under the file limit.

use std::io::{self, ErrorKind};
use std::net::{SocketAddr, TcpListener};
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use socket2::{Domain, Socket, Type};
use tracing::{debug, info};

use super::connections::Limits;

/// Connections the kernel may queue before the agent accepts them. The
/// standard library's 128 overflows when a burst of clients (or a storm of
/// evicted idle ones reconnecting) arrives at once; the kernel caps it at
/// net.core.somaxconn (4096 by default since 5.4).
const LISTEN_BACKLOG: i32 = 4096;

/// Descriptors kept free under the file limit for everything that is not an
/// HTTP connection: the BPF objects (about 60 maps, programs and links), the
/// ring buffers' epoll, /proc and /sys reads during a scrape, the log.
const RESERVED_FDS: u64 = 256;

/// Bind `addr` for the endpoint, non-blocking (as tokio wants it).
///
/// Errors: one line naming the address, with what to do when the address
/// is in use or the port is privileged.
pub fn bind(addr: SocketAddr) -> Result<TcpListener> {
    let listener = bind_with_backlog(addr).map_err(|err| bind_error(addr, &err))?;
    listener.set_nonblocking(true).context("listener")?;
    Ok(listener)
}

/// The message of a failed bind of `addr`.
fn bind_error(addr: SocketAddr, err: &io::Error) -> anyhow::Error {
    match err.kind() {
        ErrorKind::AddrInUse => anyhow!(
            "cannot listen on {addr}: address already in use: stop the process using it \
             or pass another --web.listen-address"
        ),
        ErrorKind::PermissionDenied => {
            anyhow!("cannot listen on {addr}: permission denied: use a port above 1023")
        }
        _ => anyhow!("cannot listen on {addr}: {err}"),
    }
}

/// Bind `addr` as `TcpListener::bind` does (SO_REUSEADDR on, so a restart
/// does not wait for TIME_WAIT), with a [`LISTEN_BACKLOG`] queue.
fn bind_with_backlog(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    socket.listen(LISTEN_BACKLOG)?;
    Ok(socket.into())
}

/// The HTTP limits from the flags: at most `max` open connections (fewer
/// when the file limit, raised to its hard value first, leaves less room),
/// a whole request header within `read_header_timeout`, and idle
/// connections closed after `idle_timeout`.
pub fn connection_limits(
    max: u16,
    read_header_timeout: Duration,
    idle_timeout: Duration,
) -> Limits {
    let (soft, hard) = raise_nofile_limit();
    let max_connections = effective_max_connections(usize::from(max));
    info!(
        max_connections,
        nofile_soft = soft,
        nofile_hard = hard,
        "HTTP connection limit"
    );
    Limits {
        max_connections,
        read_header_timeout,
        idle_timeout,
    }
}

/// The cap on open connections: `configured`, or the soft file limit less
/// [`RESERVED_FDS`] when that is lower (at least 16).
fn effective_max_connections(configured: usize) -> usize {
    let soft = nofile_limit().0;
    let by_fds = soft.saturating_sub(RESERVED_FDS).max(16);
    configured.min(usize::try_from(by_fds).unwrap_or(usize::MAX))
}

/// Raise the soft file limit to the hard one (as Go programs do at start):
/// the cap on connections then has room, and nothing else changes.
/// Returns (soft, hard) after the attempt.
fn raise_nofile_limit() -> (u64, u64) {
    let (soft, hard) = nofile_limit();
    if soft < hard {
        let raised = libc::rlimit {
            rlim_cur: hard,
            rlim_max: hard,
        };
        // SAFETY: setrlimit reads the struct we pass; no memory is shared.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
            debug!(error = %io::Error::last_os_error(), "could not raise the soft file limit");
        }
    }
    nofile_limit()
}

/// The file limit as (soft, hard); (1024, 1024), the usual default, when it
/// cannot be read.
fn nofile_limit() -> (u64, u64) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return (1024, 1024);
    }
    (lim.rlim_cur, lim.rlim_max)
}
