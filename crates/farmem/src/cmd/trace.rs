//! `farmem trace`: generate, capture and inspect memory-access traces.

use std::io::{BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::Context;
use farmem_workloads::trace::{TraceWriter, scan_summary};
use farmem_workloads::{Scale, TraceReader};

use super::Outcome;

#[derive(clap::Subcommand)]
pub enum Trace {
    /// Print a trace's header and summary.
    Info {
        /// The trace file.
        file: PathBuf,
        /// Scan the whole trace and recount (also for unfinished traces).
        #[arg(long)]
        scan: bool,
        #[arg(long)]
        json: bool,
    },
    /// Run a built-in workload and store its accesses (and page contents).
    Gen {
        /// Workload name (`farmem sim --list`).
        #[arg(long)]
        workload: String,
        /// Output trace file.
        #[arg(long)]
        out: PathBuf,
        /// A factor of the default size (0.5, 2) or a footprint (256MiB).
        #[arg(long, default_value = "1")]
        scale: String,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Leave out page contents (smaller; no compression ratios from it).
        #[arg(long)]
        no_contents: bool,
        #[arg(long)]
        json: bool,
    },
    /// Run an unmodified program under valgrind's lackey and convert its accesses.
    Capture {
        /// Output trace file.
        #[arg(long)]
        out: PathBuf,
        #[arg(long)]
        json: bool,
        /// The program and its arguments (after `--`).
        #[arg(last = true, required = true)]
        cmd: Vec<String>,
    },
}

pub fn run(t: Trace) -> Outcome {
    match t {
        Trace::Info { file, scan, json } => info(&file, scan, json),
        Trace::Gen {
            workload,
            out,
            scale,
            seed,
            no_contents,
            json,
        } => gen_trace(&workload, &out, &scale, seed, !no_contents, json),
        Trace::Capture { out, json, cmd } => capture(&out, &cmd, json),
    }
}

fn info(file: &Path, scan: bool, json: bool) -> Outcome {
    let r = TraceReader::open(file)?;
    let mut h = r.header().clone();
    if scan || !h.complete {
        h = scan_summary(file)?;
    }
    let bytes = std::fs::metadata(file)
        .with_context(|| format!("trace {}", file.display()))?
        .len();
    let footprint = h.footprint_pages * farmem_core::PAGE_SIZE;
    if json {
        let mut v = serde_json::to_value(&h)?;
        v["file"] = serde_json::json!(file.display().to_string());
        v["file_bytes"] = serde_json::json!(bytes);
        v["footprint_bytes"] = serde_json::json!(footprint);
        println!("{v}");
    } else {
        println!("trace        {}", file.display());
        println!("workload     {}", h.workload);
        println!("version      {}", h.version);
        println!("accesses     {}", h.accesses);
        println!("instructions {}", h.instructions);
        println!("threads      {}", h.threads);
        println!(
            "footprint    {} ({} pages)",
            farmem_core::ByteSize(footprint),
            h.footprint_pages
        );
        if h.declared_footprint > 0 {
            println!(
                "declared     {} (the workload's arrays; sizes local memory)",
                farmem_core::ByteSize(h.declared_footprint)
            );
        }
        println!("page records {}", h.page_records);
        println!(
            "file         {} ({:.2} B/access)",
            farmem_core::ByteSize(bytes),
            bytes as f64 / h.accesses.max(1) as f64
        );
        if !h.complete {
            println!("note         header incomplete; counts from a scan");
        }
    }
    Ok(std::process::ExitCode::SUCCESS)
}

fn gen_trace(
    workload: &str,
    out: &Path,
    scale: &str,
    seed: u64,
    contents: bool,
    json: bool,
) -> Outcome {
    let scale: Scale = scale.parse().context("--scale")?;
    if !farmem_workloads::WORKLOADS.iter().any(|w| w.0 == workload) {
        anyhow::bail!(
            "unknown workload `{workload}` (known: {})",
            farmem_workloads::WORKLOADS
                .iter()
                .map(|w| w.0)
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let started = std::time::Instant::now();
    let mut w = TraceWriter::create(out, workload, contents)?;
    farmem_workloads::run_workload(workload, scale, seed, &mut w)?;
    let h = w.finish()?;
    report_written(out, &h, started, json)
}

fn report_written(
    out: &Path,
    h: &farmem_workloads::TraceHeader,
    started: std::time::Instant,
    json: bool,
) -> Outcome {
    let bytes = std::fs::metadata(out).map(|m| m.len()).unwrap_or(0);
    if json {
        let mut v = serde_json::to_value(h)?;
        v["file"] = serde_json::json!(out.display().to_string());
        v["file_bytes"] = serde_json::json!(bytes);
        v["wall_seconds"] = serde_json::json!(started.elapsed().as_secs_f64());
        println!("{v}");
    } else {
        eprintln!(
            "wrote {}: {} accesses, {} footprint, {} page records, {} in {:.1}s",
            out.display(),
            h.accesses,
            farmem_core::ByteSize(h.footprint_pages * farmem_core::PAGE_SIZE),
            h.page_records,
            farmem_core::ByteSize(bytes),
            started.elapsed().as_secs_f64()
        );
    }
    Ok(std::process::ExitCode::SUCCESS)
}

fn is_valgrind_chatter(line: &str) -> bool {
    line.strip_prefix("==")
        .and_then(|rest| rest.split_once("=="))
        .is_some_and(|(pid, _)| !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()))
}

fn capture(out: &Path, cmd: &[String], json: bool) -> Outcome {
    let started = std::time::Instant::now();
    let name = Path::new(&cmd[0])
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| cmd[0].clone());
    // Lackey writes to valgrind's log (stderr); the program's own stderr
    // shares the pipe, and lines that are not lackey records are passed on.
    let mut child = Command::new("valgrind")
        .args(["--tool=lackey", "--trace-mem=yes", "-q"])
        .args(cmd)
        .stderr(Stdio::piped())
        .spawn()
        .context("starting valgrind (is it installed?)")?;
    let stderr = child.stderr.take().context("valgrind's stderr")?;
    let mut w = TraceWriter::create(out, &name, false)?;
    let mut err = std::io::stderr().lock();
    let stats = farmem_workloads::lackey::convert_with(
        BufReader::with_capacity(1 << 20, stderr),
        &mut w,
        |line| {
            // Lackey's closing summary ("==PID== …") ignores -q; it is
            // valgrind's chatter, not the program's stderr.
            if !is_valgrind_chatter(line) {
                let _ = writeln!(err, "{line}");
            }
        },
    )
    .context("reading valgrind's output")?;
    let status = child.wait().context("waiting for valgrind")?;
    let h = w.finish()?;
    if !status.success() {
        eprintln!("farmem: note: the captured program exited with {status}");
    }
    if stats.accesses == 0 {
        anyhow::bail!("valgrind produced no accesses for `{}`", cmd.join(" "));
    }
    report_written(out, &h, started, json)?;
    Ok(if status.success() {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::from(1)
    })
}
