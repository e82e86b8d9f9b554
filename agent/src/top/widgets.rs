//! What the full-screen view (`tui.rs`) is drawn with: the table's columns,
//! the ones that fit a narrow screen, and the popup box.

use ratatui::layout::{Constraint, Rect};
use ratatui::text::Line;
use ratatui::widgets::{Block, Cell, Clear, Paragraph, Wrap};
use ratatui::Frame;

use super::frame::{cell, cpu_cell, timeout_cell, who};
use super::rows::{Column, Row};

/// A column of the full-screen table.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum ViewColumn {
    Pid,
    /// `!` when a finding holds for the process.
    Mark,
    Comm,
    /// The estimated share of a CPU, in %.
    Cpu,
    Rate(Column),
    Timeout,
    Place,
    Findings,
}

impl ViewColumn {
    /// Left to right: who, the estimated CPU, each declared column, the
    /// timeout, where, the findings.
    pub(super) fn order() -> Vec<ViewColumn> {
        let who = [
            ViewColumn::Pid,
            ViewColumn::Mark,
            ViewColumn::Comm,
            ViewColumn::Cpu,
        ];
        let rest = [ViewColumn::Timeout, ViewColumn::Place, ViewColumn::Findings];
        (who.into_iter())
            .chain(Column::all().map(ViewColumn::Rate))
            .chain(rest)
            .collect()
    }

    /// Which columns stay when the screen is narrow, lowest first: who and
    /// the estimated CPU, then the sorted rate, the common rates, the timeout, the rarer
    /// rates, the findings, the place.
    fn keep_rank(self, sorted: Option<Column>) -> u8 {
        match self {
            ViewColumn::Pid | ViewColumn::Mark | ViewColumn::Comm | ViewColumn::Cpu => 0,
            ViewColumn::Rate(c) if Some(c) == sorted => 1,
            ViewColumn::Rate(c) if c.is_common() => 2,
            ViewColumn::Timeout => 3,
            ViewColumn::Rate(_) => 4,
            ViewColumn::Findings => 5,
            ViewColumn::Place => 6,
        }
    }

    pub(super) fn title(self) -> &'static str {
        match self {
            ViewColumn::Pid => "PID",
            ViewColumn::Mark => " ",
            ViewColumn::Comm => "COMM",
            ViewColumn::Cpu => "CPU%",
            ViewColumn::Rate(c) => c.header(),
            ViewColumn::Timeout => "TIMEOUT",
            ViewColumn::Place => "POD/UNIT/CGROUP",
            ViewColumn::Findings => "FINDINGS",
        }
    }

    /// Its width; the last two take what is left.
    pub(super) fn width(self) -> Constraint {
        match self {
            ViewColumn::Pid | ViewColumn::Timeout => Constraint::Length(7),
            ViewColumn::Mark => Constraint::Length(1),
            ViewColumn::Comm => Constraint::Length(15),
            ViewColumn::Cpu => Constraint::Length(5),
            // as wide as the title; a cell is at most 5 characters ("1000k")
            ViewColumn::Rate(c) => Constraint::Length(c.header().len().max(6) as u16),
            ViewColumn::Place => Constraint::Min(12),
            ViewColumn::Findings => Constraint::Min(8),
        }
    }

    fn min_width(self) -> u16 {
        match self.width() {
            Constraint::Length(n) | Constraint::Min(n) => n,
            _ => 0,
        }
    }

    pub(super) fn text(self, row: &Row) -> String {
        let (pid, comm, place) = who(row);
        match self {
            ViewColumn::Pid if pid.is_empty() => "-".into(),
            ViewColumn::Pid => pid,
            ViewColumn::Mark if row.findings.is_empty() => " ".into(),
            ViewColumn::Mark => "!".into(),
            ViewColumn::Comm => comm,
            ViewColumn::Cpu => cpu_cell(row),
            ViewColumn::Rate(c) => cell(row, c),
            ViewColumn::Timeout => timeout_cell(row.median_timeout_seconds),
            ViewColumn::Place => place,
            ViewColumn::Findings => row.findings.join(","),
        }
    }
}

/// A cell: numbers right-aligned, names left.
pub(super) fn aligned(column: &ViewColumn, text: String) -> Cell<'static> {
    match column {
        ViewColumn::Rate(_) | ViewColumn::Cpu | ViewColumn::Timeout => {
            Cell::from(Line::from(text).right_aligned())
        }
        _ => Cell::from(text),
    }
}

/// The columns that fit `width` (one space between), in [`ViewColumn::order`]:
/// taken in [`ViewColumn::keep_rank`] order, the sorted one early, so that a
/// narrow screen drops whole columns instead of squeezing every one.
/// 120 columns hold them all (7 + 1 + 15 + 5 + 52 for the rates + 7 + 12 + 8,
/// 13 gaps).
pub(super) fn fitting_columns(width: u16, sorted: Option<Column>) -> Vec<ViewColumn> {
    let order = ViewColumn::order();
    let mut keep = order.clone();
    keep.sort_by_key(|c| c.keep_rank(sorted)); // stable: left to right within a rank
    let mut used = 0u16;
    let mut chosen = Vec::new();
    for column in keep {
        let need = column.min_width() + u16::from(!chosen.is_empty());
        if used + need > width && chosen.len() >= 3 {
            continue;
        }
        used += need;
        chosen.push(column);
    }
    order.into_iter().filter(|c| chosen.contains(c)).collect()
}

/// Lines `text` takes wrapped at word boundaries to `width` columns (as
/// the paragraph wraps it; a word longer than the width is split).
fn wrapped_lines(text: &str, width: usize) -> usize {
    let mut lines = 1;
    let mut used = 0;
    for word in text.split(' ') {
        let len = word.chars().count();
        if used > 0 && used + 1 + len <= width {
            used += 1 + len;
            continue;
        }
        if used == 0 && len <= width {
            used = len;
            continue;
        }
        if used > 0 {
            lines += 1; // the word goes down
        }
        let more = len.saturating_sub(1) / width; // and may take more lines
        lines += more;
        used = len - more * width;
    }
    lines
}

/// A bordered box over the middle of the screen, as tall as its lines
/// wrapped to its width (at most the screen).
pub(super) fn popup(frame: &mut Frame<'_>, title: &str, lines: Vec<Line<'_>>) {
    let area = frame.area();
    let width = area.width.saturating_sub(8).max(20).min(area.width);
    let inner = usize::from(width.saturating_sub(2)).max(1);
    let wrapped: usize = lines
        .iter()
        .map(|l| wrapped_lines(&l.to_string(), inner))
        .sum();
    let height = u16::try_from(wrapped)
        .unwrap_or(u16::MAX)
        .saturating_add(2)
        .min(area.height.saturating_sub(2))
        .max(3)
        .min(area.height);
    let rect = Rect {
        x: area.x + (area.width - width) / 2,
        y: area.y + (area.height - height) / 2,
        width,
        height,
    };
    frame.render_widget(Clear, rect);
    frame.render_widget(
        Paragraph::new(lines)
            .wrap(Wrap { trim: false })
            .block(Block::bordered().title(format!(" {title} "))),
        rect,
    );
}

#[cfg(test)]
mod tests {
    use super::{fitting_columns, wrapped_lines, Column, ViewColumn};

    #[test]
    fn a_narrow_screen_drops_whole_columns_keeping_the_sorted_one() {
        // every column fits where their widths and the gaps between them do
        // (however many columns the signals declare), and one less does not
        let all = ViewColumn::order();
        let wide = all.iter().map(|c| c.min_width()).sum::<u16>() + all.len() as u16 - 1;
        assert_eq!(fitting_columns(wide, None), all);
        assert!(fitting_columns(wide - 1, None).len() < all.len());
        let narrow = fitting_columns(58, Column::by_sort("tzstat"));
        let titles: Vec<&str> = narrow.iter().map(|c| c.title()).collect();
        // 7 + 1 + 15 + 5 + 8 (sorted) + 7 + 8, with the gaps: 57; no next column fits in 1
        assert_eq!(
            titles,
            ["PID", " ", "COMM", "CPU%", "CLOCK/s", "SIGMSK/s", "TZSTAT/s"]
        );
    }

    #[test]
    fn wrapping_counts_the_lines_words_push_down() {
        assert_eq!(wrapped_lines("", 10), 1);
        assert_eq!(wrapped_lines("abc def", 10), 1);
        // "abc def gh" fills 10; "ij" goes down
        assert_eq!(wrapped_lines("abc def gh ij", 10), 2);
        assert_eq!(wrapped_lines("abcdefghijklmnopqrstuvwxy", 10), 3);
    }
}
