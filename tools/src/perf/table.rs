//! The nccl-tests result table.

/// One measured row.
#[derive(Debug, Clone)]
pub struct Row {
    /// Bytes per rank.
    pub size: usize,
    /// Elements.
    pub count: usize,
    /// Element type name.
    pub dtype: &'static str,
    /// Reduction name or `none`.
    pub redop: &'static str,
    /// Root or -1.
    pub root: i64,
    /// Out-of-place: average time per iteration in µs (max over ranks).
    pub time_us: f64,
    /// Algorithm bandwidth GB/s.
    pub algbw: f64,
    /// Bus bandwidth GB/s.
    pub busbw: f64,
    /// Wrong elements over all ranks, `None` when not checked.
    pub wrong: Option<u64>,
}

/// Header lines.
pub fn header() -> String {
    let mut s = String::new();
    s.push_str("#\n");
    s.push_str(&format!(
        "#{:>12} {:>12} {:>8} {:>7} {:>6}  {:>9} {:>8} {:>8} {:>6}  {:>9} {:>8} {:>8} {:>6}\n",
        "", "", "", "", "", "out-of-place", "", "", "", "in-place", "", "", ""
    ));
    s.push_str(&format!(
        "#{:>12} {:>12} {:>8} {:>7} {:>6}  {:>9} {:>8} {:>8} {:>6}  {:>9} {:>8} {:>8} {:>6}\n",
        "size",
        "count",
        "type",
        "redop",
        "root",
        "time",
        "algbw",
        "busbw",
        "#wrong",
        "time",
        "algbw",
        "busbw",
        "#wrong"
    ));
    s.push_str(&format!(
        "#{:>12} {:>12} {:>8} {:>7} {:>6}  {:>9} {:>8} {:>8} {:>6}  {:>9} {:>8} {:>8} {:>6}",
        "(B)",
        "(elements)",
        "",
        "",
        "",
        "(us)",
        "(GB/s)",
        "(GB/s)",
        "",
        "(us)",
        "(GB/s)",
        "(GB/s)",
        ""
    ));
    s
}

/// One table line (in-place columns are `N/A`: sendrecv has no in-place form here).
pub fn line(r: &Row) -> String {
    let wrong = r.wrong.map_or("N/A".to_string(), |w| w.to_string());
    format!(
        " {:>12} {:>12} {:>8} {:>7} {:>6}  {:>9.2} {:>8.2} {:>8.2} {:>6}  {:>9} {:>8} {:>8} {:>6}",
        r.size,
        r.count,
        r.dtype,
        r.redop,
        r.root,
        r.time_us,
        r.algbw,
        r.busbw,
        wrong,
        "N/A",
        "N/A",
        "N/A",
        "N/A"
    )
}

/// Footer with the average bus bandwidth.
pub fn footer(rows: &[Row]) -> String {
    let wrong: u64 = rows.iter().filter_map(|r| r.wrong).sum();
    let avg = if rows.is_empty() {
        0.0
    } else {
        rows.iter().map(|r| r.busbw).sum::<f64>() / rows.len() as f64
    };
    format!(
        "# Out of bounds values : {wrong} {}\n# Avg bus bandwidth    : {avg:.4}\n#",
        if wrong == 0 { "OK" } else { "FAILED" }
    )
}

/// Results as JSON (no external crates: the format is simple).
pub fn json(op: &str, nranks: usize, rows: &[Row]) -> String {
    let items: Vec<String> = rows
        .iter()
        .map(|r| {
            format!(
                "{{\"size\":{},\"count\":{},\"type\":\"{}\",\"redop\":\"{}\",\"root\":{},\"time_us\":{:.3},\"algbw\":{:.4},\"busbw\":{:.4},\"wrong\":{}}}",
                r.size,
                r.count,
                r.dtype,
                r.redop,
                r.root,
                r.time_us,
                r.algbw,
                r.busbw,
                r.wrong.map_or("null".into(), |w| w.to_string())
            )
        })
        .collect();
    format!(
        "{{\"op\":\"{op}\",\"nranks\":{nranks},\"results\":[{}]}}\n",
        items.join(",")
    )
}
