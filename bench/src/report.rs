//! Turning a [`LevelResult`] into numbers: a table row for people, or one JSON object per line.

use serde_json::{json, Map, Value};

use crate::config::BenchConfig;
use crate::runner::LevelResult;

/// Show at most this many lost-connection messages per level; the count covers the rest.
const LOST_LINES_SHOWN: usize = 5;

pub struct LevelReport {
    pub concurrency: usize,
    pub threads: usize,
    pub mode: &'static str,
    pub pipeline: usize,
    pub duration_s: f64,
    pub queries: u64,
    pub qps: f64,
    pub mean_us: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
    pub errors: u64,
    /// `(SQLSTATE, count, first message)`.
    pub errors_by_sqlstate: Vec<(String, u64, String)>,
    pub lost: Vec<String>,
    /// Client CPU per completed query (successful or failed), µs; None if nothing completed.
    pub cpu_us_per_query: Option<f64>,
    /// Client CPU time over wall time: how many cores the generator itself used.
    pub cpu_cores: f64,
    pub allocs_per_query: Option<f64>,
    pub setup_error: Option<String>,
}

impl LevelReport {
    pub fn new(cfg: &BenchConfig, r: LevelResult) -> LevelReport {
        let us = |ns: u64| ns as f64 / 1000.0;
        let h = &r.latency_ns;
        let seconds = r.window.as_secs_f64();
        let errors: u64 = r.errors.iter().map(|(_, n, _)| n).sum();
        let completed = r.queries + errors;
        let per_query = |x: f64| (completed > 0).then(|| x / completed as f64);
        LevelReport {
            concurrency: r.concurrency,
            threads: r.threads,
            mode: cfg.workload.mode.as_str(),
            pipeline: cfg.pipeline,
            duration_s: seconds,
            queries: r.queries,
            qps: if r.setup_error.is_some() {
                0.0
            } else {
                r.queries as f64 / seconds
            },
            mean_us: if h.is_empty() { 0.0 } else { h.mean() / 1000.0 },
            p50_us: us(h.value_at_quantile(0.50)),
            p99_us: us(h.value_at_quantile(0.99)),
            p999_us: us(h.value_at_quantile(0.999)),
            max_us: us(h.max()),
            errors,
            errors_by_sqlstate: r.errors,
            lost: r.lost,
            cpu_us_per_query: per_query(r.cpu.as_secs_f64() * 1e6),
            cpu_cores: r.cpu.as_secs_f64() / seconds,
            allocs_per_query: r.allocations.and_then(|a| per_query(a as f64)),
            setup_error: r.setup_error,
        }
    }

    pub fn json(&self) -> Value {
        let round = |x: f64| (x * 10.0).round() / 10.0;
        let mut by_code = Map::new();
        for (code, n, _) in &self.errors_by_sqlstate {
            by_code.insert(code.clone(), json!(n));
        }
        let mut v = json!({
            "concurrency": self.concurrency,
            "threads": self.threads,
            "mode": self.mode,
            "pipeline": self.pipeline,
            "duration_s": self.duration_s,
            "queries": self.queries,
            "qps": round(self.qps),
            "mean_us": round(self.mean_us),
            "p50_us": round(self.p50_us),
            "p99_us": round(self.p99_us),
            "p999_us": round(self.p999_us),
            "max_us": round(self.max_us),
            "errors": self.errors,
            "errors_by_sqlstate": by_code,
            "connections_lost": self.lost.len(),
            "client_cpu_us_per_query": self.cpu_us_per_query.map(|x| (x * 100.0).round() / 100.0),
            "client_cpu_cores": (self.cpu_cores * 1000.0).round() / 1000.0,
            "client_allocs_per_query": self.allocs_per_query.map(|x| (x * 1000.0).round() / 1000.0),
        });
        if let Some(e) = &self.setup_error {
            v["error"] = json!(e);
        }
        v
    }

    pub fn table_header() -> String {
        format!(
            "{:>6} {:>11} {:>9} {:>9} {:>9} {:>9} {:>9} {:>7} {:>5} {:>9} {:>9}",
            "conns",
            "qps",
            "mean_us",
            "p50_us",
            "p99_us",
            "p99.9_us",
            "max_us",
            "errors",
            "lost",
            "cpu_us/q",
            "allocs/q"
        )
    }

    /// The row, then indented lines for errors (stdout) — lost connections go to stderr.
    pub fn table_row(&self) -> String {
        if let Some(e) = &self.setup_error {
            return format!("{:>6} not measured: {e}", self.concurrency);
        }
        let opt =
            |x: Option<f64>, digits: usize| x.map_or("-".to_string(), |v| format!("{v:.digits$}"));
        let mut s = format!(
            "{:>6} {:>11.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>7} {:>5} {:>9} {:>9}",
            self.concurrency,
            self.qps,
            self.mean_us,
            self.p50_us,
            self.p99_us,
            self.p999_us,
            self.max_us,
            self.errors,
            self.lost.len(),
            opt(self.cpu_us_per_query, 2),
            opt(self.allocs_per_query, 3),
        );
        for (code, n, message) in &self.errors_by_sqlstate {
            s.push_str(&format!("\n{:>6} {code} x{n}: {message}", ""));
        }
        s
    }

    /// Lines for stderr about connections that broke.
    pub fn lost_lines(&self) -> Vec<String> {
        let mut lines: Vec<String> = self
            .lost
            .iter()
            .take(LOST_LINES_SHOWN)
            .map(|l| format!("ringwire-bench: concurrency {}: {l}", self.concurrency))
            .collect();
        if self.lost.len() > LOST_LINES_SHOWN {
            lines.push(format!(
                "ringwire-bench: concurrency {}: ... and {} more connections lost",
                self.concurrency,
                self.lost.len() - LOST_LINES_SHOWN
            ));
        }
        lines
    }
}
