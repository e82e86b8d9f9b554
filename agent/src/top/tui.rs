//! The full-screen view of `slowpath top` (ratatui on crossterm), in the
//! habits of top and htop: arrows and PgUp/PgDn move, `s` `<` `>` sort,
//! `/` filters, `f` keeps the processes with findings, Enter shows the
//! selected process's findings, `p` pauses, `?` helps, `q` and Ctrl-C
//! quit. The terminal is restored on every way out: a key, SIGTERM,
//! SIGHUP or SIGINT (`exit_on_signals`), an error, or a panic (ratatui's
//! hook).

use std::time::Instant;

use anyhow::{Context, Result};
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Paragraph, Row as TableRow, Table, TableState};
use ratatui::{DefaultTerminal, Frame};
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

use super::detail::finding_lines;
use super::frame::who;
use super::node::node_line;
use super::rows::{rows_between, sort_rows, Column, Reading, Row, SortKey};
use super::source::Source;
use super::widgets::{aligned, fitting_columns, popup, ViewColumn};
use super::TopOptions;

/// The sort keys in the order `s`, `<` and `>` walk them: the estimated
/// CPU, all events, then each column in display order.
fn sorts() -> usize {
    Column::count() + 2
}

fn sort_key(index: usize) -> SortKey {
    match index {
        0 => SortKey::Cpu,
        1 => SortKey::Events,
        i => SortKey::Column(Column::all().nth((i - 2) % Column::count()).unwrap()),
    }
}

/// `HH:MM:SSZ` of `time`, in UTC (RFC 3339's time of day).
fn utc_clock(time: std::time::SystemTime) -> String {
    let rfc3339 = humantime::format_rfc3339_seconds(time).to_string(); // 2026-11-28T05:40:12Z
    rfc3339.get(11..).unwrap_or_default().to_string()
}

/// The place of `key` in the walk of [`sort_key`].
fn sort_index(key: SortKey) -> usize {
    (0..sorts()).find(|&i| sort_key(i) == key).unwrap_or(0)
}

const HELP: &str = "\
Up/Down, PgUp/PgDn, Home/End   select a process
Enter                          its findings: cause, fix, call sites (Esc closes)
s, >                           sort by the next column;  <  the one before
/                              filter by comm, cgroup, unit or pod (Enter keeps, Esc clears)
f                              only processes with findings (again: all)
p                              pause (the rates keep their last values)
?                              this help (any key closes)
q, Ctrl-C                      quit";

/// Run the view until a quit key or a signal, from `first` (the source's
/// read made before the screen changed); the terminal is restored whatever
/// ends it.
pub fn run(opts: &TopOptions, source: &dyn Source, first: Reading) -> Result<()> {
    exit_on_signals()?;
    let mut terminal = ratatui::try_init().context("starting the full-screen view")?;
    let result = view_loop(&mut terminal, opts, source, first);
    ratatui::try_restore().context("restoring the terminal")?;
    result
}

/// End the view on SIGTERM, SIGINT or SIGHUP from a thread of its own:
/// restore the terminal and exit 0. Not a flag the loop checks: on a
/// terminal that hung up, crossterm's event read spins on end-of-file
/// inside `poll` and the loop would never see it (seen: orphaned views
/// at 30 % of a CPU each after their tmux server was killed).
fn exit_on_signals() -> Result<()> {
    let mut signals =
        Signals::new([SIGTERM, SIGINT, SIGHUP]).context("handling SIGTERM, SIGINT and SIGHUP")?;
    std::thread::Builder::new()
        .name("top-signals".into())
        .spawn(move || {
            if signals.forever().next().is_some() {
                let _ = ratatui::try_restore();
                std::process::exit(0);
            }
        })
        .context("starting the signal thread")?;
    Ok(())
}

fn view_loop(
    terminal: &mut DefaultTerminal,
    opts: &TopOptions,
    source: &dyn Source,
    mut before: Reading,
) -> Result<()> {
    let mut app = App::new(opts, source.describe());
    let mut read_at = Instant::now();
    // Drawn when something changed (a key, a resize, a read), not on every
    // wakeup: a frame of a thousand rows costs milliseconds.
    let mut changed = true;
    loop {
        if changed {
            terminal.draw(|frame| app.draw(frame))?;
            changed = false;
        }
        let due = read_at + opts.delay;
        if event::poll(due.saturating_duration_since(Instant::now()))? {
            match event::read()? {
                Event::Key(key) if key.kind == KeyEventKind::Press => {
                    if app.key(key, source) == Flow::Quit {
                        return Ok(());
                    }
                    changed = true;
                }
                Event::Resize(..) => changed = true,
                _ => {}
            }
        }
        if Instant::now() >= due {
            changed = true;
            let seconds = read_at.elapsed().as_secs_f64();
            read_at = Instant::now();
            match source.read() {
                Ok(now) => {
                    if !app.paused {
                        app.all = rows_between(&before, &now, seconds);
                        app.node = node_line(&before.node, &now.node, seconds, source.reader());
                        app.interval = seconds;
                        app.read_time = utc_clock(std::time::SystemTime::now());
                        app.refreshed = true;
                    }
                    app.error = None;
                    before = now.carrying(before);
                }
                Err(err) => app.error = Some(format!("{err:#}")),
            }
        }
    }
}

#[derive(PartialEq)]
enum Flow {
    Go,
    Quit,
}

/// What the view shows and where the user is in it.
struct App<'a> {
    opts: &'a TopOptions,
    /// Where the numbers come from ([`Source::describe`]).
    source: &'a str,
    /// Every row of the last interval, unfiltered.
    all: Vec<Row>,
    /// The node line of the last interval.
    node: String,
    interval: f64,
    /// When the last interval ended, `HH:MM:SSZ` (UTC), as top's header
    /// has the time: a new frame is told by it.
    read_time: String,
    /// A first interval has been read (before it: "reading").
    refreshed: bool,
    sort: usize,
    table: TableState,
    filter: String,
    editing_filter: bool,
    only_findings: bool,
    paused: bool,
    help: bool,
    /// The selected process's findings, while shown.
    detail: Option<Vec<String>>,
    /// The last read's error, shown until a read succeeds.
    error: Option<String>,
    /// Rows the table showed last: a page for PgUp/PgDn.
    page: usize,
}

impl<'a> App<'a> {
    fn new(opts: &'a TopOptions, source: &'a str) -> Self {
        let sort = sort_index(opts.sort);
        Self {
            opts,
            source,
            all: Vec::new(),
            node: "node: reading".into(),
            interval: 0.0,
            read_time: String::new(),
            refreshed: false,
            sort,
            table: TableState::default().with_selected(Some(0)),
            filter: String::new(),
            editing_filter: false,
            only_findings: false,
            paused: false,
            help: false,
            detail: None,
            error: None,
            page: 10,
        }
    }

    /// The rows shown: filtered, then sorted.
    fn shown(&self) -> Vec<Row> {
        let needle = self.filter.to_lowercase();
        let mut rows: Vec<Row> = self
            .all
            .iter()
            .filter(|r| !self.only_findings || !r.findings.is_empty())
            .filter(|r| {
                needle.is_empty()
                    || r.identity
                        .iter()
                        .any(|v| v.to_lowercase().contains(&needle))
            })
            .cloned()
            .collect();
        sort_rows(&mut rows, sort_key(self.sort));
        rows
    }

    fn key(&mut self, key: KeyEvent, source: &dyn Source) -> Flow {
        let ctrl_c =
            key.code == KeyCode::Char('c') && key.modifiers.contains(KeyModifiers::CONTROL);
        if ctrl_c {
            return Flow::Quit;
        }
        if self.editing_filter {
            match key.code {
                KeyCode::Enter => self.editing_filter = false,
                KeyCode::Esc => {
                    self.filter.clear();
                    self.editing_filter = false;
                }
                KeyCode::Backspace => {
                    self.filter.pop();
                }
                KeyCode::Char(c) => self.filter.push(c),
                _ => {}
            }
            return Flow::Go;
        }
        if self.help || self.detail.is_some() {
            // any key closes a popup; q still quits
            self.help = false;
            self.detail = None;
            return if key.code == KeyCode::Char('q') {
                Flow::Quit
            } else {
                Flow::Go
            };
        }
        let rows = self.shown().len();
        match key.code {
            KeyCode::Char('q') => return Flow::Quit,
            KeyCode::Up | KeyCode::Char('k') => self.table.select_previous(),
            KeyCode::Down | KeyCode::Char('j') => self.table.select_next(),
            KeyCode::PageUp => self.table.scroll_up_by(self.page as u16),
            KeyCode::PageDown => self.table.scroll_down_by(self.page as u16),
            KeyCode::Home => self.table.select_first(),
            KeyCode::End => self.table.select(Some(rows.saturating_sub(1))),
            KeyCode::Char('s') | KeyCode::Char('>') => self.sort = (self.sort + 1) % sorts(),
            KeyCode::Char('<') => self.sort = (self.sort + sorts() - 1) % sorts(),
            KeyCode::Char('/') => self.editing_filter = true,
            KeyCode::Char('f') => self.only_findings = !self.only_findings,
            KeyCode::Char('p') => self.paused = !self.paused,
            KeyCode::Char('?') | KeyCode::Char('h') => self.help = true,
            KeyCode::Enter => self.detail = Some(self.selected_detail(source)),
            _ => {}
        }
        Flow::Go
    }

    /// The findings of the selected row, from the agent.
    fn selected_detail(&self, source: &dyn Source) -> Vec<String> {
        let rows = self.shown();
        let Some(row) = self.table.selected().and_then(|i| rows.get(i)) else {
            return vec!["no process selected".into()];
        };
        let (_, comm, place) = who(row);
        let mut lines = vec![format!("{comm} in {place}"), String::new()];
        match source.read_findings() {
            Ok(json) => {
                let found = finding_lines(&json, &row.identity);
                if found.is_empty() {
                    lines.push("no finding holds for this process now".into());
                }
                lines.extend(found);
            }
            Err(err) => lines.push(format!("findings not read: {err:#}")),
        }
        lines
    }

    fn draw(&mut self, frame: &mut Frame<'_>) {
        let [head, node, body, foot] = Layout::vertical([
            Constraint::Length(1),
            Constraint::Length(1),
            Constraint::Min(1),
            Constraint::Length(1),
        ])
        .areas(frame.area());
        let rows = self.shown();
        frame.render_widget(Paragraph::new(self.title(rows.len())), head);
        frame.render_widget(Paragraph::new(self.node.as_str()), node);
        self.page = body.height.saturating_sub(1).max(1) as usize;
        if !rows.is_empty() {
            let last = rows.len() - 1;
            self.table
                .select(Some(self.table.selected().unwrap_or(0).min(last)));
        }
        frame.render_stateful_widget(self.table_widget(&rows, body.width), body, &mut self.table);
        frame.render_widget(Paragraph::new(self.footer()), foot);
        if self.help {
            popup(frame, "keys", HELP.lines().map(Line::from).collect());
        } else if let Some(lines) = &self.detail {
            popup(
                frame,
                "findings",
                lines.iter().map(|l| Line::from(l.as_str())).collect(),
            );
        }
    }

    fn title(&self, shown: usize) -> String {
        let sort = match sort_key(self.sort) {
            SortKey::Cpu => "cpu",
            SortKey::Events => "events",
            SortKey::Column(c) => c.header(),
        };
        let state = if !self.refreshed {
            format!(
                "reading: first rates in {:.1}s",
                self.opts.delay.as_secs_f64()
            )
        } else {
            format!("rates over {:.1}s", self.interval)
        };
        // the time the shown rates end at, as batch frames have it
        let time = match self.refreshed {
            true => format!("{} - ", self.read_time),
            false => String::new(),
        };
        format!(
            "slowpath top - {time}{} - {state} - {shown} processes - sort {sort}{}",
            self.source,
            if self.paused { " - PAUSED" } else { "" }
        )
    }

    fn footer(&self) -> String {
        if let Some(err) = &self.error {
            return format!("error: {err}");
        }
        if self.editing_filter {
            return format!("filter: {}_", self.filter);
        }
        let mut parts = vec![
            "q quit  Enter findings  s/</> sort  / filter  f findings only  p pause  ? help"
                .to_string(),
        ];
        if !self.filter.is_empty() {
            parts.push(format!("filter \"{}\"", self.filter));
        }
        if self.only_findings {
            parts.push("findings only".into());
        }
        parts.join("  |  ")
    }

    fn table_widget(&self, rows: &[Row], width: u16) -> Table<'static> {
        let key = sort_key(self.sort);
        let sorted = match key {
            SortKey::Column(c) => Some(c),
            SortKey::Cpu | SortKey::Events => None,
        };
        let shown = fitting_columns(width, sorted);
        let header = shown.iter().map(|c| {
            let underlined = match c {
                ViewColumn::Rate(r) => Some(*r) == sorted,
                ViewColumn::Cpu => key == SortKey::Cpu,
                _ => false,
            };
            let style = if underlined {
                Style::new().add_modifier(Modifier::UNDERLINED)
            } else {
                Style::new()
            };
            aligned(c, c.title().to_string()).style(style)
        });
        let body = rows
            .iter()
            .map(|row| TableRow::new(shown.iter().map(|c| aligned(c, c.text(row)))));
        Table::new(body, shown.iter().map(|c| c.width()))
            .header(
                TableRow::new(header)
                    .style(Style::new().add_modifier(Modifier::BOLD | Modifier::REVERSED)),
            )
            .row_highlight_style(Style::new().add_modifier(Modifier::REVERSED))
    }
}

#[cfg(test)]
mod tests {
    use super::utc_clock;

    #[test]
    fn the_title_time_is_utc_hours_minutes_seconds() {
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(86_400 + 3_600 * 5 + 61);
        assert_eq!(utc_clock(t), "05:01:01Z");
    }
}
