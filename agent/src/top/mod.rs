//! `slowpath top`: this node's slow paths per process, live. Reads the
//! agent running on the node every `--delay` and prints, per process
//! series, the estimated CPU its slow paths cost (each rate times the
//! node's measured cost of one such event, from the agent's gauges), each
//! slow path's rate between the last two reads, the median
//! timeout its timed waits and sleeps asked for, and the findings that
//! hold for it, highest first.
//!
//! On a terminal it is a full-screen view (`tui.rs`); with `--batch`, a
//! standard output that is not a terminal, or `TERM=dumb`, plain-text
//! frames (as `top -b`) or JSON lines. With no agent answering on this
//! node (or `--source standalone`), the view loads the BPF programs itself
//! and reads them in process (`standalone.rs`); the header says which.

mod detail;
mod frame;
mod node;
mod rows;
mod sample;
mod source;
mod standalone;
mod tui;
mod widgets;

use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

pub use rows::{Reading, SortKey};
pub use source::{AgentEndpoint, AgentSource, Presence, Source};
pub use standalone::StandaloneSource;

use rows::{rows_between, sort_rows};

/// What `slowpath top` was asked for.
#[derive(Clone, Debug)]
pub struct TopOptions {
    pub endpoint: AgentEndpoint,
    /// Time between reads: the interval of the rates.
    pub delay: Duration,
    /// Frames to print; `None`: until interrupted.
    pub iterations: Option<u32>,
    /// JSON lines instead of text tables.
    pub json: bool,
    /// How rows are ordered, highest first (the estimated CPU by default).
    pub sort: SortKey,
    /// Rows per text frame; 0: all.
    pub max_rows: usize,
    /// Plain frames even on a terminal (`--batch`).
    pub batch: bool,
}

/// Whether the full-screen view can run: asked for, standard output a
/// terminal, and one that can place a cursor.
pub fn full_screen(opts: &TopOptions) -> bool {
    use std::io::IsTerminal;
    !opts.batch
        && !opts.json
        && std::io::stdout().is_terminal()
        && std::env::var("TERM").is_ok_and(|t| !t.is_empty() && t != "dumb")
}

/// Show `source` until a quit key, or print frames until `iterations` are
/// done; `first` is a read already made (an agent's presence check), the
/// base of the first frame. Errors: the source cannot be read (the message
/// names it and what to give).
pub fn run(opts: &TopOptions, source: &dyn Source, first: Option<Reading>) -> Result<()> {
    // Read before the screen changes: no agent is one plain line.
    let first = match first {
        Some(first) => first,
        None => source.read()?,
    };
    if full_screen(opts) {
        return tui::run(opts, source, first);
    }
    batch(opts, source, first)
}

/// Print plain frames until `iterations` are done, from `before`.
fn batch(opts: &TopOptions, source: &dyn Source, mut before: Reading) -> Result<()> {
    let mut read_at = Instant::now();
    let mut printed = 0;
    let stdout = std::io::stdout();
    while opts.iterations.is_none_or(|n| printed < n) {
        std::thread::sleep(opts.delay.saturating_sub(read_at.elapsed()));
        let now = source.read()?;
        let seconds = read_at.elapsed().as_secs_f64();
        read_at = Instant::now();
        let frame = render(opts, source, &before, &now, seconds);
        let mut out = stdout.lock();
        out.write_all(frame.as_bytes())
            .and_then(|()| out.flush())
            .context("writing to standard output")?;
        before = now.carrying(before);
        printed += 1;
    }
    Ok(())
}

/// One frame of `source` between two readings `seconds` apart.
fn render(
    opts: &TopOptions,
    source: &dyn Source,
    before: &Reading,
    now: &Reading,
    seconds: f64,
) -> String {
    let mut rows = rows_between(before, now, seconds);
    sort_rows(&mut rows, opts.sort);
    let time = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    let node = node::node_line(&before.node, &now.node, seconds, source.reader());
    let header = frame::Header {
        time: &time,
        source: source.describe(),
        node: &node,
        interval_seconds: seconds,
        processes: rows.len(),
    };
    if opts.json {
        return frame::json_lines(&header, &rows);
    }
    if opts.max_rows > 0 {
        rows.truncate(opts.max_rows);
    }
    frame::text(&header, &rows) + "\n"
}
