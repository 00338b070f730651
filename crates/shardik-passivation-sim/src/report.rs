//! Results as the reference prints them (a box-drawn table) or as JSON lines.

use crate::replay::{Run, Stats};

fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Render results as a table (like the reference) or JSON lines.
pub fn render(results: &[(Run, Stats)], json: bool) -> String {
    if json {
        let mut out = String::new();
        for (run, s) in results {
            let v = serde_json::json!({
                "name": run.name,
                "policy": run.policy_name,
                "limit": run.per_region_limit,
                "shards": run.shards,
                "regions": run.regions,
                "accesses": s.accesses,
                "activations": s.activations,
                "passivations": s.passivations,
                "active_percent": (s.active_percent() * 100.0).round() / 100.0,
            });
            out.push_str(&v.to_string());
            out.push('\n');
        }
        return out;
    }
    let headers = ["Run", "Active", "Accesses", "Activations", "Passivations"];
    let rows: Vec<[String; 5]> = results
        .iter()
        .map(|(r, s)| {
            [
                r.name.clone(),
                format!("{:.2} %", s.active_percent()),
                thousands(s.accesses),
                thousands(s.activations),
                thousands(s.passivations),
            ]
        })
        .collect();
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (w, c) in widths.iter_mut().zip(row.iter()) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |l: &str, m: &str, r: &str, fill: &str| {
        let cells: Vec<String> = widths.iter().map(|w| fill.repeat(w + 2)).collect();
        format!("{l}{}{r}\n", cells.join(m))
    };
    let fmt_row = |cells: &[String]| {
        let cells: Vec<String> = cells
            .iter()
            .zip(widths.iter())
            .map(|(c, w)| format!(" {c:>w$} ", w = w))
            .collect();
        format!("║{}║\n", cells.join("│"))
    };
    let mut out = line("╔", "╤", "╗", "═");
    out.push_str(&fmt_row(&headers.map(String::from)));
    out.push_str(&line("╠", "╪", "╣", "═"));
    for (i, row) in rows.iter().enumerate() {
        if i > 0 {
            out.push_str(&line("╟", "┼", "╢", "─"));
        }
        out.push_str(&fmt_row(row));
    }
    out.push_str(&line("╚", "╧", "╝", "═"));
    out
}
