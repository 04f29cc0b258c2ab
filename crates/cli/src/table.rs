//! Human output: left-aligned columns sized to their widest cell, and JSON cells as text.

use serde_json::Value;

/// Renders `header` and `rows` as aligned columns separated by two spaces.
pub fn render(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let header: Vec<String> = header.iter().map(|h| h.to_string()).collect();
    for row in std::iter::once(&header).chain(rows) {
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

/// A JSON value as a table cell: strings bare, null as `-`, the rest as JSON text.
pub fn cell(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
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
    fn cells_show_strings_bare_and_null_as_dash() {
        assert_eq!(cell(&json!("a")), "a");
        assert_eq!(cell(&json!(null)), "-");
        assert_eq!(cell(&json!(7)), "7");
    }
}
