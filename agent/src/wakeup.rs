//! How the BPF worker sleeps: in `epoll_wait` on the ring buffers (the
//! kernel side wakes it once a ring is a quarter full, see `ring_wakeup()` in
//! `bpf/core/stats.h`) and on a doorbell eventfd rung by every request, with
//! a timeout for its periodic work. No polling: an idle agent wakes only on
//! its own timeout, a busy node's exits are drained as fast as they come.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// An eventfd that wakes the worker when a request is queued.
pub struct Doorbell(OwnedFd);

impl Doorbell {
    pub fn new() -> io::Result<Self> {
        // SAFETY: eventfd has no memory-safety preconditions; a non-negative
        // return is a new descriptor that only this value owns.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just created and is owned by nobody else.
        Ok(Self(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Wake the waiter (never blocks: the counter saturates long after).
    pub fn ring(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a valid u64 to our own eventfd.
        unsafe { libc::write(self.0.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    /// Reset the counter, so the next wait sleeps until the next ring.
    pub fn clear(&self) {
        let mut n: u64 = 0;
        // SAFETY: reads at most 8 bytes into a valid u64; non-blocking.
        unsafe { libc::read(self.0.as_raw_fd(), (&mut n as *mut u64).cast(), 8) };
    }
}

impl AsRawFd for Doorbell {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// An epoll set over a few descriptors that are only ever waited on.
pub struct Waiter(OwnedFd);

impl Waiter {
    /// Watch `fds` for input (epoll descriptors nest: a ring buffer's own
    /// epoll fd is readable when any of its rings has data to wake for).
    pub fn new(fds: &[RawFd]) -> io::Result<Self> {
        // SAFETY: epoll_create1 has no memory-safety preconditions.
        let epfd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if epfd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `epfd` was just created and is owned by nobody else.
        let waiter = Self(unsafe { OwnedFd::from_raw_fd(epfd) });
        for &fd in fds {
            let mut ev = libc::epoll_event {
                events: libc::EPOLLIN as u32,
                u64: fd as u64,
            };
            // SAFETY: `ev` is a valid epoll_event; the kernel copies it.
            if unsafe { libc::epoll_ctl(epfd, libc::EPOLL_CTL_ADD, fd, &mut ev) } < 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(waiter)
    }

    /// Sleep until a watched descriptor is readable or `timeout` passes.
    pub fn wait(&self, timeout: Duration) {
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; 4];
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: `events` is a writable array of the length passed.
        unsafe {
            libc::epoll_wait(
                self.0.as_raw_fd(),
                events.as_mut_ptr(),
                events.len() as i32,
                ms,
            )
        };
    }
}
