//! Rendering: aligned tables for people, JSON for scripts, and number formats.
//!
//! Everything printed to stdout goes through [`write_stdout`] or a writer the caller flushes, so
//! a closed pipe (`runnel consume … | head`) ends the command quietly instead of panicking as
//! `println!` would.

use std::io::Write;

/// `--output`: how admin commands print their answer.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Output {
    /// Aligned columns for people.
    #[default]
    Table,
    /// The node's JSON answer, pretty-printed, for scripts.
    Json,
}

/// Columns separated by two spaces, each as wide as its widest cell; the last column is not
/// padded so lines carry no trailing blanks.
pub struct Table {
    headers: Vec<&'static str>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(headers: &[&'static str]) -> Table {
        Table { headers: headers.to_vec(), rows: Vec::new() }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        assert_eq!(cells.len(), self.headers.len(), "a row has one cell per column");
        self.rows.push(cells);
    }

    pub fn render(&self) -> String {
        let mut widths: Vec<usize> = self.headers.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(cell.chars().count());
            }
        }
        let mut out = String::new();
        let header: Vec<String> = self.headers.iter().map(|h| h.to_string()).collect();
        for row in std::iter::once(&header).chain(&self.rows) {
            let last = row.len() - 1;
            for (i, cell) in row.iter().enumerate() {
                out.push_str(cell);
                if i < last {
                    let pad = widths[i] - cell.chars().count() + 2;
                    out.extend(std::iter::repeat_n(' ', pad));
                }
            }
            out.push('\n');
        }
        out
    }
}

/// Writes `text` to stdout and flushes it.
pub fn write_stdout(text: &str) -> std::io::Result<()> {
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(text.as_bytes())?;
    stdout.flush()
}

pub fn print_json(value: &serde_json::Value) -> anyhow::Result<()> {
    let mut text = serde_json::to_string_pretty(value)?;
    text.push('\n');
    write_stdout(&text)?;
    Ok(())
}

/// `12.3 MiB`: binary units, as `du -h` and Kafka tooling print sizes.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// `47,600`: thousands separators for rates people read at a glance.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `1d 2h`, `3m 4s`, `5s`: an uptime.
pub fn human_duration_ms(ms: u64) -> String {
    let s = ms / 1000;
    let (d, h, m, s) = (s / 86_400, s / 3600 % 24, s / 60 % 60, s % 60);
    match (d, h, m) {
        (0, 0, 0) => format!("{s}s"),
        (0, 0, _) => format!("{m}m {s}s"),
        (0, _, _) => format!("{h}h {m}m"),
        _ => format!("{d}d {h}h"),
    }
}

/// `[1,2,3]`: replica lists as kafka-topics.sh prints them.
pub fn id_list(ids: &[i32]) -> String {
    ids.iter().map(|id| id.to_string()).collect::<Vec<_>>().join(",")
}

/// `2023-11-14T22:13:20.123Z`: a Unix time in milliseconds as RFC 3339 UTC (log lines).
pub fn rfc3339_ms(ms: i64) -> String {
    crate::http::format_rfc3339_ms(ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_format_for_people() {
        // Proves the thousands, binary-size and uptime formats of tables and the produce summary.
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(47_600), "47,600");
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(12_897_485), "12.3 MiB");
        assert_eq!(human_duration_ms(65_000), "1m 5s");
        assert_eq!(human_duration_ms(90_061_000), "1d 1h");
        assert_eq!(rfc3339_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339_ms(1_700_000_000_123), "2023-11-14T22:13:20.123Z");
        assert_eq!(rfc3339_ms(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(rfc3339_ms(-1), "1969-12-31T23:59:59.999Z");
    }

    #[test]
    fn table_aligns_columns_without_trailing_blanks() {
        // Proves columns align to their widest cell and lines end without padding.
        let mut table = Table::new(&["TOPIC", "PARTITIONS"]);
        table.row(vec!["orders".into(), "3".into()]);
        table.row(vec!["a".into(), "12".into()]);
        assert_eq!(table.render(), "TOPIC   PARTITIONS\norders  3\na       12\n");
    }
}
