//! The open connections as the accept loop sees them, on one clock of
//! milliseconds since the table's epoch kept in atomics.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::Notify;

/// `Conn::partial_since_ms` when no bytes of a next request have arrived.
pub(super) const NO_PARTIAL: u64 = u64::MAX;

/// One open connection, as the accept loop sees it.
pub(super) struct Conn {
    /// Requests being served now (a busy connection is never evicted).
    pub(super) in_flight: AtomicUsize,
    /// Milliseconds since `Table::epoch` of the accept or the last response.
    pub(super) last_active_ms: AtomicU64,
    /// When the first byte of a request whose header is not complete yet
    /// arrived (ms since `Table::epoch`), or [`NO_PARTIAL`]: the read header
    /// timeout runs from it, the idle timeout from `last_active_ms`.
    pub(super) partial_since_ms: AtomicU64,
    /// Set when it is chosen for eviction (never chosen twice).
    pub(super) evicted: AtomicBool,
    /// Wakes the connection's task to close it.
    pub(super) close: Notify,
    /// Wakes the connection's task to recompute its deadline: a request
    /// header started, or a request ended.
    pub(super) changed: Notify,
}

/// The open connections.
pub(super) struct Table {
    pub(super) epoch: Instant,
    pub(super) conns: Mutex<HashMap<u64, Arc<Conn>>>,
    pub(super) next_id: AtomicU64,
}

impl Table {
    pub(super) fn new() -> Self {
        Self {
            epoch: Instant::now(),
            conns: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
        }
    }

    /// The entries, locked (a panic elsewhere while holding the lock
    /// leaves them usable: each entry is updated atomically).
    pub(super) fn conns(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<Conn>>> {
        self.conns.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Enter a connection accepted now; returns its id and entry.
    pub(super) fn insert(&self) -> (u64, Arc<Conn>) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let conn = Arc::new(Conn {
            in_flight: AtomicUsize::new(0),
            last_active_ms: AtomicU64::new(ms_since(self.epoch)),
            partial_since_ms: AtomicU64::new(NO_PARTIAL),
            evicted: AtomicBool::new(false),
            close: Notify::new(),
            changed: Notify::new(),
        });
        self.conns().insert(id, conn.clone());
        (id, conn)
    }

    pub(super) fn remove(&self, id: u64) {
        self.conns().remove(&id);
    }

    pub(super) fn len(&self) -> usize {
        self.conns().len()
    }

    /// Whether any connection has a request in flight.
    pub(super) fn busy(&self) -> bool {
        self.conns()
            .values()
            .any(|c| c.in_flight.load(Ordering::Acquire) > 0)
    }

    /// The idle connection (nothing in flight) that has been idle longest.
    pub(super) fn longest_idle(&self) -> Option<Arc<Conn>> {
        self.conns()
            .values()
            .filter(|c| {
                c.in_flight.load(Ordering::Acquire) == 0 && !c.evicted.load(Ordering::Acquire)
            })
            .min_by_key(|c| c.last_active_ms.load(Ordering::Relaxed))
            .cloned()
    }
}

/// Milliseconds from `epoch` to now: the connections' clock, kept in
/// atomics as integers.
pub(super) fn ms_since(epoch: Instant) -> u64 {
    u64::try_from(epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
}
