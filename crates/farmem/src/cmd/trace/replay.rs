//! `farmem trace replay`: a trace's accesses done on real memory, so the
//! same access stream runs under `farmem run` and in `farmem sim`
//! (`farmem eval validate` compares the two).
//!
//! The trace's address space `[BASE, BASE + footprint)` becomes one
//! page-aligned buffer, page for page, so a page the simulator sees is a
//! page the runtime faults on, with the same neighbours. Loads read a word
//! into a checksum; stores write a counter that never repeats, so every
//! written line differs from what was there (the runtime ships the lines
//! that changed; the simulator, the lines written). The checksum depends
//! on every byte read, so a run that got a wrong page prints another.

use std::path::Path;
use std::time::Instant;

use anyhow::Context;
use farmem_core::{PAGE_SIZE, mix64};
use farmem_workloads::space::BASE;
use farmem_workloads::{Access, Sink, TraceReader};
use serde_json::json;

use crate::cmd::Outcome;

/// The trace's footprint on real memory, and what was done on it.
struct Replayer {
    words: Vec<u64>,
    /// Index of the word at `BASE` (the buffer's first page boundary).
    first: usize,
    /// Words in the footprint.
    len: u64,
    stores: u64,
    loads: u64,
    checksum: u64,
    /// The first address outside the footprint, if any.
    outside: Option<u64>,
}

impl Replayer {
    fn new(footprint: u64) -> anyhow::Result<Self> {
        let len = footprint.div_ceil(PAGE_SIZE) * PAGE_SIZE / 8;
        let page_words = (PAGE_SIZE / 8) as usize;
        let n = usize::try_from(len)
            .ok()
            .and_then(|l| l.checked_add(page_words))
            .context("the trace's footprint does not fit this machine's address space")?;
        let words = vec![0u64; n];
        // Pages of the buffer line up with the trace's (whatever the
        // allocator's alignment), so faults land on the same pages.
        let skew = words.as_ptr() as usize % PAGE_SIZE as usize / 8;
        let first = (page_words - skew) % page_words;
        Ok(Self {
            words,
            first,
            len,
            stores: 0,
            loads: 0,
            checksum: 0,
            outside: None,
        })
    }
}

impl Sink for Replayer {
    #[inline]
    fn access(&mut self, a: Access) {
        let word = a.addr.wrapping_sub(BASE) / 8;
        if word >= self.len {
            self.outside.get_or_insert(a.addr);
            return;
        }
        let i = self.first + word as usize;
        if a.write {
            self.stores += 1;
            self.words[i] = self.stores;
        } else {
            self.loads += 1;
            self.checksum = mix64(self.checksum ^ self.words[i]);
        }
    }
}

pub fn replay(file: &Path, json: bool) -> Outcome {
    let started = Instant::now();
    let mut reader = TraceReader::open(file)?;
    let footprint = if reader.header().complete {
        reader.header().footprint_bytes()
    } else {
        farmem_workloads::trace::scan_summary(file)?.footprint_bytes()
    };
    let mut r = Replayer::new(footprint)?;
    let records = reader.replay(&mut r)?;
    if let Some(addr) = r.outside {
        anyhow::bail!(
            "{}: access at {addr:#x} lies outside the footprint [{BASE:#x}, {:#x}): \
             replay takes traces whose pages run on from {BASE:#x}, as `farmem trace gen` \
             and `farmem trace compact` write them",
            file.display(),
            BASE + footprint
        );
    }
    let seconds = started.elapsed().as_secs_f64();
    let v = json!({
        "trace": file.display().to_string(),
        "records": records,
        "loads": r.loads,
        "stores": r.stores,
        "footprint_bytes": footprint,
        "checksum": format!("{:016x}", r.checksum),
        "seconds": seconds,
    });
    if json {
        println!("{v}");
    } else {
        println!(
            "replayed {records} records ({} loads, {} stores) over {footprint} bytes in {seconds:.2} s: checksum {:016x}",
            r.loads, r.stores, r.checksum
        );
    }
    Ok(std::process::ExitCode::SUCCESS)
}
