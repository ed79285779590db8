//! ChampSim's binary traces, the format of the DPC-3 and CRC-2 trace sets:
//! one 64-byte `input_instr` per retired instruction, little-endian:
//!
//! | bytes | field |
//! |---|---|
//! | 0..8 | `ip` |
//! | 8, 9 | `is_branch`, `branch_taken` |
//! | 10..12 | `destination_registers[2]` |
//! | 12..16 | `source_registers[4]` |
//! | 16..32 | `destination_memory[2]`: addresses stored to, 0 for none |
//! | 32..64 | `source_memory[4]`: addresses loaded from, 0 for none |
//!
//! Each nonzero source address becomes a load and each nonzero destination
//! a store, in that order; instructions with neither become the `gap` of
//! the next access. ChampSim records no access size: every access is taken
//! as 8 bytes, a word (ChampSim itself moves whole 64-byte lines). The
//! files are usually xz-compressed; this module reads and writes the raw
//! records, and the caller (de)compresses.

use std::io::{Read, Write};

use crate::record::{Access, Sink};

/// Bytes per record.
pub const RECORD: usize = 64;
/// The size given to every access (ChampSim records none).
pub const ACCESS_SIZE: u16 = 8;

/// What a conversion saw.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ChampSimStats {
    /// Records (instructions) read.
    pub instructions: u64,
    /// Nonzero memory operands: loads plus stores.
    pub accesses: u64,
    pub loads: u64,
    pub stores: u64,
}

/// Why a ChampSim trace could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ChampSimError {
    #[error("reading the trace: {0}")]
    Io(#[from] std::io::Error),
    #[error(
        "the trace ends {0} bytes into a record (ChampSim records are {RECORD} bytes): truncated, or not a ChampSim trace"
    )]
    Truncated(usize),
}

fn word(r: &[u8; RECORD], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&r[at..at + 8]);
    u64::from_le_bytes(b)
}

/// Streams ChampSim records from `input` into `sink`.
pub fn convert<R: Read, S: Sink + ?Sized>(
    mut input: R,
    sink: &mut S,
) -> Result<ChampSimStats, ChampSimError> {
    let mut st = ChampSimStats::default();
    let mut rec = [0u8; RECORD];
    // Non-memory instructions since the last access.
    let mut gap: u32 = 0;
    loop {
        let mut got = 0;
        while got < RECORD {
            match input.read(&mut rec[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
        match got {
            0 => return Ok(st),
            RECORD => {}
            partial => return Err(ChampSimError::Truncated(partial)),
        }
        st.instructions += 1;
        let loads = (0..4).map(|i| word(&rec, 32 + 8 * i)).filter(|&a| a != 0);
        let stores = (0..2).map(|i| word(&rec, 16 + 8 * i)).filter(|&a| a != 0);
        let mut first = true;
        for (addr, write) in loads.map(|a| (a, false)).chain(stores.map(|a| (a, true))) {
            // The instruction itself is counted by its first access.
            let g = if first { gap } else { 0 };
            first = false;
            let a = if write {
                st.stores += 1;
                Access::store(addr, ACCESS_SIZE, g)
            } else {
                st.loads += 1;
                Access::load(addr, ACCESS_SIZE, g)
            };
            sink.access(a);
            st.accesses += 1;
        }
        gap = if first { gap.saturating_add(1) } else { 0 };
    }
}

/// Writes accesses as ChampSim records: `gap` records without memory
/// operands before each access (at most `max_gap`, so a long quiet stretch
/// does not swell the file), then one with the access as its only operand.
/// `ip` counts up so that every record is a distinct instruction.
pub struct ChampSimWriter<W: Write> {
    out: W,
    ip: u64,
    max_gap: u32,
    pub records: u64,
}

impl<W: Write> ChampSimWriter<W> {
    pub fn new(out: W, max_gap: u32) -> Self {
        Self {
            out,
            ip: 0x40_0000,
            max_gap,
            records: 0,
        }
    }

    fn record(&mut self, load: u64, store: u64) -> std::io::Result<()> {
        let mut rec = [0u8; RECORD];
        rec[0..8].copy_from_slice(&self.ip.to_le_bytes());
        rec[16..24].copy_from_slice(&store.to_le_bytes());
        rec[32..40].copy_from_slice(&load.to_le_bytes());
        self.ip += 4;
        self.records += 1;
        self.out.write_all(&rec)
    }

    pub fn access(&mut self, a: Access) -> std::io::Result<()> {
        for _ in 0..a.gap.min(self.max_gap) {
            self.record(0, 0)?;
        }
        // Address 0 means "no operand" in the format: it cannot be written.
        let addr = a.addr.max(1);
        if a.write {
            self.record(0, addr)
        } else {
            self.record(addr, 0)
        }
    }

    pub fn finish(mut self) -> std::io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(ip: u64, stores: [u64; 2], loads: [u64; 4]) -> [u8; RECORD] {
        let mut r = [0u8; RECORD];
        r[0..8].copy_from_slice(&ip.to_le_bytes());
        for (i, a) in stores.iter().enumerate() {
            r[16 + 8 * i..24 + 8 * i].copy_from_slice(&a.to_le_bytes());
        }
        for (i, a) in loads.iter().enumerate() {
            r[32 + 8 * i..40 + 8 * i].copy_from_slice(&a.to_le_bytes());
        }
        r
    }

    #[test]
    fn records_become_loads_then_stores_with_the_quiet_ones_as_gaps() {
        let mut bytes = Vec::new();
        for r in [
            rec(1, [0, 0], [0, 0, 0, 0]),
            rec(2, [0, 0], [0, 0, 0, 0]),
            rec(3, [0x2000, 0], [0x1000, 0x1008, 0, 0]),
            rec(4, [0, 0], [0, 0, 0, 0]),
            rec(5, [0x3000, 0x3040], [0, 0, 0, 0]),
        ] {
            bytes.extend_from_slice(&r);
        }
        let mut v: Vec<Access> = Vec::new();
        let st = convert(&bytes[..], &mut v).unwrap();
        assert_eq!(
            v,
            vec![
                Access::load(0x1000, 8, 2),
                Access::load(0x1008, 8, 0),
                Access::store(0x2000, 8, 0),
                Access::store(0x3000, 8, 1),
                Access::store(0x3040, 8, 0),
            ]
        );
        let want = ChampSimStats {
            instructions: 5,
            accesses: 5,
            loads: 2,
            stores: 3,
        };
        assert_eq!(st, want);
        // A record cut short is named, not read as zeros.
        let err = convert(&bytes[..RECORD * 2 + 10], &mut Vec::new()).unwrap_err();
        assert!(matches!(err, ChampSimError::Truncated(10)), "{err}");
    }

    #[test]
    fn written_records_read_back_as_the_same_accesses() {
        let accesses = vec![
            Access::load(0x1000, 8, 3),
            Access::store(0x2000, 8, 0),
            Access::load(0x1040, 8, 100),
        ];
        let mut w = ChampSimWriter::new(Vec::new(), 64);
        for &a in &accesses {
            w.access(a).unwrap();
        }
        assert_eq!(w.records, 3 + 1 + 1 + 64 + 1);
        let bytes = w.finish().unwrap();
        let mut back: Vec<Access> = Vec::new();
        let st = convert(&bytes[..], &mut back).unwrap();
        // The gap of 100 was capped at 64.
        assert_eq!(
            back,
            vec![accesses[0], accesses[1], Access::load(0x1040, 8, 64)]
        );
        assert_eq!(st.instructions, 70);
    }
}
