//! `--metrics-listen ADDR`: `GET /metrics` in the Prometheus text format (version 0.0.4).
//!
//! Served by a task on shard 0 through [`shards::side`] (on the io_uring path the shard's
//! driver accepts the socket with its own handler; on the glommio path a glommio listener), so
//! it runs on both socket paths and never starts a thread. A scrape gathers every shard's
//! [`ShardStats`] with the same mesh messages as `ringwire.shard_stats` (this shard asks
//! itself too), merges them (histograms add exactly) and renders the merged numbers; a shard
//! that does not answer within [`STATS_TIMEOUT`] is reported as `ringwire_shard_up{shard} 0`
//! and the scrape answers without it.
//!
//! Requests are parsed with `httparse` from at most [`REQUEST_BYTES_MAX`] bytes (431 past
//! that); anything but `GET`/`HEAD` is 405, any path but `/metrics` is 404, a request line
//! that does not parse is 400. One request per connection (`Connection: close`).
//!
//! The exposition is written here rather than through the `prometheus`/`prometheus-client`
//! crates: those record into their own (atomic) metric types, which would be a second
//! recording mechanism beside the per-shard histograms, and their histograms have fixed
//! buckets, while the format itself is four kinds of line.

use std::fmt::Write as _;
use std::future::Future;
use std::net::TcpListener;
use std::pin::Pin;
use std::rc::Rc;
use std::time::Duration;

use futures_lite::{AsyncReadExt, AsyncWriteExt};
use hdrhistogram::Histogram;
use shards::metrics::{series, KINDS, PROTOCOLS};
use shards::side::SideStream;

use crate::dispatch::{Dispatcher, Gathered, STATS_TIMEOUT};
use crate::stats;

/// Largest request (request line and headers) read; a scraper sends a few hundred bytes.
pub const REQUEST_BYTES_MAX: usize = 8 << 10;
/// A client that has not sent a whole request by then is dropped.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Histogram bucket bounds for durations, in seconds (Prometheus's default plus finer steps
/// below a millisecond, where ringwire's statements are).
const SECONDS_BUCKETS: [f64; 18] = [
    0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1,
    0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];
const BATCH_BUCKETS: [f64; 10] = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 1024.0];

/// Makes the body of one scrape (gathering from every shard as it needs).
pub type Scrape = Rc<dyn Fn() -> Pin<Box<dyn Future<Output = String>>>>;

/// Serve `listener` on this shard; scrapes gather through `dispatcher`.
pub fn spawn(listener: TcpListener, dispatcher: Rc<Dispatcher>) {
    spawn_with(
        listener,
        Rc::new(move || {
            let dispatcher = dispatcher.clone();
            Box::pin(async move { render(&dispatcher.gather_stats(None, STATS_TIMEOUT).await) })
        }),
    );
}

/// Serve `listener` on this shard with `scrape` making each `/metrics` body (upstream mode
/// has no dispatcher; it gathers its own, see `upstream::stats`).
pub fn spawn_with(listener: TcpListener, scrape: Scrape) {
    shards::side::serve(
        listener,
        Rc::new(move |stream| {
            let scrape = scrape.clone();
            glommio::spawn_local(async move {
                let served =
                    futures_lite::future::or(async { Some(serve(stream, &scrape).await) }, async {
                        shards::time::sleep(REQUEST_TIMEOUT + STATS_TIMEOUT).await;
                        None
                    })
                    .await;
                match served {
                    Some(Err(e)) => log::debug!("metrics endpoint: {e}"),
                    None => log::debug!("metrics endpoint: a client timed out"),
                    Some(Ok(())) => {}
                }
            })
            .detach();
        }),
    );
}

/// What a request asked for.
#[derive(Debug, PartialEq, Eq)]
pub enum Route {
    Metrics { head: bool },
    NotFound,
    MethodNotAllowed,
    BadRequest,
    TooLarge,
}

/// Route a complete or partial request; None: the headers are not complete yet.
pub fn route(buf: &[u8]) -> Option<Route> {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(buf) {
        Ok(httparse::Status::Partial) if buf.len() >= REQUEST_BYTES_MAX => Some(Route::TooLarge),
        Ok(httparse::Status::Partial) => None,
        Err(httparse::Error::TooManyHeaders) => Some(Route::TooLarge),
        Err(_) => Some(Route::BadRequest),
        Ok(httparse::Status::Complete(_)) => {
            let head = match req.method {
                Some("GET") => false,
                Some("HEAD") => true,
                _ => return Some(Route::MethodNotAllowed),
            };
            let path = req.path.unwrap_or("");
            let path = path.split_once('?').map_or(path, |(p, _)| p);
            Some(if path == "/metrics" {
                Route::Metrics { head }
            } else {
                Route::NotFound
            })
        }
    }
}

async fn serve(mut stream: SideStream, scrape: &Scrape) -> std::io::Result<()> {
    let mut buf = vec![0u8; REQUEST_BYTES_MAX];
    let mut len = 0;
    let route = loop {
        if let Some(route) = route(&buf[..len]) {
            break route;
        }
        let n = stream.read(&mut buf[len..]).await?;
        if n == 0 {
            return Ok(());
        }
        len += n;
    };
    let route_too_large = route == Route::TooLarge;
    let (status, extra, body, head) = match route {
        Route::Metrics { head } => ("200 OK", "", scrape().await, head),
        Route::NotFound => (
            "404 Not Found",
            "",
            "not found: try /metrics\n".into(),
            false,
        ),
        Route::MethodNotAllowed => (
            "405 Method Not Allowed",
            "Allow: GET, HEAD\r\n",
            "method not allowed\n".into(),
            false,
        ),
        Route::BadRequest => ("400 Bad Request", "", "bad request\n".into(), false),
        Route::TooLarge => (
            "431 Request Header Fields Too Large",
            "",
            format!("request larger than {REQUEST_BYTES_MAX} bytes\n"),
            false,
        ),
    };
    let content_type = if status.starts_with("200") {
        "text/plain; version=0.0.4; charset=utf-8"
    } else {
        "text/plain; charset=utf-8"
    };
    let mut reply = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n{extra}Connection: close\r\n\r\n",
        body.len()
    );
    if !head {
        reply.push_str(&body);
    }
    stream.write_all(reply.as_bytes()).await?;
    stream.flush().await?;
    if route_too_large {
        // Closing with the rest of an oversized request unread would make the kernel send a
        // reset, which can destroy the 431 before the client reads it: read and drop a bounded
        // amount first (the client normally stops sending once it sees the reply).
        let drain = async {
            let mut total = 0;
            while total < DRAIN_BYTES_MAX {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => total += n,
                }
            }
        };
        futures_lite::future::or(drain, shards::time::sleep(DRAIN_TIMEOUT)).await;
    }
    Ok(())
}

/// What is read and dropped after a 431, at most, and for how long.
const DRAIN_BYTES_MAX: usize = 1 << 20;
const DRAIN_TIMEOUT: Duration = Duration::from_secs(1);

/// The Prometheus text exposition of a gather: merged over the shards that answered.
pub fn render(gathered: &Gathered) -> String {
    let mut out = String::with_capacity(32 << 10);
    let shards = gathered.stats.len() + gathered.missing.len();
    family(
        &mut out,
        "ringwire_shard_up",
        "gauge",
        "1 if the shard answered this scrape in time, 0 if not (its numbers are missing below).",
    );
    for s in 0..shards {
        let up = !gathered.missing.contains(&s);
        let _ = writeln!(out, "ringwire_shard_up{{shard=\"{s}\"}} {}", up as u8);
    }
    let Some(m) = stats::merge(&gathered.stats) else {
        return out;
    };
    let sv = &m.serving;
    family(
        &mut out,
        "ringwire_metrics_enabled",
        "gauge",
        "1 if per-statement recording is on (--metrics on).",
    );
    let _ = writeln!(out, "ringwire_metrics_enabled {}", sv.enabled as u8);

    family(&mut out, "ringwire_statements_total", "counter", "Statements run: simple Query messages and extended-protocol Executes, by the kind their CommandComplete tag names (errors count as other).");
    for (p, pname) in PROTOCOLS {
        for (k, kname) in KINDS {
            let _ = writeln!(
                out,
                "ringwire_statements_total{{protocol=\"{pname}\",kind=\"{kname}\"}} {}",
                sv.statements[series(p, k)]
            );
        }
    }
    let name = "ringwire_statement_duration_seconds";
    family(
        &mut out,
        name,
        "histogram",
        "Time to run a statement, from its message to its reply being buffered.",
    );
    for (p, pname) in PROTOCOLS {
        for (k, kname) in KINDS {
            let i = series(p, k);
            let labels = format!("protocol=\"{pname}\",kind=\"{kname}\"");
            histogram(
                &mut out,
                name,
                &labels,
                &sv.latency_us[i],
                sv.latency_sum_us[i] as f64 / 1e6,
                1e-6,
                &SECONDS_BUCKETS,
            );
        }
    }
    quantile_family(
        &mut out,
        name,
        &m.latencies()[..PROTOCOLS.len() * KINDS.len()],
    );

    let name = "ringwire_first_byte_seconds";
    family(
        &mut out,
        name,
        "histogram",
        "Time from receiving a batch of messages to handing the first reply bytes to the socket.",
    );
    histogram(
        &mut out,
        name,
        "",
        &sv.first_byte_us,
        sv.first_byte_sum_us as f64 / 1e6,
        1e-6,
        &SECONDS_BUCKETS,
    );
    single_quantiles(&mut out, name, &sv.first_byte_us, 1e-6);

    estimated_seconds(
        &mut out,
        "ringwire_dispatch_round_trip_seconds",
        "Time from queuing a request for the compute on another shard to its reply (sum estimated from the histogram).",
        &m.engine.round_trip_us,
    );
    estimated_seconds(
        &mut out,
        "ringwire_compute_peek_seconds",
        "Time the compute spends running one read (sum estimated from the histogram).",
        &m.engine.peek_us,
    );

    let name = "ringwire_dispatch_batch_size";
    family(
        &mut out,
        name,
        "histogram",
        "Requests per mesh message sent to the compute.",
    );
    let h = &m.engine.batch_sizes;
    histogram(&mut out, name, "", h, estimated_sum(h), 1.0, &BATCH_BUCKETS);

    let counters: [(&str, &str, u64); 18] = [
        (
            "ringwire_connections_opened_total",
            "Connections accepted.",
            sv.connections_opened,
        ),
        (
            "ringwire_connections_closed_total",
            "Connections ended.",
            sv.connections_closed,
        ),
        (
            "ringwire_connections_rejected_total",
            "Connections refused by --max-connections (also counted opened and closed).",
            sv.connections_rejected,
        ),
        (
            "ringwire_received_bytes_total",
            "Bytes received from clients after startup.",
            sv.bytes_in,
        ),
        (
            "ringwire_sent_bytes_total",
            "Bytes of replies handed to sockets after startup.",
            sv.bytes_out,
        ),
        (
            "ringwire_executor_stalls_total",
            "Driver turns that came 10 ms or more after the previous one (io_uring path only).",
            sv.stalls,
        ),
        (
            "ringwire_oracle_fast_path_hits_total",
            "Read timestamps taken from the shard's own frontier slot.",
            m.oracle_hits,
        ),
        (
            "ringwire_oracle_fast_path_misses_total",
            "Snapshots retaken after racing a compaction.",
            m.oracle_misses,
        ),
        (
            "ringwire_serializable_reads_total",
            "Reads at the compute's latest timestamp.",
            m.latest_reads,
        ),
        (
            "ringwire_compute_direct_requests_total",
            "Requests the compute answered on its own shard.",
            m.direct_requests,
        ),
        (
            "ringwire_dispatch_batches_sent_total",
            "Mesh messages carrying requests to the compute.",
            m.batches_sent,
        ),
        (
            "ringwire_dispatch_requests_sent_total",
            "Requests sent to the compute in those messages.",
            m.requests_sent,
        ),
        (
            "ringwire_replica_hits_total",
            "Reads served by a shard's read replica without a message.",
            m.replica_hits,
        ),
        (
            "ringwire_replica_stale_total",
            "Reads that found their shard's replica behind and waited for it to catch up.",
            m.replica_stale,
        ),
        (
            "ringwire_replica_fallbacks_total",
            "Reads a replica had compacted past (sent to the compute).",
            m.replica_fallbacks,
        ),
        (
            "ringwire_plan_cache_hits_total",
            "Plan-cache hits.",
            m.plan_cache_hits,
        ),
        (
            "ringwire_plan_cache_misses_total",
            "Plan-cache misses.",
            m.plan_cache_misses,
        ),
        (
            "ringwire_executor_stall_microseconds_total",
            "Time lost to executor stalls.",
            sv.stall_us_total,
        ),
    ];
    for (name, help, value) in counters {
        family(&mut out, name, "counter", help);
        let _ = writeln!(out, "{name} {value}");
    }
    let gauges: [(&str, &str, u64); 3] = [
        (
            "ringwire_connections_open",
            "Connections open now.",
            sv.connections_open(),
        ),
        (
            "ringwire_open_snapshots",
            "Transaction blocks holding a snapshot.",
            m.open_snapshots,
        ),
        (
            "ringwire_executor_stall_microseconds_max",
            "Longest executor stall.",
            sv.stall_us_max,
        ),
    ];
    for (name, help, value) in gauges {
        family(&mut out, name, "gauge", help);
        let _ = writeln!(out, "{name} {value}");
    }
    family(
        &mut out,
        "ringwire_errors_total",
        "counter",
        "ErrorResponses sent to clients, by SQLSTATE.",
    );
    for (code, n) in &sv.errors {
        let _ = writeln!(out, "ringwire_errors_total{{sqlstate=\"{code}\"}} {n}");
    }
    family(
        &mut out,
        "ringwire_shard_statements_total",
        "counter",
        "Statements run, per shard.",
    );
    for s in &gathered.stats {
        let n: u64 = s.serving.statements.iter().sum();
        let _ = writeln!(
            out,
            "ringwire_shard_statements_total{{shard=\"{}\"}} {n}",
            s.shard
        );
    }
    family(
        &mut out,
        "ringwire_shard_connections_open",
        "gauge",
        "Connections open now, per shard.",
    );
    for s in &gathered.stats {
        let _ = writeln!(
            out,
            "ringwire_shard_connections_open{{shard=\"{}\"}} {}",
            s.shard,
            s.serving.connections_open()
        );
    }
    out
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// hdrhistogram keeps no exact sum; its mean is within its 1% resolution.
/// A histogram family of microsecond samples exported in seconds, whose `_sum` is estimated
/// from the histogram (nothing records the exact sum), with its quantile gauges.
fn estimated_seconds(out: &mut String, name: &str, help: &str, h: &Histogram<u64>) {
    family(out, name, "histogram", help);
    histogram(
        out,
        name,
        "",
        h,
        estimated_sum(h) / 1e6,
        1e-6,
        &SECONDS_BUCKETS,
    );
    single_quantiles(out, name, h, 1e-6);
}

fn estimated_sum(h: &Histogram<u64>) -> f64 {
    if h.is_empty() {
        0.0
    } else {
        h.mean() * h.len() as f64
    }
}

/// Cumulative buckets, `_sum` and `_count` of `h`, whose values times `scale` are in the
/// exported unit.
fn histogram(
    out: &mut String,
    name: &str,
    labels: &str,
    h: &Histogram<u64>,
    sum: f64,
    scale: f64,
    buckets: &[f64],
) {
    let sep = if labels.is_empty() { "" } else { "," };
    for le in buckets {
        let bound = (le / scale).round() as u64;
        let count = if h.is_empty() {
            0
        } else {
            h.count_between(0, bound)
        };
        let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"{le}\"}} {count}");
    }
    let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {}", h.len());
    let braces = if labels.is_empty() {
        String::new()
    } else {
        format!("{{{labels}}}")
    };
    let _ = writeln!(out, "{name}_sum{braces} {sum}");
    let _ = writeln!(out, "{name}_count{braces} {}", h.len());
}

const QUANTILES: [(f64, &str); 3] = [(0.5, "0.5"), (0.99, "0.99"), (0.999, "0.999")];

/// `NAME_quantile{...,quantile="q"}` gauges for every statement series.
fn quantile_family(
    out: &mut String,
    name: &str,
    series: &[(&str, &str, &Histogram<u64>, Option<u64>)],
) {
    let _ = writeln!(out, "# HELP {name}_quantile p50/p99/p99.9 of {name}, merged over shards.\n# TYPE {name}_quantile gauge");
    for (p, k, h, _) in series {
        for (q, qs) in QUANTILES {
            let _ = writeln!(
                out,
                "{name}_quantile{{protocol=\"{p}\",kind=\"{k}\",quantile=\"{qs}\"}} {}",
                h.value_at_quantile(q) as f64 * 1e-6
            );
        }
    }
}

fn single_quantiles(out: &mut String, name: &str, h: &Histogram<u64>, scale: f64) {
    let _ = writeln!(out, "# HELP {name}_quantile p50/p99/p99.9 of {name}, merged over shards.\n# TYPE {name}_quantile gauge");
    for (q, qs) in QUANTILES {
        let _ = writeln!(
            out,
            "{name}_quantile{{quantile=\"{qs}\"}} {}",
            h.value_at_quantile(q) as f64 * scale
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        assert_eq!(
            route(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"),
            Some(Route::Metrics { head: false })
        );
        assert_eq!(
            route(b"GET /metrics?x=1 HTTP/1.0\r\n\r\n"),
            Some(Route::Metrics { head: false })
        );
        assert_eq!(route(b"GET /other HTTP/1.1\r\n\r\n"), Some(Route::NotFound));
        assert_eq!(
            route(b"POST /metrics HTTP/1.1\r\n\r\n"),
            Some(Route::MethodNotAllowed)
        );
        assert_eq!(route(b"GET /metrics HTTP/1.1\r\nHost"), None);
        assert_eq!(route(b"\x01\x02 nonsense\r\n\r\n"), Some(Route::BadRequest));
        let big = format!(
            "GET /metrics HTTP/1.1\r\nX: {}",
            "a".repeat(REQUEST_BYTES_MAX)
        );
        assert_eq!(route(big.as_bytes()), Some(Route::TooLarge));
    }
}
