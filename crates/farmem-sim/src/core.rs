//! Core models: how a thread's instructions and memory accesses become
//! time. A model is chosen by name (`core.model`); the engine is generic
//! over it, so the choice costs nothing per record.

use crate::Time;
use crate::config::CoreConfig;

/// The later of two times: `a.max(b)` for an `a` that is not NaN (a core's
/// clocks never are), in one `maxsd` where `max` takes seven instructions
/// to handle a NaN `a`; it runs several times a record.
#[inline(always)]
fn later(a: Time, b: Time) -> Time {
    if b > a { b } else { a }
}

/// Unfinished loads, oldest first: a ring whose length is a power of two,
/// so a step is a mask (a `VecDeque` wraps by compare and subtract, and
/// its checks were most of a core's cost per record).
#[derive(Debug, Clone)]
struct Pending {
    /// (instruction index, completion time) of each load.
    ring: Box<[(u64, Time)]>,
    mask: usize,
    head: usize,
    len: usize,
}

impl Pending {
    /// Room for `n` loads before it grows (a core has at most `mlp`).
    fn with_room(n: usize) -> Self {
        let size = n.max(1).next_power_of_two();
        Self {
            ring: vec![(0, 0.0); size].into_boxed_slice(),
            mask: size - 1,
            head: 0,
            len: 0,
        }
    }

    #[inline]
    fn len(&self) -> usize {
        self.len
    }

    #[inline]
    fn front(&self) -> Option<(u64, Time)> {
        (self.len > 0).then(|| self.ring[self.head & self.mask])
    }

    #[inline]
    fn pop_front(&mut self) -> Option<(u64, Time)> {
        let f = self.front()?;
        self.head = (self.head + 1) & self.mask;
        self.len -= 1;
        Some(f)
    }

    #[inline]
    fn push_back(&mut self, load: (u64, Time)) {
        if self.len == self.ring.len() {
            self.grow();
        }
        self.ring[(self.head + self.len) & self.mask] = load;
        self.len += 1;
    }

    /// Twice the room, in order (never for `mlp` loads or fewer).
    #[cold]
    fn grow(&mut self) {
        let mut bigger = Self::with_room(self.ring.len() * 2);
        for load in self.iter() {
            bigger.push_back(load);
        }
        *self = bigger;
    }

    fn iter(&self) -> impl Iterator<Item = (u64, Time)> + '_ {
        (0..self.len).map(|k| self.ring[(self.head + k) & self.mask])
    }

    fn clear(&mut self) {
        self.len = 0;
    }
}

/// One core's timing. The engine counts instructions and records; the
/// model only turns them into time.
pub trait CoreModel: Clone + Send + 'static {
    const NAME: &'static str;
    fn new(cfg: &CoreConfig) -> Self;
    /// The core's clock: when its next instruction issues.
    fn now(&self) -> Time;
    /// Retires `n` instructions, the last a memory access that is
    /// instruction number `index` of the thread; returns when it issues.
    fn issue(&mut self, n: u64, index: u64, write: bool) -> Time;
    /// The access issued at `t` completes at `done`, served at `level`
    /// (0 L1, 1 L2, 2 LLC, 3 beyond).
    fn complete(&mut self, index: u64, t: Time, done: Time, level: u8, write: bool);
    /// Waits for everything outstanding; returns the end of the run.
    fn drain(&mut self) -> Time;
}

pub use crate::config::CoreKind;

impl CoreKind {
    pub const NAMES: &'static [&'static str] = &[OooCore::NAME, InOrderCore::NAME];
}

/// Runs `$body` with the type `$C` bound to the core model `$kind` names.
#[macro_export]
macro_rules! with_core_model {
    ($kind:expr, $C:ident => $body:expr) => {
        match $kind {
            $crate::core::CoreKind::Ooo => {
                type $C = $crate::core::OooCore;
                $body
            }
            $crate::core::CoreKind::InOrder => {
                type $C = $crate::core::InOrderCore;
                $body
            }
        }
    };
}

/// Interval-style out-of-order core: non-memory instructions retire at
/// `width` per cycle; an access that misses L1 completes at its own time
/// while later instructions keep issuing, until either the reorder window
/// (`rob` instructions past the oldest unfinished load) or the number of
/// outstanding misses (`mlp`) is exhausted. Stores retire through the store
/// buffer without stalling. `mlp = 1` makes every missing load blocking.
#[derive(Debug, Clone)]
pub struct OooCore {
    t: Time,
    instr_ns: f64,
    rob: u64,
    mlp: usize,
    /// Unfinished loads, oldest first: (instruction index, completion time).
    pending: Pending,
    /// Latest completion of anything this core issued.
    horizon: Time,
}

impl CoreModel for OooCore {
    const NAME: &'static str = "ooo";

    fn new(cfg: &CoreConfig) -> Self {
        Self {
            t: 0.0,
            instr_ns: 1.0 / (cfg.freq_ghz * cfg.width),
            rob: cfg.rob as u64,
            mlp: cfg.mlp as usize,
            pending: Pending::with_room(cfg.mlp as usize),
            horizon: 0.0,
        }
    }

    #[inline]
    fn now(&self) -> Time {
        self.t
    }

    #[inline]
    fn issue(&mut self, n: u64, index: u64, write: bool) -> Time {
        self.t += n as f64 * self.instr_ns;
        // In-order retirement: a load `rob` instructions back must be done.
        while let Some((idx, done)) = self.pending.front() {
            if idx + self.rob > index {
                break;
            }
            self.t = later(self.t, done);
            self.pending.pop_front();
        }
        if !write
            && self.pending.len() >= self.mlp
            && let Some((_, done)) = self.pending.pop_front()
        {
            self.t = later(self.t, done);
        }
        self.t
    }

    #[inline]
    fn complete(&mut self, index: u64, _t: Time, done: Time, level: u8, write: bool) {
        self.horizon = later(self.horizon, done);
        if level > 0 && !write {
            if self.mlp == 1 {
                self.t = done;
            } else {
                self.pending.push_back((index, done));
            }
        }
    }

    fn drain(&mut self) -> Time {
        let end = self
            .pending
            .iter()
            .fold(self.t.max(self.horizon), |m, p| m.max(p.1));
        self.pending.clear();
        self.t = end;
        end
    }
}

/// In-order core: instructions retire at `width` per cycle and every load
/// stalls the core for its whole latency, L1 hits included; stores retire
/// through the store buffer. Time is instructions plus the sum of load
/// latencies, the AMAT model of Kona's KCacheSim; `rob` and `mlp` do not
/// apply.
#[derive(Debug, Clone)]
pub struct InOrderCore {
    t: Time,
    instr_ns: f64,
    horizon: Time,
}

impl CoreModel for InOrderCore {
    const NAME: &'static str = "in-order";

    fn new(cfg: &CoreConfig) -> Self {
        Self {
            t: 0.0,
            instr_ns: 1.0 / (cfg.freq_ghz * cfg.width),
            horizon: 0.0,
        }
    }

    #[inline]
    fn now(&self) -> Time {
        self.t
    }

    #[inline]
    fn issue(&mut self, n: u64, _index: u64, _write: bool) -> Time {
        self.t += n as f64 * self.instr_ns;
        self.t
    }

    #[inline]
    fn complete(&mut self, _index: u64, _t: Time, done: Time, _level: u8, write: bool) {
        self.horizon = later(self.horizon, done);
        if !write {
            self.t = done;
        }
    }

    fn drain(&mut self) -> Time {
        self.t = self.t.max(self.horizon);
        self.t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pending_loads_keep_their_order_through_wraps_and_growth() {
        let mut p = Pending::with_room(3);
        let mut model = std::collections::VecDeque::new();
        for i in 0..200u64 {
            // Pushes outrun pops for a while (growth), then pops catch up.
            let pushes = if i < 50 { 2 } else { 1 };
            for k in 0..pushes {
                let load = (i * 2 + k, i as f64);
                p.push_back(load);
                model.push_back(load);
            }
            if i % 3 != 0 || i >= 50 {
                assert_eq!(p.pop_front(), model.pop_front());
            }
            assert_eq!(p.len(), model.len());
            assert_eq!(p.front(), model.front().copied());
            assert!(p.iter().eq(model.iter().copied()));
        }
        p.clear();
        assert_eq!(p.pop_front(), None);
    }
}
