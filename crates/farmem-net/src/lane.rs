//! Two lanes on every path to a memory node, as DaeMon keeps two queues
//! (seed 000, §4.1): demand, the reads a faulting thread waits for, and
//! bulk, the write-backs and log batches that nothing waits for but the
//! evictor. Each lane has connections of its own, so a memory node serves
//! them on threads of their own and a page read never queues behind a
//! megabyte of write-back on the same socket. With one connection per node
//! both lanes share it.
//!
//! Measured on the demo's PageRank over 1 GiB at 258 MiB local (2-core VM,
//! four rounds, each beside a run with the lanes mixed): remote faults' p99
//! 806-1886 µs against 928-2031 µs mixed, lower in each pair; the program's
//! time did not move beyond this machine's noise (20.6-26.9 s against
//! 22.4-26.1 s).

use farmem_wire::Msg;

/// Which lane a request travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    /// Reads: a thread is waiting for them.
    Demand,
    /// Writes, log batches and everything else.
    Bulk,
}

impl Lane {
    /// The lane `msg` travels.
    pub fn of(msg: &Msg<'_>) -> Self {
        match msg {
            Msg::Read { .. } => Self::Demand,
            _ => Self::Bulk,
        }
    }

    /// Which of a node's `n` connections (n ≥ 1) carries this lane's
    /// `turn`-th request: demand takes the first half (rounded up), bulk
    /// the rest, each round-robin; one connection carries both.
    pub(crate) fn connection(self, n: usize, turn: usize) -> usize {
        let demand = n.div_ceil(2).max(1);
        match self {
            _ if n <= 1 => 0,
            Self::Demand => turn % demand,
            Self::Bulk => demand + turn % (n - demand),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Lane;
    use farmem_wire::{LogRecords, Msg};

    #[test]
    fn reads_take_the_demand_lane_and_writes_the_bulk_one() {
        assert_eq!(Lane::of(&Msg::Read { addr: 0, len: 4096 }), Lane::Demand);
        let data = [0u8; 64];
        assert_eq!(
            Lane::of(&Msg::Write {
                addr: 0,
                data: &data
            }),
            Lane::Bulk
        );
        let mut raw = Vec::new();
        LogRecords::encode_into(&mut raw, 0, &[1; 64]);
        let records = LogRecords::from_raw(&raw).unwrap();
        assert_eq!(Lane::of(&Msg::LogBatch { records }), Lane::Bulk);
    }

    #[test]
    fn demand_has_connections_of_its_own_once_there_are_two() {
        let taken = |lane: Lane, n| {
            let mut seen: Vec<usize> = (0..12).map(|turn| lane.connection(n, turn)).collect();
            seen.sort();
            seen.dedup();
            seen
        };
        assert_eq!(taken(Lane::Demand, 1), [0]);
        assert_eq!(taken(Lane::Bulk, 1), [0], "one connection: shared");
        assert_eq!(taken(Lane::Demand, 2), [0]);
        assert_eq!(taken(Lane::Bulk, 2), [1]);
        assert_eq!(taken(Lane::Demand, 3), [0, 1]);
        assert_eq!(taken(Lane::Bulk, 3), [2]);
        assert_eq!(taken(Lane::Demand, 4), [0, 1]);
        assert_eq!(taken(Lane::Bulk, 4), [2, 3]);
    }
}
