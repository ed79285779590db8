//! `--metrics` on the daemons: Prometheus text that `promtool check
//! metrics` accepts (when promtool is installed, as `scripts/test` does),
//! with the rack's memory, each node, and histograms of request latency
//! that count the requests the daemons served.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;

use common::daemon_json;

fn scrape(addr: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(s, "GET /metrics HTTP/1.1\r\nHost: farmem\r\n\r\n").unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).unwrap();
    let (head, body) = reply.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
    body.to_string()
}

/// The value of the sample line `name` (labels included) in `body`.
fn sample(body: &str, name: &str) -> f64 {
    body.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no sample `{name}` in\n{body}"))
}

fn promtool_accepts(body: &str) {
    let Ok(mut child) = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
    else {
        eprintln!(
            "skipping the promtool check: promtool is not installed (apt install prometheus)"
        );
        return;
    };
    child
        .stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics refused it:\n{}{}\n{body}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn each_daemon_serves_metrics_promtool_accepts_with_latency_histograms() {
    let (_ctl, c) = daemon_json(&[
        "controller",
        "--listen",
        "127.0.0.1:0",
        "--metrics",
        "127.0.0.1:0",
    ]);
    let ctl = c["addr"].as_str().unwrap();
    let (_node, n) = daemon_json(&[
        "memnode",
        "--listen",
        "127.0.0.1:0",
        "--capacity",
        "256MiB",
        "--controller",
        ctl,
        "--heartbeat-ms",
        "20",
        "--metrics",
        "127.0.0.1:0",
    ]);
    // A program moves data through the node: its reads and writes count.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_farmem"))
        .args([
            "run",
            "--controller",
            ctl,
            "--local-mem",
            "4MiB",
            "--backend",
            "remote",
        ])
        .args([
            "--",
            env!("CARGO_BIN_EXE_farmem"),
            "demo",
            "--worker",
            "--kind",
            "scan",
        ])
        .args(["--size", "16MiB", "--iterations", "2"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let body = scrape(c["metrics"].as_str().unwrap());
    promtool_accepts(&body);
    assert_eq!(sample(&body, "farmem_controller_nodes_up"), 1.0);
    assert_eq!(
        sample(&body, "farmem_controller_capacity_bytes"),
        (256u64 << 20) as f64
    );
    let node = n["node"].to_string();
    let up = format!(
        "farmem_controller_node_up{{node=\"{node}\",addr=\"{}\"}}",
        n["addr"].as_str().unwrap()
    );
    assert_eq!(sample(&body, &up), 1.0);
    // Registrations, heartbeats and the program's allocations were served.
    let served = sample(&body, "farmem_server_requests_total");
    assert!(served >= 3.0, "{body}");
    assert_eq!(
        sample(&body, "farmem_server_request_duration_seconds_count"),
        served
    );

    let body = scrape(n["metrics"].as_str().unwrap());
    promtool_accepts(&body);
    let at = format!("{{node=\"{node}\"}}");
    assert_eq!(
        sample(&body, &format!("farmem_memnode_capacity_bytes{at}")),
        (256u64 << 20) as f64
    );
    // 16 MiB written back at 4 MiB local, and read again.
    assert!(
        sample(&body, &format!("farmem_memnode_written_bytes_total{at}")) >= (8u64 << 20) as f64
    );
    assert!(sample(&body, &format!("farmem_memnode_read_bytes_total{at}")) >= (8u64 << 20) as f64);
    let served = sample(&body, "farmem_server_requests_total");
    assert_eq!(
        sample(&body, "farmem_server_request_duration_seconds_count"),
        served
    );
    assert_eq!(
        sample(
            &body,
            "farmem_server_request_duration_seconds_bucket{le=\"+Inf\"}"
        ),
        served
    );
}

#[test]
fn an_address_that_cannot_be_bound_stops_the_daemon_naming_the_flag() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let at = taken.local_addr().unwrap().to_string();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_farmem"))
        .args(["controller", "--listen", "127.0.0.1:0", "--metrics", &at])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("serving metrics on {at} (--metrics)")),
        "{stderr}"
    );
}

/// `farmem run --metrics`: while the program runs, its faults and their
/// latency histograms, summed over its processes; nothing left behind.
#[test]
fn farmem_run_serves_the_programs_fault_histograms_while_it_runs() {
    use std::io::BufRead;
    let farmem = env!("CARGO_BIN_EXE_farmem");
    let mut run = std::process::Command::new(farmem)
        .args([
            "run",
            "--memnodes",
            "1",
            "--local-mem",
            "4MiB",
            "--metrics",
            "127.0.0.1:0",
        ])
        .args([
            "--", farmem, "demo", "--worker", "--kind", "scan", "--size", "32MiB",
        ])
        .args(["--iterations", "150"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = std::io::BufReader::new(run.stderr.take().unwrap());
    let mut line = String::new();
    let addr = loop {
        line.clear();
        assert!(
            stderr.read_line(&mut line).unwrap() > 0,
            "farmem run said no metrics address"
        );
        if let Some(rest) = line.trim().strip_prefix("farmem: metrics on http://") {
            break rest.trim_end_matches("/metrics").to_string();
        }
    };
    let dir = std::env::temp_dir().join(format!("farmem-metrics-{}", run.id()));
    // Scrapes until the program's faults show, one that fetched among
    // them: its first faults may all be fresh pages, filled with zeros.
    let body = loop {
        let body = scrape(&addr);
        let faults = sample(&body, "farmem_run_faults_total{kind=\"missing\"}");
        let fetched = sample(&body, "farmem_run_fetched_bytes_total");
        if sample(&body, "farmem_run_processes") >= 1.0 && faults > 0.0 && fetched > 0.0 {
            break body;
        }
        assert!(
            run.try_wait().unwrap().is_none(),
            "the program ended before a scrape saw it:\n{body}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    promtool_accepts(&body);
    let timed = sample(&body, "farmem_run_fault_duration_seconds_count");
    assert!(timed > 0.0, "{body}");
    assert_eq!(
        sample(
            &body,
            "farmem_run_fault_duration_seconds_bucket{le=\"+Inf\"}"
        ),
        timed
    );
    assert_eq!(sample(&body, "farmem_run_limit_bytes"), (4u64 << 20) as f64);
    let mut rest = String::new();
    stderr.read_to_string(&mut rest).unwrap();
    assert!(run.wait().unwrap().success(), "{rest}");
    assert!(!dir.exists(), "{} was left behind", dir.display());
}
