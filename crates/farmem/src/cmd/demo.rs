//! `farmem demo`: the quick start's main job.
//!
//! Until the compute-node runtime runs programs (`farmem run`), the demo
//! shows the data plane end to end: it starts a local controller and two
//! memory nodes as child processes on loopback, places 1 GiB of random data
//! in remote memory at several granularities, reads it back and verifies
//! every byte, then measures the protocol beside plain TCP.

use std::time::Instant;

use anyhow::Context;
use farmem_core::ByteSize;
use farmem_net::{ClientConfig, Cluster};
use farmem_wire::{Placement, Role};
use indicatif::{ProgressBar, ProgressStyle};
use rand::{RngCore, SeedableRng};

use super::Outcome;
use super::local::LocalRack;

/// The quick start: a local rack on loopback and a job that uses it.
#[derive(clap::Args)]
pub struct Args {
    /// Remote memory to fill and verify.
    #[arg(long, default_value = "1GiB")]
    size: ByteSize,
    /// Memory nodes to start.
    #[arg(long, default_value_t = 2)]
    memnodes: usize,
    /// Print one JSON object on stdout instead of the summary.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> Outcome {
    anyhow::ensure!(args.memnodes >= 1, "--memnodes must be at least 1");
    let size = args.size.bytes().div_ceil(128 << 20) * (128 << 20);
    let say = |s: &str| {
        if !args.json {
            eprintln!("farmem: {s}");
        }
    };
    say(&format!(
        "starting a controller and {} memory nodes on loopback",
        args.memnodes
    ));
    let rack = LocalRack::start(args.memnodes, size.max(8 << 30), 128 << 20)?;
    let cluster = Cluster::connect(
        &rack.controller,
        ClientConfig::new("demo", Role::Compute),
        2,
    )
    .context("connecting to the local controller")?;
    let extents = cluster
        .allocate(size, Placement::Default)
        .context("allocating remote memory")?;
    say(&format!(
        "allocated {} as {} extents over memory nodes {:?}",
        ByteSize(size),
        extents.len(),
        extents
            .iter()
            .map(|e| e.node)
            .collect::<std::collections::BTreeSet<_>>()
    ));

    const CHUNK: usize = 4 << 20;
    let bar = if args.json {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(2 * size)
    };
    bar.set_style(
        ProgressStyle::with_template("{msg:>10} [{bar:40}] {bytes}/{total_bytes} {bytes_per_sec}")
            .expect("static template")
            .progress_chars("=> "),
    );
    bar.set_message("write");
    let mut rng = rand::rngs::SmallRng::seed_from_u64(0xfa12);
    let mut chunk = vec![0u8; CHUNK];
    let mut expected = Vec::new();
    let start = Instant::now();
    for e in &extents {
        for off in (0..e.len).step_by(CHUNK) {
            rng.fill_bytes(&mut chunk);
            expected.push(fnv(&chunk));
            cluster.write(e.base + off, &chunk)?;
            bar.inc(CHUNK as u64);
        }
    }
    let write_s = start.elapsed().as_secs_f64();
    bar.set_message("verify");
    let start = Instant::now();
    let mut mismatches = 0usize;
    let mut sums = expected.iter();
    for e in &extents {
        for off in (0..e.len).step_by(CHUNK) {
            cluster.read(e.base + off, &mut chunk)?;
            if Some(&fnv(&chunk)) != sums.next() {
                mismatches += 1;
            }
            bar.inc(CHUNK as u64);
        }
    }
    let read_s = start.elapsed().as_secs_f64();
    bar.finish_and_clear();
    let report = serde_json::json!({
        "demo": "data plane",
        "bytes": size,
        "memnodes": args.memnodes,
        "extents": extents.len(),
        "write_gbps": size as f64 / write_s / 1e9,
        "read_gbps": size as f64 / read_s / 1e9,
        "chunks_verified": expected.len(),
        "mismatched_chunks": mismatches,
    });
    if args.json {
        println!("{report}");
    } else {
        println!(
            "wrote {} of random data to remote memory at {:.2} GB/s and read it back at {:.2} GB/s",
            ByteSize(size),
            size as f64 / write_s / 1e9,
            size as f64 / read_s / 1e9
        );
        println!(
            "verified {} chunks of 4 MiB: {}",
            expected.len(),
            if mismatches == 0 {
                "every byte matches".to_string()
            } else {
                format!("{mismatches} MISMATCHED")
            }
        );
        println!(
            "next: `farmem bench wire` compares the protocol with plain TCP; `farmem --help` lists the rest"
        );
    }
    drop(rack);
    anyhow::ensure!(
        mismatches == 0,
        "{mismatches} chunks read back differently from what was written"
    );
    Ok(std::process::ExitCode::SUCCESS)
}

fn fnv(data: &[u8]) -> u64 {
    data.chunks_exact(8).fold(0xcbf29ce484222325u64, |h, w| {
        (h ^ u64::from_le_bytes(w.try_into().expect("8 bytes"))).wrapping_mul(0x100000001b3)
    })
}
