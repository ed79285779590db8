//! The daemons' Prometheus endpoint (`--metrics ADDR`): on each scrape a
//! daemon fills a [`Scrape`] from its statistics, rendered in Prometheus's
//! text format (0.0.4), which Prometheus and `promtool check metrics`
//! read. Names follow node_exporter's conventions: a `farmem_` prefix, the
//! unit in the name (`_bytes`, `_seconds`), counters ending in `_total`,
//! one label set per node or client.
//!
//! Rendered here rather than by prometheus-client: that crate writes only
//! OpenMetrics, whose counter families drop the `_total` suffix, and the
//! promtool of Debian's prometheus package (2.42) reads the classic format
//! and flags every such counter as having no help text.
//!
//! The endpoint answers `GET /metrics` one request at a time on its own
//! thread: scrapes are rare, and a slow scraper only delays the next one.

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use farmem_core::{Buckets, LatencyHistogram};

use crate::server::ServerStats;

/// Upper bounds of the latency histograms' buckets, in ns: 1 µs to 10 s,
/// finer where faults and requests fall (10-500 µs).
pub const LATENCY_BOUNDS_NS: [u64; 16] = [
    1_000,
    5_000,
    10_000,
    20_000,
    50_000,
    100_000,
    200_000,
    500_000,
    1_000_000,
    2_000_000,
    5_000_000,
    10_000_000,
    100_000_000,
    1_000_000_000,
    5_000_000_000,
    10_000_000_000,
];

/// How long a scraper may take to send its request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

#[derive(Debug, Clone)]
enum Value {
    Counter(u64),
    Gauge(f64),
    /// Per-bucket counts with their upper bounds (seconds; the last
    /// +Inf), the sum in seconds and the count.
    Histogram {
        buckets: Vec<(f64, u64)>,
        sum: f64,
        count: u64,
    },
}

impl Value {
    fn type_name(&self) -> &'static str {
        match self {
            Value::Counter(_) => "counter",
            Value::Gauge(_) => "gauge",
            Value::Histogram { .. } => "histogram",
        }
    }
}

#[derive(Debug, Clone)]
struct Sample {
    labels: Vec<(String, String)>,
    value: Value,
}

#[derive(Debug, Clone)]
struct Family {
    name: String,
    help: String,
    samples: Vec<Sample>,
}

/// One scrape's metrics. Samples of one name form one family; give each
/// its own labels.
#[derive(Debug, Clone, Default)]
pub struct Scrape {
    families: Vec<Family>,
}

impl Scrape {
    fn push(&mut self, name: &str, help: &str, labels: &[(&str, &str)], value: Value) {
        let labels = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let sample = Sample { labels, value };
        match self.families.iter_mut().find(|f| f.name == name) {
            Some(f) => f.samples.push(sample),
            None => self.families.push(Family {
                name: name.into(),
                help: help.into(),
                samples: vec![sample],
            }),
        }
    }

    /// A count that only grows; `name` without `_total`, which is added.
    pub fn counter(&mut self, name: &str, help: &str, labels: &[(&str, &str)], v: u64) {
        self.push(name, help, labels, Value::Counter(v));
    }

    pub fn gauge(&mut self, name: &str, help: &str, labels: &[(&str, &str)], v: f64) {
        self.push(name, help, labels, Value::Gauge(v));
    }

    /// A latency histogram, in seconds (`name` should end in `_seconds`),
    /// in buckets of [`LATENCY_BOUNDS_NS`].
    pub fn latency(
        &mut self,
        name: &str,
        help: &str,
        labels: &[(&str, &str)],
        h: &LatencyHistogram,
    ) {
        self.histogram(name, help, labels, &h.buckets(&LATENCY_BOUNDS_NS));
    }

    /// A histogram of nanoseconds already in buckets, in seconds.
    pub fn histogram(&mut self, name: &str, help: &str, labels: &[(&str, &str)], b: &Buckets) {
        let bounds = b
            .upper_ns
            .iter()
            .map(|&ns| ns as f64 / 1e9)
            .chain(std::iter::once(f64::INFINITY));
        let value = Value::Histogram {
            buckets: bounds.zip(b.counts.iter().copied()).collect(),
            sum: b.sum_ns / 1e9,
            count: b.count,
        };
        self.push(name, help, labels, value);
    }

    /// What every farmem server counts: connections, requests and the
    /// time each request took to serve.
    pub fn server(&mut self, s: &ServerStats) {
        let c = |me: &mut Self, name: &str, help: &str, v: u64| me.counter(name, help, &[], v);
        c(
            self,
            "farmem_server_requests",
            "Requests served",
            s.requests.get(),
        );
        c(
            self,
            "farmem_server_refused",
            "Requests refused",
            s.refused.get(),
        );
        c(
            self,
            "farmem_server_connections",
            "Connections accepted",
            s.connections.get(),
        );
        c(
            self,
            "farmem_server_auth_failures",
            "Handshakes that failed",
            s.auth_failures.get(),
        );
        c(
            self,
            "farmem_server_protocol_errors",
            "Malformed frames and messages",
            s.protocol_errors.get(),
        );
        c(
            self,
            "farmem_server_over_limit",
            "Connections refused at the connection cap",
            s.over_limit.get(),
        );
        self.gauge(
            "farmem_server_open_connections",
            "Connections open now",
            &[],
            s.open.load(Ordering::Relaxed) as f64,
        );
        self.latency(
            "farmem_server_request_duration_seconds",
            "Time from a request's frame read to its reply encoded",
            &[],
            &s.request_latency,
        );
    }

    /// The scrape in Prometheus's text format.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for f in &self.families {
            let Some(first) = f.samples.first() else {
                continue;
            };
            let name = match first.value {
                Value::Counter(_) => format!("{}_total", f.name),
                _ => f.name.clone(),
            };
            let help = f.help.replace('\\', "\\\\").replace('\n', "\\n");
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} {}", first.value.type_name());
            for s in &f.samples {
                match &s.value {
                    Value::Counter(v) => line(&mut out, &name, &s.labels, None, *v as f64),
                    Value::Gauge(v) => line(&mut out, &name, &s.labels, None, *v),
                    Value::Histogram {
                        buckets,
                        sum,
                        count,
                    } => {
                        let bucket = format!("{name}_bucket");
                        let mut below = 0;
                        for (le, n) in buckets {
                            below += n;
                            line(&mut out, &bucket, &s.labels, Some(*le), below as f64);
                        }
                        line(&mut out, &format!("{name}_sum"), &s.labels, None, *sum);
                        line(
                            &mut out,
                            &format!("{name}_count"),
                            &s.labels,
                            None,
                            *count as f64,
                        );
                    }
                }
            }
        }
        out
    }
}

/// One sample line: `name{labels,le="…"} value`.
fn line(out: &mut String, name: &str, labels: &[(String, String)], le: Option<f64>, v: f64) {
    let mut pairs: Vec<String> = labels
        .iter()
        .map(|(k, v)| {
            let v = v
                .replace('\\', "\\\\")
                .replace('"', "\\\"")
                .replace('\n', "\\n");
            format!("{k}=\"{v}\"")
        })
        .collect();
    if let Some(le) = le {
        pairs.push(format!("le=\"{}\"", number(le)));
    }
    let labels = if pairs.is_empty() {
        String::new()
    } else {
        format!("{{{}}}", pairs.join(","))
    };
    let _ = writeln!(out, "{name}{labels} {}", number(v));
}

/// A value as the text format spells it (`+Inf`, `NaN`).
fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        }
    } else {
        format!("{v}")
    }
}

/// A running endpoint; dropping it stops it.
pub struct MetricsServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl MetricsServer {
    /// Binds `listen` (port 0 picks one) and answers `GET /metrics` with
    /// what `scrape` renders at that moment.
    pub fn start(
        listen: &str,
        scrape: impl Fn() -> Scrape + Send + Sync + 'static,
    ) -> std::io::Result<Self> {
        let listener = TcpListener::bind(listen)?;
        let addr = listener.local_addr()?;
        // Polled, so a stop is seen without a connection to wake it.
        listener.set_nonblocking(true)?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::Builder::new()
            .name("farmem-metrics".into())
            .spawn(move || {
                while !stopped.load(Ordering::Relaxed) {
                    match listener.accept() {
                        Ok((stream, _)) => {
                            if let Err(e) = answer(stream, &scrape) {
                                tracing::debug!("metrics request: {e}");
                            }
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                            std::thread::sleep(Duration::from_millis(50));
                        }
                        Err(e) => {
                            tracing::warn!("metrics endpoint: {e}");
                            std::thread::sleep(Duration::from_millis(50));
                        }
                    }
                }
            })?;
        Ok(Self {
            addr,
            stop,
            thread: Some(thread),
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Reads one HTTP request and answers it: the metrics for `GET /metrics`
/// (or `/`), 404 for another path, 405 for another method.
fn answer(mut stream: TcpStream, scrape: &impl Fn() -> Scrape) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(REQUEST_TIMEOUT))?;
    stream.set_write_timeout(Some(REQUEST_TIMEOUT))?;
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 << 10 {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let line = String::from_utf8_lossy(&head);
    let mut words = line.split_whitespace();
    let (method, path) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let path = path.split('?').next().unwrap_or("");
    let (status, kind, body) = match (method, path) {
        ("GET", "/metrics" | "/") => (
            "200 OK",
            "text/plain; version=0.0.4; charset=utf-8",
            scrape().render(),
        ),
        ("GET", _) => ("404 Not Found", "text/plain", "try /metrics\n".into()),
        _ => ("405 Method Not Allowed", "text/plain", "GET only\n".into()),
    };
    let reply = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(reply.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(addr: SocketAddr, path: &str) -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    }

    #[test]
    fn a_scrape_is_openmetrics_text_with_families_labels_and_histograms() {
        let h = LatencyHistogram::new();
        h.record_ns(15_000);
        h.record_ns(3_000_000);
        let server = MetricsServer::start("127.0.0.1:0", move || {
            let mut s = Scrape::default();
            s.counter("farmem_test_reads", "Reads", &[], 7);
            s.gauge("farmem_test_node_up", "Up", &[("node", "1")], 1.0);
            s.gauge("farmem_test_node_up", "Up", &[("node", "2")], 0.0);
            s.latency("farmem_test_duration_seconds", "Took", &[], &h);
            s
        })
        .unwrap();
        let reply = get(server.local_addr(), "/metrics");
        assert!(reply.starts_with("HTTP/1.1 200 OK"), "{reply}");
        for line in [
            "# TYPE farmem_test_reads_total counter",
            "farmem_test_reads_total 7",
            "farmem_test_node_up{node=\"1\"} 1",
            "farmem_test_node_up{node=\"2\"} 0",
            "# TYPE farmem_test_duration_seconds histogram",
            "farmem_test_duration_seconds_count 2",
            "farmem_test_duration_seconds_bucket{le=\"0.00001\"} 0",
            "farmem_test_duration_seconds_bucket{le=\"0.00002\"} 1",
            "farmem_test_duration_seconds_bucket{le=\"0.002\"} 1",
            "farmem_test_duration_seconds_bucket{le=\"0.005\"} 2",
            "farmem_test_duration_seconds_bucket{le=\"+Inf\"} 2",
            // Each sample counts as its bucket's top value, within the
            // histogram's 1% of 15 µs + 3 ms.
            "farmem_test_duration_seconds_sum 0.003029694",
        ] {
            assert!(reply.lines().any(|l| l == line), "no `{line}` in\n{reply}");
        }
        assert!(get(server.local_addr(), "/nope").starts_with("HTTP/1.1 404"));
        let mut s = TcpStream::connect(server.local_addr()).unwrap();
        write!(s, "POST /metrics HTTP/1.1\r\n\r\n").unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        assert!(out.starts_with("HTTP/1.1 405"), "{out}");
    }
}
