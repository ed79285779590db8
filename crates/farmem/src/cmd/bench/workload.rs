//! The program a bench or a batch runs, and the result every run of it
//! must agree on.

use std::ffi::OsString;
use std::process::Command;

use anyhow::Context;
use farmem_core::ByteSize;
use serde_json::Value;

/// A program: a built-in workload (`farmem demo --worker`) or any command.
#[derive(Debug, Clone)]
pub struct Workload {
    pub argv: Vec<OsString>,
    /// The demo's worker, which prints its own result and time.
    pub demo: bool,
}

/// The built-in workloads, as `--workload` and a batch's `workload` take them.
pub const BUILTIN: &str =
    "pagerank (alias demo), kv, scan, text, noise, stream, bfs, sssp, redis, sqlite";

/// Bytes per record of the `redis` workload's values.
const REDIS_VALUE: u64 = 1000;
/// Bytes a row of the `sqlite` workload takes, indexes included (about).
const SQLITE_ROW: u64 = 300;
/// Bytes of a page slot of sqlite's `-pagecache`: a 4 KiB page and its header.
const SQLITE_SLOT: u64 = 4400;

impl Workload {
    /// The demo's worker running `kind` (`demo` or `pagerank`, else a
    /// synthetic kind) over `size` for `iterations`.
    pub fn builtin(kind: &str, size: ByteSize, iterations: usize) -> anyhow::Result<Self> {
        match kind {
            "redis" => return redis(size.bytes(), iterations),
            "sqlite" => return sqlite(size.bytes(), iterations),
            _ => {}
        }
        let kind = if kind == "demo" { "pagerank" } else { kind };
        crate::cmd::demo::worker::Kind::parse(kind, None, 16).map_err(|e| {
            anyhow::anyhow!("workload `{kind}`: {e}, or demo; any other program is a command")
        })?;
        let exe = std::env::current_exe().context("finding the farmem binary")?;
        let argv = [
            exe.into_os_string(),
            "demo".into(),
            "--worker".into(),
            "--kind".into(),
            kind.into(),
            "--size".into(),
            size.bytes().to_string().into(),
            "--iterations".into(),
            iterations.to_string().into(),
        ];
        Ok(Self {
            argv: argv.to_vec(),
            demo: true,
        })
    }

    /// Any command line (not empty).
    pub fn command(argv: Vec<OsString>) -> Self {
        Self { argv, demo: false }
    }

    /// The command line, for reports.
    pub fn shown(&self) -> String {
        self.argv
            .iter()
            .map(|a| a.to_string_lossy())
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The program, to run as it is.
    pub fn program(&self) -> Command {
        let mut cmd = Command::new(&self.argv[0]);
        cmd.args(&self.argv[1..]);
        cmd
    }

    /// The result to compare across runs and the program's own seconds:
    /// the demo's checksum and time, else a hash of all it printed.
    pub fn result(&self, stdout: &[u8]) -> (Option<String>, Option<f64>) {
        if !self.demo {
            return (Some(format!("{:016x}", fnv1a(stdout))), None);
        }
        match result_line(stdout) {
            Some(r) => (
                r["checksum"].as_str().map(str::to_string),
                r["seconds"].as_f64(),
            ),
            None => (None, None),
        }
    }
}

/// The demo worker's `result JSON` line, parsed.
pub fn result_line(stdout: &[u8]) -> Option<Value> {
    String::from_utf8_lossy(stdout)
        .lines()
        .filter_map(|l| l.strip_prefix("result "))
        .find_map(|r| serde_json::from_str(r).ok())
}

/// A program this workload needs, from PATH.
fn installed(program: &str, package: &str) -> anyhow::Result<()> {
    let found = std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|d| d.join(program).is_file()));
    anyhow::ensure!(found, "{program} is not installed (apt install {package})");
    Ok(())
}

/// redis-server holding `size` bytes of 1000 B values, loaded in order
/// through `redis-cli --pipe`, then `iterations` passes of random GETs
/// from redis-benchmark (8 clients, 16 requests in flight each); prints
/// the dataset's digest, which the GETs leave as it is. The server listens
/// on a Unix socket in a private directory, so runs never share a port.
fn redis(size: u64, iterations: usize) -> anyhow::Result<Workload> {
    let keys = redis_keys(size);
    redis_with(keys, keys * iterations as u64, 16, false)
}

/// Keys of 1000 B values in about `size` bytes of redis.
fn redis_keys(size: u64) -> u64 {
    (size / (REDIS_VALUE + 200)).max(1000)
}

/// The `redis` workload measured per request: `gets` random GETs, one in
/// flight per client, with redis-benchmark's CSV line (throughput and
/// latency percentiles, in ms) printed first, before the lines that
/// hold the result: see [`split_redis_report`].
pub fn redis_latency(size: u64, gets: u64) -> anyhow::Result<Workload> {
    redis_with(redis_keys(size), gets, 1, true)
}

/// redis-benchmark's `--csv` line for its GETs: requests per second,
/// average and p99 latency in ms.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GetLine {
    pub rps: f64,
    pub avg_ms: f64,
    pub p99_ms: f64,
}

impl GetLine {
    /// `"GET","rps","avg","min","p50","p95","p99","max"`, or None.
    pub fn parse(line: &str) -> Option<Self> {
        let f: Vec<f64> = line
            .strip_prefix("\"GET\",")?
            .split(',')
            .filter_map(|x| x.trim_matches('"').parse().ok())
            .collect();
        (f.len() == 7).then(|| GetLine {
            rps: f[0],
            avg_ms: f[1],
            p99_ms: f[5],
        })
    }
}

/// The GET line of [`redis_latency`]'s output and the rest, which is the
/// result.
pub fn split_redis_report(stdout: &[u8]) -> (Option<GetLine>, Vec<u8>) {
    let text = String::from_utf8_lossy(stdout);
    let mut numbers = None;
    let mut rest = Vec::new();
    for line in text.lines() {
        if line.starts_with("\"GET\",") {
            numbers = GetLine::parse(line);
        } else if !line.starts_with("\"test\"") {
            rest.extend_from_slice(line.as_bytes());
            rest.push(b'\n');
        }
    }
    (numbers, rest)
}

fn redis_with(keys: u64, gets: u64, pipeline: u32, csv: bool) -> anyhow::Result<Workload> {
    let bench_out = if csv { "--csv" } else { "-q >/dev/null" };
    redis_script(
        keys,
        &format!(
            r#"redis-benchmark -s "$d/s" -t get -r {keys} -n {gets} -c 8 -P {pipeline} -d {REDIS_VALUE} {bench_out}
redis-cli -s "$d/s" dbsize
redis-cli -s "$d/s" debug digest"#
        ),
    )
}

/// redis loaded as [`redis_latency`] loads it, then `windows` rounds of
/// `gets` GETs from one client, each round announced by a line `window
/// NANOS` (the wall clock, `date +%s%N`) before redis-benchmark's CSV
/// line: latency over time, for a delay changed while it runs.
pub fn redis_windows(size: u64, windows: u32, gets: u64) -> anyhow::Result<Workload> {
    let keys = redis_keys(size);
    redis_script(
        keys,
        &format!(
            r#"for i in $(seq 1 {windows}); do
  echo "window $(date +%s%N)"
  redis-benchmark -s "$d/s" -t get -r {keys} -n {gets} -c 1 -P 1 -d {REDIS_VALUE} --csv | grep '^"GET"'
done"#
        ),
    )
}

/// A redis-server on a private Unix socket holding `keys` 1000 B values,
/// loaded in order through `redis-cli --pipe`, then `body` (a shell
/// fragment; `$d/s` is the socket), then the server's shutdown.
fn redis_script(keys: u64, body: &str) -> anyhow::Result<Workload> {
    installed("redis-server", "redis-server")?;
    installed("redis-benchmark", "redis-tools")?;
    // Keys as redis-benchmark's -r names them: key:%012d.
    let script = format!(
        r#"set -e
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
redis-server --port 0 --unixsocket "$d/s" --save '' --appendonly no --dir "$d" --enable-debug-command local >/dev/null &
until redis-cli -s "$d/s" ping >/dev/null 2>&1; do sleep 0.05; done
awk -v n={keys} -v sz={value} 'BEGIN {{ pad = sprintf("%*s", sz, ""); gsub(/ /, "v", pad); for (i = 0; i < n; i++) {{ k = sprintf("key:%012d", i); v = substr(i pad, 1, sz); printf "*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n", length(k), k, length(v), v }} }}' | redis-cli -s "$d/s" --pipe >/dev/null
{body}
redis-cli -s "$d/s" shutdown nosave >/dev/null 2>&1 || true
wait
"#,
        value = REDIS_VALUE
    );
    Ok(Workload::command(vec![
        "sh".into(),
        "-c".into(),
        script.into(),
    ]))
}

/// sqlite3 with an in-memory database of about `size` bytes in one
/// `-pagecache` allocation (so it goes far): rows inserted, indexed, then
/// `iterations` rounds of range scans, index lookups, grouping and an
/// update; prints every query's answer and the integrity check's.
fn sqlite(size: u64, iterations: usize) -> anyhow::Result<Workload> {
    installed("sqlite3", "sqlite3")?;
    let rows = (size / SQLITE_ROW).max(1000);
    let slots = size / 4096 * 5 / 4 + 256;
    // No rollback journal: sqlite's in-memory journal copies every page an
    // update touches with small mallocs, which stay local.
    let mut sql = format!(
        "PRAGMA journal_mode = OFF;
CREATE TABLE t(id INTEGER PRIMARY KEY, k INTEGER, name TEXT, payload TEXT);
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < {rows})
INSERT INTO t SELECT x, (x * 7919) % 1000003, printf('name-%09d', (x * 104729) % {rows}),
    printf('%.*c', 200, char(65 + x % 26)) FROM c;
CREATE INDEX t_k ON t(k);
CREATE INDEX t_name ON t(name);
"
    );
    for i in 0..iterations {
        sql.push_str(&format!(
            "SELECT count(*), sum(k), total(length(payload)) FROM t;
SELECT count(*), sum(id) FROM t WHERE k BETWEEN {lo} AND {hi};
SELECT substr(payload, 1, 1) AS g, count(*), sum(k), min(name) FROM t GROUP BY g ORDER BY g;
SELECT name, id FROM t ORDER BY name LIMIT 3 OFFSET {off};
UPDATE t SET payload = upper(name) || '-{i}' WHERE id % 7 = {m};
",
            lo = i * 50_000,
            hi = i * 50_000 + 20_000,
            off = rows / 2,
            m = i % 7
        ));
    }
    sql.push_str("PRAGMA integrity_check;\n");
    Ok(Workload::command(vec![
        "sqlite3".into(),
        "-pagecache".into(),
        SQLITE_SLOT.to_string().into(),
        slots.to_string().into(),
        ":memory:".into(),
        sql.into(),
    ]))
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_demo_reports_its_checksum_and_a_command_its_output_hash() {
        let demo = Workload {
            argv: vec!["x".into()],
            demo: true,
        };
        let out = b"progress 1 round 1\nresult {\"seconds\": 1.5, \"checksum\": \"00ab\"}\n";
        assert_eq!(demo.result(out), (Some("00ab".into()), Some(1.5)));
        assert_eq!(demo.result(b"progress 1\nresult {not json"), (None, None));
        let cmd = Workload::command(vec!["x".into()]);
        assert_eq!(cmd.result(b"a"), cmd.result(b"a"));
        assert_ne!(cmd.result(b"a"), cmd.result(b"b"));
    }

    #[test]
    fn redis_benchmarks_line_is_split_from_the_result() {
        let out = b"\"test\",\"rps\",\"avg_latency_ms\",\"min_latency_ms\",\"p50_latency_ms\",\"p95_latency_ms\",\"p99_latency_ms\",\"max_latency_ms\"\n\"GET\",\"769230.75\",\"0.119\",\"0.024\",\"0.095\",\"0.247\",\"0.279\",\"0.615\"\n10485\nabc\n";
        let (numbers, rest) = split_redis_report(out);
        let n = numbers.unwrap();
        assert_eq!((n.rps, n.avg_ms, n.p99_ms), (769230.75, 0.119, 0.279));
        assert_eq!(rest, b"10485\nabc\n");
        assert_eq!(
            split_redis_report(b"\"GET\",\"x\"\n1\n"),
            (None, b"1\n".to_vec())
        );
    }

    #[test]
    fn builtin_kinds_are_checked() {
        let w = Workload::builtin("demo", ByteSize::mib(8), 2).unwrap();
        assert!(w.demo);
        assert!(
            w.shown()
                .ends_with("demo --worker --kind pagerank --size 8388608 --iterations 2")
        );
        assert!(Workload::builtin("kv", ByteSize::mib(8), 1).is_ok());
        // The SQL grows with the rounds; redis's GETs with the passes.
        if let Ok(sql) = Workload::builtin("sqlite", ByteSize::mib(30), 2) {
            let text = sql.argv[5].to_string_lossy().into_owned();
            assert_eq!(text.matches("UPDATE").count(), 2);
            assert!(text.contains("x < 104857"), "{text}");
            assert_eq!(sql.argv[3], "9856");
        }
        if let Ok(r) = Workload::builtin("redis", ByteSize::mib(12), 3) {
            assert!(r.shown().contains("-r 10485 -n 31455"), "{}", r.shown());
        }
        if let Ok(r) = redis_latency(12 << 20, 500) {
            assert!(
                r.shown()
                    .contains("-r 10485 -n 500 -c 8 -P 1 -d 1000 --csv")
            );
        }
        let e = Workload::builtin("quicksort", ByteSize::mib(8), 1).unwrap_err();
        assert!(e.to_string().contains("quicksort"), "{e}");
    }
}
