//! Human output: left-aligned columns sized to their widest cell, and JSON cells as text.
//! Every cell is made [`printable`] first: stored strings (queue names, error messages of dead
//! letters) are whatever a client sent, and a terminal must not run their escape sequences.

use serde_json::Value;

/// Renders `header` and `rows` as aligned columns separated by two spaces.
pub fn render(header: &[&str], rows: &[Vec<String>]) -> String {
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|row| row.iter().map(|c| printable(c)).collect())
        .collect();
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let header: Vec<String> = header.iter().map(|h| h.to_string()).collect();
    for row in std::iter::once(&header).chain(&rows) {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// A JSON value as a table cell: strings bare (but [`printable`]), null as `-`, the rest as
/// JSON text.
pub fn cell(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => printable(s),
        other => other.to_string(),
    }
}

/// `text` with every control character (ESC, CR, newline, C1 controls…) and every bidi
/// override written as its Rust escape (`\u{1b}`), so printing it cannot move the cursor,
/// recolour or retitle the terminal, or reorder what follows. Text without them is unchanged,
/// so applying it twice changes nothing more.
pub fn printable(text: &str) -> String {
    let unsafe_char =
        |c: char| c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
    if !text.chars().any(unsafe_char) {
        return text.to_string();
    }
    text.chars()
        .map(|c| {
            if unsafe_char(c) {
                c.escape_unicode().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn columns_align_to_the_widest_cell() {
        let rows = vec![
            vec!["orders".to_string(), "3".to_string()],
            vec!["q".to_string(), "12345".to_string()],
        ];
        assert_eq!(
            render(&["NAME", "N"], &rows),
            "NAME    N\norders  3\nq       12345\n"
        );
    }

    #[test]
    fn terminal_escapes_in_stored_strings_are_shown_not_run() {
        let hostile = "boom\u{1b}]0;owned\u{7}\u{1b}[2J\r\nFAKE\u{9b}31m\u{202e}txt";
        let shown = cell(&json!(hostile));
        assert!(!shown.chars().any(char::is_control), "{shown:?}");
        assert!(!shown.contains('\u{202e}'), "{shown:?}");
        assert_eq!(
            shown,
            "boom\\u{1b}]0;owned\\u{7}\\u{1b}[2J\\u{d}\\u{a}FAKE\\u{9b}31m\\u{202e}txt"
        );
        let rows = vec![vec![hostile.to_string()]];
        let table = render(&["ERROR"], &rows);
        assert_eq!(
            table,
            format!("ERROR\n{shown}\n"),
            "render escapes raw cells too"
        );
        assert_eq!(printable(&shown), shown, "idempotent");
        assert_eq!(printable("plain é ✓"), "plain é ✓");
    }

    #[test]
    fn cells_show_strings_bare_and_null_as_dash() {
        assert_eq!(cell(&json!("a")), "a");
        assert_eq!(cell(&json!(null)), "-");
        assert_eq!(cell(&json!(7)), "7");
    }
}
