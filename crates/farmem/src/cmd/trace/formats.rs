//! Traces in other tools' formats: valgrind lackey logs and ChampSim
//! traces (raw or xz-compressed), read into farmem's own format
//! (`farmem trace import`), and farmem traces written as ChampSim traces
//! (`farmem trace export`). Which format a file is in is read from its
//! first bytes.

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;

use anyhow::Context;
use farmem_workloads::champsim::{self, ChampSimWriter};
use farmem_workloads::record::{Access, Sink};
use farmem_workloads::trace::MAGIC;
use farmem_workloads::{TraceReader, lackey};

/// xz's stream header.
const XZ_MAGIC: &[u8; 6] = b"\xfd7zXZ\0";
/// The most non-memory records written before one access on export.
const MAX_EXPORT_GAP: u32 = 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// farmem's own (`farmem trace gen|capture`).
    Farmem,
    /// `valgrind --tool=lackey --trace-mem=yes` output.
    Lackey,
    /// ChampSim's 64-byte instruction records, raw or xz-compressed.
    Champsim,
}

impl Format {
    pub fn name(self) -> &'static str {
        match self {
            Format::Farmem => "farmem",
            Format::Lackey => "lackey",
            Format::Champsim => "champsim",
        }
    }
}

/// Whether `path` is xz-compressed.
pub fn is_xz(path: &Path) -> anyhow::Result<bool> {
    let mut head = [0u8; 6];
    let n = File::open(path)
        .with_context(|| format!("opening {}", path.display()))?
        .read(&mut head)?;
    Ok(n == head.len() && &head == XZ_MAGIC)
}

/// The format of `path`, and whether it is xz-compressed: farmem's magic,
/// xz's (ChampSim's trace sets are xz files), lackey's text records
/// within the first lines, else raw ChampSim records if the size is a
/// whole number of them.
pub fn detect(path: &Path) -> anyhow::Result<(Format, bool)> {
    let mut head = Vec::new();
    File::open(path)
        .with_context(|| format!("opening {}", path.display()))?
        .take(64 << 10)
        .read_to_end(&mut head)?;
    if head.starts_with(MAGIC) {
        return Ok((Format::Farmem, false));
    }
    if head.starts_with(XZ_MAGIC) {
        return Ok((Format::Champsim, true));
    }
    let text = String::from_utf8_lossy(&head);
    let lackey_line = |l: &str| {
        ["I  ", " L ", " S ", " M "]
            .iter()
            .any(|p| l.strip_prefix(p).is_some_and(|r| r.contains(',')))
    };
    if text.lines().take(64).any(lackey_line) {
        return Ok((Format::Lackey, false));
    }
    let len = std::fs::metadata(path)?.len();
    if len > 0 && len.is_multiple_of(champsim::RECORD as u64) {
        return Ok((Format::Champsim, false));
    }
    anyhow::bail!(
        "{}: not a farmem, lackey or ChampSim trace (no farmem or xz magic, no lackey records in its first lines, and {len} bytes is not a whole number of {}-byte ChampSim records)",
        path.display(),
        champsim::RECORD
    )
}

/// What reading a foreign trace saw: its own count of records, and the
/// accesses that came out of them.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct SourceCounts {
    /// Lines (lackey) or instruction records (ChampSim) read.
    pub source_records: u64,
    /// Memory accesses the source holds: lackey's L, S and M lines (an M
    /// is a load and a store), ChampSim's nonzero memory operands.
    pub source_accesses: u64,
    /// Instructions the source counts (lackey's I lines, ChampSim's records).
    pub source_instructions: u64,
    /// Accesses passed on.
    pub accesses: u64,
}

/// Reads `path` in `format` (decompressing xz), passing its accesses to
/// `sink`.
pub fn read_into(
    path: &Path,
    format: Format,
    xz: bool,
    sink: &mut dyn Sink,
) -> anyhow::Result<SourceCounts> {
    let file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let input: Box<dyn Read> = if xz {
        Box::new(liblzma::read::XzDecoder::new(BufReader::with_capacity(
            1 << 20,
            file,
        )))
    } else {
        Box::new(file)
    };
    let mut counted = Counted { inner: sink, n: 0 };
    let read = match format {
        Format::Lackey => {
            let st = lackey::convert(BufReader::with_capacity(1 << 20, input), &mut counted)
                .with_context(|| format!("reading {}", path.display()))?;
            // An M line is one record and two accesses.
            SourceCounts {
                source_records: st.lines - st.skipped,
                source_accesses: st.accesses,
                source_instructions: st.instructions,
                accesses: 0,
            }
        }
        Format::Champsim => {
            let st = champsim::convert(BufReader::with_capacity(1 << 20, input), &mut counted)
                .with_context(|| format!("reading {}", path.display()))?;
            SourceCounts {
                source_records: st.instructions,
                source_accesses: st.accesses,
                source_instructions: st.instructions,
                accesses: 0,
            }
        }
        Format::Farmem => {
            let mut r = TraceReader::open(path)?;
            let n = r.replay(&mut counted)?;
            SourceCounts {
                source_records: n,
                source_accesses: n,
                source_instructions: r.header().instructions,
                accesses: 0,
            }
        }
    };
    Ok(SourceCounts {
        accesses: counted.n,
        ..read
    })
}

/// Counts what passes to the sink under it.
struct Counted<'a> {
    inner: &'a mut dyn Sink,
    n: u64,
}

impl Sink for Counted<'_> {
    fn begin(&mut self, footprint: u64) {
        self.inner.begin(footprint);
    }
    fn access(&mut self, a: Access) {
        self.n += 1;
        self.inner.access(a);
    }
}

/// Writes the farmem trace `from` as a ChampSim trace at `to`
/// (xz-compressed when `to` ends in `.xz`); the records written.
pub fn export_champsim(from: &Path, to: &Path) -> anyhow::Result<u64> {
    let out = File::create(to).with_context(|| format!("creating {}", to.display()))?;
    let out = std::io::BufWriter::with_capacity(1 << 20, out);
    let writing = || format!("writing {}", to.display());
    if to.extension().is_some_and(|e| e == "xz") {
        let (records, xz) = export_into(from, liblzma::write::XzEncoder::new(out, 6))?;
        xz.finish()
            .with_context(writing)?
            .into_inner()
            .map_err(|e| e.into_error())
            .with_context(writing)?;
        Ok(records)
    } else {
        let (records, out) = export_into(from, out)?;
        out.into_inner()
            .map_err(|e| e.into_error())
            .with_context(writing)?;
        Ok(records)
    }
}

fn export_into<W: std::io::Write>(from: &Path, out: W) -> anyhow::Result<(u64, W)> {
    let mut sink = ExportSink {
        w: ChampSimWriter::new(out, MAX_EXPORT_GAP),
        err: None,
    };
    TraceReader::open(from)?.replay(&mut sink)?;
    if let Some(e) = sink.err {
        return Err(e.into());
    }
    let records = sink.w.records;
    Ok((records, sink.w.finish()?))
}

struct ExportSink<W: std::io::Write> {
    w: ChampSimWriter<W>,
    err: Option<std::io::Error>,
}

impl<W: std::io::Write> Sink for ExportSink<W> {
    fn access(&mut self, a: Access) {
        if self.err.is_none()
            && let Err(e) = self.w.access(a)
        {
            self.err = Some(e);
        }
    }
}
