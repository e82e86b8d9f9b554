//! The client's stream watched for the first bytes of a request, and when
//! a connection's current wait ends: the read header and idle timeouts.

use std::io;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::table::{ms_since, Conn, NO_PARTIAL};
use super::Limits;

/// The client's stream, noting when bytes of a request arrive while none is
/// in flight (a request header in progress), for the read header timeout.
pub(super) struct Watched<S> {
    pub(super) stream: S,
    pub(super) conn: Arc<Conn>,
    pub(super) epoch: Instant,
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.stream).poll_read(cx, buf);
        if buf.filled().len() > before && this.conn.in_flight.load(Ordering::Acquire) == 0 {
            let now = ms_since(this.epoch);
            let started = this.conn.partial_since_ms.compare_exchange(
                NO_PARTIAL,
                now,
                Ordering::AcqRel,
                Ordering::Relaxed,
            );
            if started.is_ok() {
                this.conn.changed.notify_one();
            }
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, data)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

/// When the connection's current wait ends and why: a request header in
/// progress gets `read_header_timeout` from its first byte, an idle
/// connection `idle_timeout` from its last response. `None` while a request
/// is in flight.
pub(super) fn wait_deadline(conn: &Conn, limits: &Limits) -> Option<(u64, &'static str)> {
    if conn.in_flight.load(Ordering::Acquire) > 0 {
        return None;
    }
    let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    match conn.partial_since_ms.load(Ordering::Acquire) {
        NO_PARTIAL => Some((
            conn.last_active_ms
                .load(Ordering::Relaxed)
                .saturating_add(ms(limits.idle_timeout)),
            "idle_timeout",
        )),
        since => Some((
            since.saturating_add(ms(limits.read_header_timeout)),
            "read_header_timeout",
        )),
    }
}
