//! xDM's Algorithm 1 (seed 004 §3, "Multi-backend FM System Workflow"):
//! which backend each program gets, and which instance runs it.
//!
//! | Algorithm 1 | here |
//! |---|---|
//! | `page_feature_extraction(a)` | [`Features`], measured by the caller (a profile run's statistics) |
//! | `backend_selection(fa, system_pressure)` | [`SelectConfig::select`] with [`Pressure`] |
//! | `parameter_optimization(fa)` | [`SelectConfig::params`] |
//! | online VMs, free VMs, `accept`, `SwitchBackend`, `CreateVM` | [`Instance`], [`place`] |
//!
//! Pure: the caller measures, runs and times; this only decides. Its
//! caller is to be `farmem batch` (issue 17's dispatcher), not built yet.
//!
//! Where the seed is ambiguous: it names the features (data segments,
//! sequential vs random, hot/cold) but not the rule from features to a
//! backend. The rule here follows what `farmem eval xdm` measured on this
//! project's backends: a compressed pool pays only when its pages are
//! read back (hot data that compresses), a file serves sequential access
//! nearly as well as the rack and random access at twice its time, and
//! the rack is the default while it has room. "Free VM" is read as an
//! instance running nothing, and `accept` as a free slot.

/// A backend an instance runs its programs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BackendKind {
    /// The rack's memory nodes.
    Remote,
    /// A compressed pool in front of the memory nodes.
    Compressed,
    /// A file or block device.
    File,
}

/// What a profile run says about a program's pages.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Features {
    /// Reads a compressed pool served, or would have, per page written
    /// back: how hot the evicted data is.
    pub reuse: f64,
    /// Share of the pages written back that compressed to 3/4 or less.
    pub compressible: f64,
    /// Share of faults that read-ahead served or that continued a
    /// sequential run.
    pub sequential: f64,
    /// Far memory the program held at its peak.
    pub far_bytes: u64,
}

/// How much room each kind of far memory has now.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Pressure {
    /// Far memory the rack can still grant.
    pub rack_free: u64,
    /// Bytes a file backend can still reserve (0: no file configured).
    pub file_free: u64,
}

/// Thresholds of [`SelectConfig::select`] and [`SelectConfig::params`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SelectConfig {
    /// Least reuse for the pool to pay (default 1/4, as `auto`'s tuner).
    pub min_reuse: f64,
    /// Least compressible share for the pool to pay (default 1/32, as
    /// the compression gate).
    pub min_compressible: f64,
    /// Sequential share from which a file serves as well as the rack
    /// (default 0.8: the eval's scans, 3-6% apart).
    pub file_sequential: f64,
}

impl Default for SelectConfig {
    fn default() -> Self {
        Self {
            min_reuse: 0.25,
            min_compressible: 1.0 / 32.0,
            file_sequential: 0.8,
        }
    }
}

/// Parameters for one program on its backend.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Params {
    /// Most pages a fault brings in around itself.
    pub fault_around: u32,
}

impl SelectConfig {
    /// The backend for a program with `f`, given `p`; None when nothing
    /// has room for it now (it waits).
    pub fn select(&self, f: &Features, p: &Pressure) -> Option<BackendKind> {
        let pool_pays = f.reuse >= self.min_reuse && f.compressible >= self.min_compressible;
        let fits_rack = f.far_bytes <= p.rack_free;
        let fits_file = p.file_free > 0 && f.far_bytes <= p.file_free;
        match (fits_rack, fits_file) {
            (true, _) if pool_pays => Some(BackendKind::Compressed),
            // A stream leaves the rack to programs that need it.
            (true, true) if f.sequential >= self.file_sequential => Some(BackendKind::File),
            (true, _) => Some(BackendKind::Remote),
            (false, true) => Some(BackendKind::File),
            (false, false) => None,
        }
    }

    /// Fault-around for a program with `f`: wide for streams, narrow for
    /// random access, where pages read around a fault are rarely used.
    pub fn params(&self, f: &Features) -> Params {
        let fault_around = match f.sequential {
            s if s >= self.file_sequential => 128,
            s if s >= 0.3 => 32,
            _ => 8,
        };
        Params { fault_around }
    }
}

/// One instance: a backend and how many programs it can run at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Instance {
    pub backend: BackendKind,
    pub running: usize,
    pub slots: usize,
}

impl Instance {
    fn accepts(&self) -> bool {
        self.running < self.slots
    }
}

/// Where a program goes (Algorithm 1's branches, in its order).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// An instance already running programs on the backend, with room.
    Online(usize),
    /// An idle instance on the backend.
    Free(usize),
    /// An idle instance on another backend, switched to this one.
    Switch(usize),
    /// A new instance on the backend (resources allow one).
    Create,
    /// No instance can take it now.
    Wait,
}

/// Algorithm 1's choice of instance for a program that needs `backend`,
/// among `instances` (by index), when `can_create` more.
pub fn place(backend: BackendKind, instances: &[Instance], can_create: bool) -> Placement {
    let on = |i: &Instance| i.backend == backend && i.accepts();
    if let Some(n) = instances.iter().position(|i| on(i) && i.running > 0) {
        return Placement::Online(n);
    }
    if let Some(n) = instances.iter().position(|i| on(i) && i.running == 0) {
        return Placement::Free(n);
    }
    if let Some(n) = instances.iter().position(|i| i.running == 0 && i.slots > 0) {
        return Placement::Switch(n);
    }
    if can_create {
        Placement::Create
    } else {
        Placement::Wait
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn features(reuse: f64, compressible: f64, sequential: f64, far_mib: u64) -> Features {
        Features {
            reuse,
            compressible,
            sequential,
            far_bytes: far_mib * MIB,
        }
    }

    #[test]
    fn hot_compressible_data_gets_the_pool_streams_a_file_the_rest_the_rack() {
        let cfg = SelectConfig::default();
        let room = Pressure {
            rack_free: 1024 * MIB,
            file_free: 1024 * MIB,
        };
        let pick = |f: Features| cfg.select(&f, &room);
        assert_eq!(
            pick(features(1.6, 0.5, 0.1, 100)),
            Some(BackendKind::Compressed)
        );
        // Hot but incompressible, or compressible but cold: no pool.
        assert_eq!(
            pick(features(1.6, 0.0, 0.1, 100)),
            Some(BackendKind::Remote)
        );
        assert_eq!(
            pick(features(0.15, 0.9, 0.1, 100)),
            Some(BackendKind::Remote)
        );
        assert_eq!(pick(features(0.0, 0.0, 0.95, 100)), Some(BackendKind::File));
        // No file configured: the stream stays on the rack.
        let no_file = Pressure {
            file_free: 0,
            ..room
        };
        assert_eq!(
            cfg.select(&features(0.0, 0.0, 0.95, 100), &no_file),
            Some(BackendKind::Remote)
        );
    }

    #[test]
    fn a_full_rack_sends_programs_to_a_file_or_makes_them_wait() {
        let cfg = SelectConfig::default();
        let tight = Pressure {
            rack_free: 64 * MIB,
            file_free: 512 * MIB,
        };
        let random = features(0.1, 0.0, 0.1, 128);
        assert_eq!(cfg.select(&random, &tight), Some(BackendKind::File));
        let hot = features(2.0, 0.6, 0.1, 128);
        assert_eq!(cfg.select(&hot, &tight), Some(BackendKind::File));
        let huge = features(0.1, 0.0, 0.1, 1024);
        assert_eq!(cfg.select(&huge, &tight), None);
    }

    #[test]
    fn fault_around_widens_with_sequential_access() {
        let cfg = SelectConfig::default();
        let at = |s: f64| cfg.params(&features(0.0, 0.0, s, 1)).fault_around;
        assert_eq!((at(0.1), at(0.5), at(0.9)), (8, 32, 128));
    }

    #[test]
    fn instances_are_reused_then_idle_ones_then_switched_then_created() {
        use BackendKind::*;
        let inst = |backend, running, slots| Instance {
            backend,
            running,
            slots,
        };
        let v = [inst(File, 1, 1), inst(Remote, 0, 1), inst(Remote, 1, 2)];
        // A running instance on the backend with room comes first...
        assert_eq!(place(Remote, &v, true), Placement::Online(2));
        // ...then an idle one on it...
        let v = [inst(File, 1, 1), inst(Remote, 0, 1), inst(Remote, 2, 2)];
        assert_eq!(place(Remote, &v, true), Placement::Free(1));
        // ...then an idle one switched from another backend...
        assert_eq!(place(Compressed, &v, true), Placement::Switch(1));
        // ...then a new one, while resources allow.
        let v = [inst(File, 1, 1), inst(Remote, 2, 2)];
        assert_eq!(place(Compressed, &v, true), Placement::Create);
        assert_eq!(place(Compressed, &v, false), Placement::Wait);
        assert_eq!(place(Remote, &[], false), Placement::Wait);
    }
}
