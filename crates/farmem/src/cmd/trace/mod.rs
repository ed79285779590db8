//! `farmem trace`: generate, capture, import, export and inspect
//! memory-access traces.

mod formats;
mod replay;

use std::io::{BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::Context;
use farmem_workloads::trace::{TraceWriter, scan_summary};
use farmem_workloads::{Scale, TraceReader};

use super::Outcome;

#[derive(clap::Subcommand)]
pub enum Trace {
    /// Print a trace's header and summary; a lackey log or a ChampSim
    /// trace is read through, with the format it was detected as.
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
    /// Convert a trace from another tool into farmem's format, for `farmem
    /// sim --trace`: a valgrind lackey log (`valgrind --tool=lackey
    /// --trace-mem=yes`) or a ChampSim trace (the DPC-3 and CRC-2 sets;
    /// raw or .xz), detected from its first bytes. Prints the source's
    /// record and access counts beside the accesses written.
    ///
    /// Example: farmem trace import 602.gcc_s-734B.champsimtrace.xz --out gcc.trace
    Import {
        /// The trace to read.
        file: PathBuf,
        /// Output trace file (farmem's format).
        #[arg(long)]
        out: PathBuf,
        /// Its format, instead of detecting it.
        #[arg(long, value_enum)]
        format: Option<formats::Format>,
        #[arg(long)]
        json: bool,
    },
    /// Write a farmem trace as a ChampSim trace (xz-compressed when the
    /// name ends in .xz): one record per access, with up to 1024 records
    /// without memory operands before it for its gap of instructions.
    Export {
        /// The farmem trace to read.
        file: PathBuf,
        /// The ChampSim trace to write (`NAME.champsimtrace.xz`).
        #[arg(long)]
        out: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Do a trace's accesses on real memory: its footprint becomes one
    /// buffer, page for page; loads feed a checksum, stores write a
    /// counter. Under `farmem run` it faults on the pages `farmem sim`
    /// sees, which `farmem eval validate` compares.
    ///
    /// Example: farmem run --local-mem 16MiB -- farmem trace replay pr.trace
    Replay {
        /// A farmem trace whose pages run on from the workloads' base (as
        /// `farmem trace gen` and `farmem trace compact` write them).
        file: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Renumber a trace's pages so they run on from the workloads' base, in
    /// order, gaps between them kept up to 256 pages: a captured program's
    /// scattered heap, mappings and stack become one region that `farmem
    /// trace replay` can do on one buffer.
    Compact {
        /// The trace to read.
        file: PathBuf,
        /// The compacted trace to write.
        #[arg(long)]
        out: PathBuf,
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
        Trace::Replay { file, json } => replay::replay(&file, json),
        Trace::Compact { file, out, json } => {
            let started = std::time::Instant::now();
            let h = farmem_workloads::compact::compact(&file, &out)?;
            report_written(&out, &h, started, json)
        }
        Trace::Import {
            file,
            out,
            format,
            json,
        } => import(&file, &out, format, json),
        Trace::Export { file, out, json } => export(&file, &out, json),
    }
}

fn import(file: &Path, out: &Path, format: Option<formats::Format>, json: bool) -> Outcome {
    let started = std::time::Instant::now();
    let (format, xz) = match format {
        Some(f) => (f, formats::is_xz(file)?),
        None => formats::detect(file)?,
    };
    let name = file
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut w = TraceWriter::create(out, &name, false)?;
    let read = formats::read_into(file, format, xz, &mut w)?;
    let h = w.finish()?;
    if read.accesses == 0 {
        anyhow::bail!(
            "{}: no memory accesses in it as a {} trace",
            file.display(),
            format.name()
        );
    }
    if json {
        let mut v = serde_json::to_value(&h)?;
        v["file"] = serde_json::json!(out.display().to_string());
        v["source"] = serde_json::json!({
            "file": file.display().to_string(),
            "format": format.name(),
            "xz": xz,
            "read": read,
        });
        v["wall_seconds"] = serde_json::json!(started.elapsed().as_secs_f64());
        println!("{v}");
    } else {
        eprintln!(
            "farmem: {} ({}{}): {} records, {} accesses, {} instructions; wrote {}: {} accesses in {:.1}s",
            file.display(),
            format.name(),
            if xz { ", xz" } else { "" },
            read.source_records,
            read.source_accesses,
            read.source_instructions,
            out.display(),
            h.accesses,
            started.elapsed().as_secs_f64()
        );
    }
    Ok(std::process::ExitCode::SUCCESS)
}

fn export(file: &Path, out: &Path, json: bool) -> Outcome {
    let records = formats::export_champsim(file, out)?;
    let accesses = TraceReader::open(file)?.header().accesses;
    if json {
        println!(
            "{}",
            serde_json::json!({"file": out.display().to_string(), "format": "champsim", "records": records, "accesses": accesses})
        );
    } else {
        eprintln!(
            "farmem: wrote {}: {records} ChampSim records for {accesses} accesses",
            out.display()
        );
    }
    Ok(std::process::ExitCode::SUCCESS)
}

/// `trace info` on a lackey log or a ChampSim trace: read through.
fn foreign_info(file: &Path, format: formats::Format, xz: bool, json: bool) -> Outcome {
    let mut count = farmem_workloads::record::CountingSink::default();
    let read = formats::read_into(file, format, xz, &mut count)?;
    if json {
        println!(
            "{}",
            serde_json::json!({"file": file.display().to_string(), "format": format.name(), "xz": xz, "read": read})
        );
    } else {
        println!("trace        {}", file.display());
        println!(
            "format       {}{}",
            format.name(),
            if xz { " (xz)" } else { "" }
        );
        println!("records      {}", read.source_records);
        println!("accesses     {}", read.source_accesses);
        println!("instructions {}", read.source_instructions);
        println!("note         `farmem trace import` converts it for `farmem sim --trace`");
    }
    Ok(std::process::ExitCode::SUCCESS)
}

fn info(file: &Path, scan: bool, json: bool) -> Outcome {
    let (format, xz) = formats::detect(file)?;
    if format != formats::Format::Farmem {
        return foreign_info(file, format, xz, json);
    }
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
