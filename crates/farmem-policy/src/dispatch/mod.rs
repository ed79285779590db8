//! xDM's Algorithm 1 (seed 004 §3, "Multi-backend FM System Workflow"):
//! which backend each program gets, and which instance runs it.
//!
//! | Algorithm 1 | here |
//! |---|---|
//! | `page_feature_extraction(a)` | [`Features`], measured by the caller (a profile run's statistics) |
//! | `backend_selection(fa, system_pressure)` | [`SelectConfig::select`] with [`Pressure`] |
//! | `parameter_optimization(fa)` | [`SelectConfig::params`] |
//! | online VMs, free VMs, `accept`, `SwitchBackend`, `CreateVM` | [`Instance`], [`place`] |
//! | the loop over the queue of applications | [`batch::Batch`] |
//!
//! Pure: the caller measures, runs and times; this only decides. Its
//! caller is `farmem batch`, through [`batch::Batch`]: which job starts
//! next, where, and what it reserves.
//!
//! Where the seed is ambiguous: it names the features (data segments,
//! sequential vs random, hot/cold) but not the rule from features to a
//! backend. The rule here follows what `farmem eval xdm` and `farmem
//! batch` measured on this project's backends: a compressed pool pays
//! only when its pages are read back (hot data that compresses); the rack
//! is the default while it has room; a file serves a stream alone nearly
//! as well as the rack, random access at twice its time, and slows a
//! program beside it, so it takes streams when the rack is full. "Free
//! VM" is read as an instance running nothing, and `accept` as a free
//! slot. The seed does not say what a program does when no backend that
//! suits it has room; here it waits, unless the rack could never hold it.

pub mod batch;

/// A backend an instance runs its programs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BackendKind {
    /// The rack's memory nodes.
    Remote,
    /// A compressed pool in front of the memory nodes.
    Compressed,
    /// The same pool, on only while its pages are read back enough (the
    /// runtime's own choice, mid-run; [`SelectConfig::select`] never
    /// picks it, a static assignment may).
    Auto,
    /// A file or block device.
    File,
}

impl BackendKind {
    /// Its name, as `farmem run --backend` takes it (a file's without
    /// its path).
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Remote => "remote",
            BackendKind::Compressed => "compressed",
            BackendKind::Auto => "auto",
            BackendKind::File => "file",
        }
    }
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

/// Room on one kind of far memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Room {
    /// Bytes it can still grant now.
    pub free: u64,
    /// Bytes it has in all (0: not configured).
    pub total: u64,
}

impl Room {
    /// Room of `total` bytes, all free.
    pub fn empty(total: u64) -> Self {
        Self { free: total, total }
    }

    fn fits_now(&self, bytes: u64) -> bool {
        self.total > 0 && bytes <= self.free
    }

    fn fits_ever(&self, bytes: u64) -> bool {
        self.total > 0 && bytes <= self.total
    }
}

/// How much room each kind of far memory has: Algorithm 1's
/// `system_pressure`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pressure {
    /// The rack's memory nodes (the remote and compressed backends).
    pub rack: Room,
    /// A file backend's filesystem.
    pub file: Room,
}

impl Pressure {
    /// The room `backend` takes its far memory from.
    pub fn room(&self, backend: BackendKind) -> Room {
        match backend {
            BackendKind::File => self.file,
            BackendKind::Remote | BackendKind::Compressed | BackendKind::Auto => self.rack,
        }
    }

    /// Whether `backend` can hold `bytes` now.
    pub fn fits_now(&self, backend: BackendKind, bytes: u64) -> bool {
        self.room(backend).fits_now(bytes)
    }

    /// Whether `backend` could hold `bytes` once the others are done.
    pub fn fits_ever(&self, backend: BackendKind, bytes: u64) -> bool {
        self.room(backend).fits_ever(bytes)
    }
}

/// Thresholds of [`SelectConfig::select`] and [`SelectConfig::params`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SelectConfig {
    /// Least reuse for the pool to pay (default 1/4, as `auto`'s tuner).
    pub min_reuse: f64,
    /// Least compressible share for the pool to pay (default 1/32, as
    /// the compression gate).
    pub min_compressible: f64,
    /// Sequential share from which a program runs on a file about as
    /// fast as on the rack, so it may take the file when the rack is full
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
    /// The backend a program with `f` runs best on while the rack has
    /// room: the pool for hot data that compresses, else the rack itself.
    pub fn preferred(&self, f: &Features) -> BackendKind {
        if f.reuse >= self.min_reuse && f.compressible >= self.min_compressible {
            BackendKind::Compressed
        } else {
            BackendKind::Remote
        }
    }

    /// The backend for a program with `f` under `p`, or None: it waits.
    ///
    /// The rack while it has room: a file's direct I/O costs this
    /// machine's CPU, so beside another program a scan on the file took
    /// 1.5x its time on the rack and slowed its neighbour by 1.4x
    /// (`farmem batch` on a roomy rack). When the rack is full, a stream
    /// takes the file, where it runs about as fast as on the rack; random
    /// access waits for the rack rather than run at twice its time there
    /// (the eval's kv), unless the rack could never hold it.
    pub fn select(&self, f: &Features, p: &Pressure) -> Option<BackendKind> {
        let want = self.preferred(f);
        if p.fits_now(want, f.far_bytes) {
            return Some(want);
        }
        let stream = f.sequential >= self.file_sequential;
        let file_now = p.fits_now(BackendKind::File, f.far_bytes);
        (file_now && (stream || !p.fits_ever(want, f.far_bytes))).then_some(BackendKind::File)
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

impl Placement {
    /// Algorithm 1's branch, in a word.
    pub fn name(self) -> &'static str {
        match self {
            Placement::Online(_) => "online",
            Placement::Free(_) => "free",
            Placement::Switch(_) => "switch",
            Placement::Create => "create",
            Placement::Wait => "wait",
        }
    }
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
    fn hot_compressible_data_gets_the_pool_the_rest_the_rack_while_it_has_room() {
        let cfg = SelectConfig::default();
        let room = Pressure {
            rack: Room::empty(1024 * MIB),
            file: Room::empty(1024 * MIB),
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
        // A stream too, while the rack has room.
        assert_eq!(
            pick(features(0.0, 0.0, 0.95, 100)),
            Some(BackendKind::Remote)
        );
    }

    #[test]
    fn a_full_rack_sends_streams_to_a_file_and_makes_the_rest_wait() {
        let cfg = SelectConfig::default();
        let busy = Pressure {
            rack: Room {
                free: 64 * MIB,
                total: 512 * MIB,
            },
            file: Room::empty(4096 * MIB),
        };
        // The rack will have room again: random access and hot data wait.
        let random = features(0.1, 0.0, 0.1, 128);
        assert_eq!(cfg.select(&random, &busy), None);
        let hot = features(2.0, 0.6, 0.1, 128);
        assert_eq!(cfg.select(&hot, &busy), None);
        // It never will: the file takes the program now.
        let huge = features(0.1, 0.0, 0.1, 1024);
        assert_eq!(cfg.select(&huge, &busy), Some(BackendKind::File));
        // A stream takes the file while the rack is full.
        let stream = features(0.0, 0.0, 0.9, 128);
        assert_eq!(cfg.select(&stream, &busy), Some(BackendKind::File));
        // No file configured, or none with room: the stream waits.
        let no_file = Pressure {
            file: Room::default(),
            ..busy
        };
        assert_eq!(cfg.select(&stream, &no_file), None);
        let big_stream = features(0.0, 0.0, 0.9, 8192);
        assert_eq!(cfg.select(&big_stream, &busy), None);
        let idle = Pressure {
            rack: Room::empty(16384 * MIB),
            ..busy
        };
        assert_eq!(cfg.select(&big_stream, &idle), Some(BackendKind::Remote));
        // Nothing could ever hold it.
        assert_eq!(cfg.select(&random, &Pressure::default()), None);
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
