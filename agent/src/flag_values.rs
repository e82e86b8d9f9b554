//! Value parsers shared by the agent's flags (`cli.rs`) and the signals'
//! own flags (`signals::SignalArgs`), so that neither imports the other.
//! Each error says what to give; clap prefixes the flag and the value.

use std::fmt;
use std::time::Duration;

/// A whole number from `lo` to `hi`; the message says so.
pub fn whole_number<T>(lo: T, hi: T) -> impl Fn(&str) -> Result<T, String> + Clone + Send + Sync
where
    T: std::str::FromStr + PartialOrd + fmt::Display + Copy + Send + Sync,
{
    move |s| match s.parse::<T>() {
        Ok(n) if lo <= n && n <= hi => Ok(n),
        _ => Err(format!("expected a whole number from {lo} to {hi}")),
    }
}

/// A duration flag: humantime (`15s`, `500ms`, `1m`), at least 100 ms.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    match humantime::parse_duration(s) {
        Ok(d) if d >= Duration::from_millis(100) => Ok(d),
        Ok(_) => Err("too short: expected at least 100ms".into()),
        Err(e) => Err(format!("expected a duration, e.g. 15s, 500ms, 1m ({e})")),
    }
}

/// A refresh delay as `top -d` takes it (seconds, fractions allowed: `2`,
/// `0.5`) or as a duration (`2s`, `500ms`); at least 100ms.
pub fn parse_delay(s: &str) -> Result<Duration, String> {
    match s.parse::<f64>() {
        Ok(secs) if (0.1..=86_400.0).contains(&secs) => Ok(Duration::from_secs_f64(secs)),
        Ok(_) => Err("expected seconds between 0.1 and 86400".into()),
        Err(_) => parse_duration(s),
    }
}

/// A duration of at least 100ms, or 0 (off).
pub fn parse_duration_or_zero(s: &str) -> Result<Duration, String> {
    match humantime::parse_duration(s) {
        Ok(d) if d.is_zero() => Ok(d),
        _ => parse_duration(s),
    }
}
