//! The demo's worker (`farmem demo --worker`): one built-in program run in
//! this process on ordinary memory, knowing nothing of far memory. It
//! reports on stdout as `progress N TEXT` lines and one `result JSON` line
//! holding `seconds` and a `checksum` that every run of the same arguments
//! must print; a program that finds its own answer wrong (STREAM's exact
//! check, Graph500's validation) says why and exits 1 instead.

use std::io::Write;
use std::time::Instant;

use farmem_workloads::{graph500, native, stream, synthetic};
use serde_json::{Value, json};

use crate::cmd::Outcome;

/// Which program.
pub enum Kind {
    PageRank,
    Synthetic(synthetic::Kind),
    Stream,
    /// Graph500's BFS (`sssp: false`) or SSSP from `--iterations` roots.
    Graph500 {
        sssp: bool,
        scale: Option<u32>,
        edge_factor: u32,
    },
}

impl Kind {
    pub fn parse(name: &str, scale: Option<u32>, edge_factor: u32) -> anyhow::Result<Kind> {
        let graph = |sssp| {
            anyhow::ensure!(
                (1..=64).contains(&edge_factor),
                "--edge-factor {edge_factor}: from 1 to 64"
            );
            if let Some(s) = scale {
                anyhow::ensure!((1..=30).contains(&s), "--graph-scale {s}: from 1 to 30");
            }
            Ok(Kind::Graph500 {
                sssp,
                scale,
                edge_factor,
            })
        };
        match name {
            "pagerank" => Ok(Kind::PageRank),
            "stream" => Ok(Kind::Stream),
            "bfs" => graph(false),
            "sssp" => graph(true),
            other => other
                .parse()
                .map(Kind::Synthetic)
                .map_err(|e: String| anyhow::anyhow!("{e}, pagerank, stream, bfs or sssp")),
        }
    }
}

/// Runs `kind` over about `bytes` for `iterations` (passes, rounds or
/// search roots) and prints its progress and result.
pub fn run(kind: Kind, bytes: u64, iterations: usize) -> Outcome {
    let mut out = std::io::stdout().lock();
    let start = Instant::now();
    let mut progress = |i: usize, what: String| {
        let _ = writeln!(out, "progress {i} {what}");
        let _ = out.flush();
    };
    let mut result = match kind {
        Kind::PageRank => pagerank(bytes, iterations, &mut progress),
        Kind::Synthetic(k) => {
            let sum = synthetic::run(k, bytes, iterations, 42, |i| {
                progress(i, format!("pass {i} of {iterations}"))
            });
            json!({"kind": k.name(), "bytes": bytes, "checksum": format!("{sum:016x}")})
        }
        Kind::Stream => streams(bytes, iterations, &mut progress)?,
        Kind::Graph500 {
            sssp,
            scale,
            edge_factor,
        } => searches(sssp, scale, edge_factor, bytes, iterations, &mut progress)?,
    };
    result["seconds"] = json!(start.elapsed().as_secs_f64());
    result["peak_rss_bytes"] = json!(peak_rss());
    writeln!(std::io::stdout(), "result {result}")?;
    Ok(std::process::ExitCode::SUCCESS)
}

fn pagerank(bytes: u64, iterations: usize, progress: &mut dyn FnMut(usize, String)) -> Value {
    let (scale, ef) = super::graph_shape(bytes);
    let graph = native::pull_graph(scale, ef, 42);
    progress(1, format!("round 1 of {iterations}"));
    let rank = native::pagerank(&graph, iterations, |i| {
        let next = if i < iterations {
            format!("round {} of {iterations}", i + 1)
        } else {
            "done".to_string()
        };
        progress(i + 1, next);
    });
    json!({
        "graph": {
            "vertices": graph.vertices(),
            "edges": graph.edges(),
            "bytes": graph.bytes() + 16 * graph.vertices() as u64,
        },
        "checksum": format!("{:016x}", native::checksum(&rank)),
        "top": native::top(&rank, 5),
    })
}

/// STREAM: best and mean bandwidth per kernel, in MB/s (the mean is of
/// each pass's rate; `stream.c` divides bytes by the mean time).
fn streams(
    bytes: u64,
    passes: usize,
    progress: &mut dyn FnMut(usize, String),
) -> anyhow::Result<Value> {
    let t0 = Instant::now();
    let r = stream::run(
        stream::elements_for(bytes),
        passes,
        || t0.elapsed().as_secs_f64(),
        |p| progress(p, format!("pass {p} of {passes}")),
    );
    anyhow::ensure!(
        r.wrong == 0,
        "STREAM: {} of {} elements differ from what the kernels compute",
        r.wrong,
        r.elements
    );
    let kernels: serde_json::Map<String, Value> = stream::KERNELS
        .iter()
        .enumerate()
        .map(|(k, (name, _))| {
            let v = json!({"best_mb_s": r.best_bps[k] / 1e6, "mean_mb_s": r.mean_bps[k] / 1e6});
            (name.to_string(), v)
        })
        .collect();
    Ok(json!({
        "kind": "stream",
        "elements": r.elements,
        "array_bytes": 8 * r.elements as u64,
        "passes": passes,
        "kernels": kernels,
        "checksum": format!("{:016x}", r.checksum),
    }))
}

/// Graph500: generate, build, then search from `roots` roots (fewer if the
/// graph has fewer vertices with an edge), validating each;
/// `search_seconds` is the searches' time alone (the spec's kernel 2 or
/// 3), `teps` the harmonic mean over the searches of the input edges in
/// the component searched over the search's time.
fn searches(
    sssp: bool,
    scale: Option<u32>,
    edge_factor: u32,
    bytes: u64,
    roots: usize,
    progress: &mut dyn FnMut(usize, String),
) -> anyhow::Result<Value> {
    let scale = scale.unwrap_or_else(|| graph500::scale_for(bytes, edge_factor));
    let name = if sssp { "sssp" } else { "bfs" };
    progress(0, format!("generating a graph of scale {scale}"));
    let g = graph500::kronecker(scale, edge_factor, 42);
    let csr = graph500::Csr::build(&g);
    let picked = graph500::roots(&csr, roots, 1);
    let mut search_seconds = 0.0;
    let mut inverse_teps = 0.0;
    let mut checksum = 0xcbf2_9ce4_8422_2325u64;
    for (i, &root) in picked.iter().enumerate() {
        let t = Instant::now();
        let tree = if sssp { csr.sssp(root) } else { csr.bfs(root) };
        let took = t.elapsed().as_secs_f64();
        search_seconds += took;
        graph500::validate(&g, root, &tree)
            .map_err(|e| anyhow::anyhow!("{name} from root {root} failed validation: {e}"))?;
        inverse_teps += took / graph500::edges_reached(&g, &tree).max(1) as f64;
        let (reached, sum) = graph500::summary(root, &tree);
        for x in [u64::from(root), reached, sum] {
            checksum = (checksum ^ x).wrapping_mul(0x0100_0000_01b3);
        }
        progress(i + 1, format!("root {} of {}", i + 1, picked.len()));
    }
    Ok(json!({
        "kind": name,
        "scale": scale,
        "edge_factor": edge_factor,
        "roots": picked.len(),
        "roots_requested": roots,
        "validated": true,
        "search_seconds": search_seconds,
        "teps": picked.len() as f64 / inverse_teps.max(f64::MIN_POSITIVE),
        "checksum": format!("{checksum:016x}"),
    }))
}

/// This process's peak resident set.
fn peak_rss() -> u64 {
    // SAFETY: getrusage fills the struct we pass.
    let usage = unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut u);
        u
    };
    usage.ru_maxrss.max(0) as u64 * 1024
}
