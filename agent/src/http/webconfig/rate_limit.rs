//! `rate_limit`: requests per interval with a burst, over all clients.

use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::format::RateLimitSection;

/// `rate_limit` as (interval, burst), or None when the interval is 0.
///
/// Errors: an interval that is not a duration, a burst under 1.
pub(super) fn settings(section: &RateLimitSection) -> Result<Option<(Duration, u32)>> {
    let interval = match section.interval.as_deref().map(str::trim) {
        None | Some("0") | Some("") => return Ok(None),
        Some(text) => humantime::parse_duration(text)
            .map_err(|e| anyhow!("interval {text:?}: {e} (e.g. 100ms or 1s)"))?,
    };
    if interval.is_zero() {
        return Ok(None);
    }
    match section.burst {
        Some(burst) if burst > 0 => Ok(Some((interval, burst))),
        _ => bail!("burst must be at least 1 when interval is set"),
    }
}

/// A token bucket: `burst` requests at once, one more every `interval`.
pub(super) struct TokenBucket {
    interval: Duration,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    /// A full bucket.
    pub(super) fn new(interval: Duration, burst: u32) -> Self {
        Self {
            interval,
            burst: f64::from(burst),
            tokens: f64::from(burst),
            last: Instant::now(),
        }
    }

    /// Take a token for one request: false when none is left.
    pub(super) fn take(&mut self) -> bool {
        let now = Instant::now();
        let refill = now.duration_since(self.last).as_secs_f64() / self.interval.as_secs_f64();
        self.tokens = (self.tokens + refill).min(self.burst);
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// The answer to a request over the limit.
pub(super) fn too_many_requests() -> Response {
    (StatusCode::TOO_MANY_REQUESTS, "Too Many Requests\n").into_response()
}
