//! The nccl-tests result table.

/// One placement's measurement (out-of-place or in-place).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timing {
    /// Average time per iteration in µs (max over ranks).
    pub time_us: f64,
    /// Algorithm bandwidth GB/s.
    pub algbw: f64,
    /// Bus bandwidth GB/s.
    pub busbw: f64,
    /// Wrong elements over all ranks, `None` when not checked.
    pub wrong: Option<u64>,
}

/// One measured row.
#[derive(Debug, Clone)]
pub struct Row {
    /// Bytes: the larger of one rank's send and receive buffers (nccl-tests' `size`).
    pub size: usize,
    /// Elements: the collective's `count` argument.
    pub count: usize,
    /// Element type name.
    pub dtype: &'static str,
    /// Reduction name or `none`.
    pub redop: &'static str,
    /// Root or -1.
    pub root: i64,
    /// Out-of-place.
    pub oop: Timing,
    /// In-place (`None`: the benchmark has no in-place form).
    pub ip: Option<Timing>,
}

const COLS: [&str; 13] = [
    "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw",
    "busbw", "#wrong",
];
const UNITS: [&str; 13] = [
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
    "",
];

fn columns(c: &[&str; 13]) -> String {
    format!(
        "#{:>12} {:>12} {:>8} {:>7} {:>6}  {:>9} {:>8} {:>8} {:>6}  {:>9} {:>8} {:>8} {:>6}",
        c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8], c[9], c[10], c[11], c[12]
    )
}

/// Header lines.
pub fn header() -> String {
    format!(
        "#\n#{:>12} {:>12} {:>8} {:>7} {:>6}  {:^35}  {:^35}\n{}\n{}",
        "",
        "",
        "",
        "",
        "",
        "out-of-place",
        "in-place",
        columns(&COLS),
        columns(&UNITS)
    )
}

fn cells(t: Option<&Timing>) -> String {
    match t {
        Some(t) => format!(
            "{:>9.2} {:>8.2} {:>8.2} {:>6}",
            t.time_us,
            t.algbw,
            t.busbw,
            t.wrong.map_or("N/A".to_string(), |w| w.to_string())
        ),
        None => format!("{:>9} {:>8} {:>8} {:>6}", "N/A", "N/A", "N/A", "N/A"),
    }
}

/// One table line.
pub fn line(r: &Row) -> String {
    format!(
        " {:>12} {:>12} {:>8} {:>7} {:>6}  {}  {}",
        r.size,
        r.count,
        r.dtype,
        r.redop,
        r.root,
        cells(Some(&r.oop)),
        cells(r.ip.as_ref())
    )
}

/// Wrong elements over every row and placement.
pub fn total_wrong(rows: &[Row]) -> u64 {
    rows.iter()
        .flat_map(|r| [Some(r.oop), r.ip])
        .flatten()
        .filter_map(|t| t.wrong)
        .sum()
}

/// Footer: wrong elements and the average bus bandwidth over every measured
/// placement (as nccl-tests averages over out-of-place and in-place).
pub fn footer(rows: &[Row]) -> String {
    let wrong = total_wrong(rows);
    let bws: Vec<f64> = rows
        .iter()
        .flat_map(|r| [Some(r.oop), r.ip])
        .flatten()
        .map(|t| t.busbw)
        .collect();
    let avg = if bws.is_empty() {
        0.0
    } else {
        bws.iter().sum::<f64>() / bws.len() as f64
    };
    format!(
        "# Out of bounds values : {wrong} {}\n# Avg bus bandwidth    : {avg:.4}\n#",
        if wrong == 0 { "OK" } else { "FAILED" }
    )
}

fn json_timing(t: Option<&Timing>) -> String {
    match t {
        Some(t) => format!(
            "{{\"time_us\":{:.3},\"algbw\":{:.4},\"busbw\":{:.4},\"wrong\":{}}}",
            t.time_us,
            t.algbw,
            t.busbw,
            t.wrong.map_or("null".into(), |w| w.to_string())
        ),
        None => "null".into(),
    }
}

/// Results as JSON (no external crates: the format is simple). Each row keeps
/// the out-of-place numbers at its top level too (`time_us`, `algbw`, `busbw`,
/// `wrong`), as the sendrecv-only format had them.
pub fn json(op: &str, nranks: usize, rows: &[Row]) -> String {
    let items: Vec<String> = rows
        .iter()
        .map(|r| {
            format!(
                "{{\"op\":\"{op}\",\"nranks\":{nranks},\"size\":{},\"count\":{},\"type\":\"{}\",\"redop\":\"{}\",\"root\":{},\"time_us\":{:.3},\"algbw\":{:.4},\"busbw\":{:.4},\"wrong\":{},\"out_of_place\":{},\"in_place\":{}}}",
                r.size,
                r.count,
                r.dtype,
                r.redop,
                r.root,
                r.oop.time_us,
                r.oop.algbw,
                r.oop.busbw,
                r.oop.wrong.map_or("null".into(), |w| w.to_string()),
                json_timing(Some(&r.oop)),
                json_timing(r.ip.as_ref())
            )
        })
        .collect();
    format!(
        "{{\"op\":\"{op}\",\"nranks\":{nranks},\"results\":[{}]}}\n",
        items.join(",")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_has_thirteen_columns() {
        let t = Timing {
            time_us: 1.5,
            algbw: 2.0,
            busbw: 3.0,
            wrong: Some(0),
        };
        let mut r = Row {
            size: 64,
            count: 16,
            dtype: "float",
            redop: "sum",
            root: -1,
            oop: t,
            ip: Some(t),
        };
        assert_eq!(line(&r).split_whitespace().count(), 13);
        r.ip = None;
        let l = line(&r);
        assert_eq!(l.split_whitespace().count(), 13);
        assert!(l.ends_with("N/A"));
        let h = header();
        assert_eq!(
            h.lines().nth(2).unwrap().split_whitespace().count(),
            14 // '#' + 13 names
        );
        assert!(footer(&[r.clone()]).contains("Out of bounds values : 0 OK"));
        let j = json("all_reduce", 2, &[r]);
        assert!(j.contains("\"in_place\":null") && j.contains("\"out_of_place\":{"));
    }
}
