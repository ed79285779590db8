//! A named link that several processes on one host share (ThymesisFlow's
//! MCBN: compute-side programs contending for one borrower link), and
//! whose delay can be changed while they run (`farmem link set`).
//!
//! Its state is a page of shared memory, `/dev/shm/farmem-link-NAME`: the
//! delay model, under a sequence lock, and the time the next request may
//! pass, advanced by compare-and-swap, so every process's requests take
//! turns at one gate. Gaps are drawn by each process
//! ([`DelayModel::gap`], the one rule every gate uses); times are
//! `CLOCK_MONOTONIC`, which every process on the host shares. A delay
//! that changes over time is set live rather than as `steps:`, which a
//! shared link refuses.

use std::fs::{File, OpenOptions};
use std::io::ErrorKind;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use farmem_policy::delay::DelayModel;

/// Marks a page laid out as [`State`] ("FMLINK01").
const MAGIC: u64 = u64::from_be_bytes(*b"FMLINK01");
const PAGE: usize = 4096;

/// The shared page. Only atomics: every process maps it.
#[repr(C)]
struct State {
    magic: AtomicU64,
    /// Odd while a writer changes the model.
    seq: AtomicU64,
    kind: AtomicU64,
    a: AtomicU64,
    b: AtomicU64,
    /// `CLOCK_MONOTONIC` ns before which no request passes.
    next_free: AtomicU64,
    /// `CLOCK_MONOTONIC` ns of the link's first request (0: none yet).
    started: AtomicU64,
    /// Requests admitted and their data bytes, by every process.
    admitted: AtomicU64,
    bytes: AtomicU64,
}

const _: () = assert!(std::mem::size_of::<State>() <= PAGE);

/// Why a shared link could not be used.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    #[error(
        "bad link name `{0}`: 1 to 64 letters, digits, `-` or `_` (it names /dev/shm/farmem-link-NAME)"
    )]
    BadName(String),
    #[error("no link `{0}` on this host (a `farmem run --link {0}` makes it)")]
    Missing(String),
    #[error(
        "{model} cannot be set on a shared link: set a changing delay live with `farmem link set`"
    )]
    Unshareable { model: String },
    #[error("link `{name}` at {path}: {source}")]
    Io {
        name: String,
        path: String,
        source: std::io::Error,
    },
    #[error("link `{name}` at {path} is not a farmem link, or not yet set up")]
    NotALink { name: String, path: String },
}

/// A handle on a named link; each process opens its own.
pub struct SharedLink {
    name: String,
    state: *const State,
    _file: File,
}

// SAFETY: the mapping lives as long as the handle and holds only atomics.
unsafe impl Send for SharedLink {}
// SAFETY: as above; all access is through atomics.
unsafe impl Sync for SharedLink {}

impl SharedLink {
    /// Where the link `name` lives.
    pub fn path(name: &str) -> PathBuf {
        PathBuf::from(format!("/dev/shm/farmem-link-{name}"))
    }

    /// Opens the link `name`, making it if there is none; sets `model` on
    /// it (the last one set wins), or, with None, leaves an existing
    /// link's delay and gives a new one none.
    pub fn open_or_create(name: &str, model: Option<&DelayModel>) -> Result<Self, LinkError> {
        if let Some(model) = model {
            encode(model)?;
        }
        let path = Self::path(check_name(name)?);
        let io = |source| LinkError::Io {
            name: name.into(),
            path: path.display().to_string(),
            source,
        };
        let created = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path);
        let (file, fresh) = match created {
            Ok(f) => (f, true),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => (
                OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(&path)
                    .map_err(io)?,
                false,
            ),
            Err(e) => return Err(io(e)),
        };
        if fresh {
            file.set_len(PAGE as u64).map_err(io)?;
        }
        let link = Self::map(name, file, &path)?;
        if fresh {
            link.state().magic.store(MAGIC, Ordering::Release);
        } else {
            link.wait_until_set_up(&path)?;
        }
        if let Some(model) = model {
            link.set(model)?;
        }
        Ok(link)
    }

    /// Opens the existing link `name`.
    pub fn open(name: &str) -> Result<Self, LinkError> {
        let path = Self::path(check_name(name)?);
        let file = match OpenOptions::new().read(true).write(true).open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == ErrorKind::NotFound => {
                return Err(LinkError::Missing(name.into()));
            }
            Err(source) => {
                return Err(LinkError::Io {
                    name: name.into(),
                    path: path.display().to_string(),
                    source,
                });
            }
        };
        let link = Self::map(name, file, &path)?;
        link.wait_until_set_up(&path)?;
        Ok(link)
    }

    fn map(name: &str, file: File, path: &std::path::Path) -> Result<Self, LinkError> {
        let not_a_link = || LinkError::NotALink {
            name: name.into(),
            path: path.display().to_string(),
        };
        let len = file.metadata().map(|m| m.len()).unwrap_or(0);
        if len < PAGE as u64 {
            return Err(not_a_link());
        }
        // SAFETY: a shared mapping of a file of at least PAGE bytes, kept
        // open by the handle; unmapped in Drop.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                PAGE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(LinkError::Io {
                name: name.into(),
                path: path.display().to_string(),
                source: std::io::Error::last_os_error(),
            });
        }
        Ok(Self {
            name: name.into(),
            state: p.cast(),
            _file: file,
        })
    }

    /// A link being made by another process is set up within moments.
    fn wait_until_set_up(&self, path: &std::path::Path) -> Result<(), LinkError> {
        let start = Instant::now();
        while self.state().magic.load(Ordering::Acquire) != MAGIC {
            if start.elapsed() > Duration::from_secs(1) {
                return Err(LinkError::NotALink {
                    name: self.name.clone(),
                    path: path.display().to_string(),
                });
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(())
    }

    fn state(&self) -> &State {
        // SAFETY: mapped for the handle's life (see `map`).
        unsafe { &*self.state }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Sets the link's delay, for every process on it, from their next
    /// request on.
    pub fn set(&self, model: &DelayModel) -> Result<(), LinkError> {
        let (kind, a, b) = encode(model)?;
        let s = self.state();
        // Writers take turns: the one that makes the sequence odd writes.
        let mut seq = s.seq.load(Ordering::Relaxed);
        loop {
            if seq % 2 == 1 {
                std::hint::spin_loop();
                seq = s.seq.load(Ordering::Relaxed);
                continue;
            }
            match s
                .seq
                .compare_exchange(seq, seq + 1, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(_) => break,
                Err(now) => seq = now,
            }
        }
        s.kind.store(kind, Ordering::Relaxed);
        s.a.store(a, Ordering::Relaxed);
        s.b.store(b, Ordering::Relaxed);
        s.seq.store(seq + 2, Ordering::Release);
        Ok(())
    }

    /// Changes with every [`Self::set`], so a reader can tell whether the
    /// delay may have changed since it last read [`Self::model`].
    pub fn generation(&self) -> u64 {
        self.state().seq.load(Ordering::Acquire)
    }

    /// The link's delay now.
    pub fn model(&self) -> DelayModel {
        let s = self.state();
        loop {
            let before = s.seq.load(Ordering::Acquire);
            if before % 2 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let words = (
                s.kind.load(Ordering::Relaxed),
                s.a.load(Ordering::Relaxed),
                s.b.load(Ordering::Relaxed),
            );
            std::sync::atomic::fence(Ordering::Acquire);
            if s.seq.load(Ordering::Relaxed) == before {
                return decode(words);
            }
        }
    }

    /// Requests admitted by every process, and their data bytes.
    pub fn totals(&self) -> (u64, u64) {
        let s = self.state();
        (
            s.admitted.load(Ordering::Relaxed),
            s.bytes.load(Ordering::Relaxed),
        )
    }

    /// Takes the next turn for a request whose gap is `gap(model,
    /// since_start)`: returns its turn, as `CLOCK_MONOTONIC` ns, and its
    /// gap.
    pub(crate) fn admit(&self, bytes: u64, gap: impl Fn(&DelayModel, u64) -> u64) -> (u64, u64) {
        let s = self.state();
        let now = monotonic_ns();
        let start = match s
            .started
            .compare_exchange(0, now, Ordering::Relaxed, Ordering::Relaxed)
        {
            Ok(_) => now,
            Err(was) => was,
        };
        let model = self.model();
        let mut free = s.next_free.load(Ordering::Relaxed);
        loop {
            let pass = free.max(now);
            let g = gap(&model, pass.saturating_sub(start));
            match s.next_free.compare_exchange_weak(
                free,
                pass.saturating_add(g),
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    s.admitted.fetch_add(1, Ordering::Relaxed);
                    s.bytes.fetch_add(bytes, Ordering::Relaxed);
                    return (pass, g);
                }
                Err(now_free) => free = now_free,
            }
        }
    }
}

impl SharedLink {
    /// Gives `ns` of the link back (a request that crossed in fewer bytes
    /// than it was admitted for, see `DelayGate::refund`), never past now,
    /// and takes `bytes` off the link's total.
    pub(crate) fn refund(&self, ns: u64, bytes: u64) {
        let s = self.state();
        let now = monotonic_ns();
        let mut free = s.next_free.load(Ordering::Relaxed);
        while let Err(was) = s.next_free.compare_exchange_weak(
            free,
            free.saturating_sub(ns).max(now),
            Ordering::AcqRel,
            Ordering::Relaxed,
        ) {
            free = was;
        }
        s.bytes.fetch_sub(bytes, Ordering::Relaxed);
    }
}

impl Drop for SharedLink {
    fn drop(&mut self) {
        // SAFETY: mapped in `map` with this length; nothing refers to it
        // past the handle.
        unsafe { libc::munmap(self.state as *mut libc::c_void, PAGE) };
    }
}

impl std::fmt::Debug for SharedLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedLink")
            .field("name", &self.name)
            .finish()
    }
}

/// `CLOCK_MONOTONIC` now, in ns: the clock every process on the host shares.
pub(crate) fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

fn check_name(name: &str) -> Result<&str, LinkError> {
    let ok = (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_');
    if ok {
        Ok(name)
    } else {
        Err(LinkError::BadName(name.into()))
    }
}

fn encode(model: &DelayModel) -> Result<(u64, u64, u64), LinkError> {
    Ok(match model {
        DelayModel::None => (0, 0, 0),
        DelayModel::Period { gap_ns } => (1, *gap_ns, 0),
        DelayModel::Uniform { min_ns, max_ns } => (2, *min_ns, *max_ns),
        DelayModel::Exponential { mean_ns } => (3, *mean_ns, 0),
        DelayModel::Rate { bytes_per_sec } => (4, *bytes_per_sec, 0),
        DelayModel::Steps { .. } => {
            return Err(LinkError::Unshareable {
                model: model.to_string(),
            });
        }
    })
}

/// The model a page holds; words no version wrote read as no delay.
fn decode((kind, a, b): (u64, u64, u64)) -> DelayModel {
    match kind {
        1 => DelayModel::Period { gap_ns: a },
        2 => DelayModel::Uniform {
            min_ns: a.min(b),
            max_ns: a.max(b),
        },
        3 => DelayModel::Exponential { mean_ns: a },
        4 => DelayModel::Rate {
            bytes_per_sec: a.max(1),
        },
        _ => DelayModel::None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(test: &str) -> String {
        format!("test-{test}-{}", std::process::id())
    }

    struct Removed(String);
    impl Drop for Removed {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(SharedLink::path(&self.0));
        }
    }

    fn period(model: &DelayModel, _: u64) -> u64 {
        match model {
            DelayModel::Period { gap_ns } => *gap_ns,
            _ => 0,
        }
    }

    #[test]
    fn two_handles_take_turns_at_one_gate_and_see_a_delay_set_live() {
        let n = name("turns");
        let _rm = Removed(n.clone());
        let first = SharedLink::open_or_create(&n, Some(&"1s".parse().unwrap())).unwrap();
        let second = SharedLink::open(&n).unwrap();
        // Back to back from two handles (two processes): a second apart.
        let (a, gap) = first.admit(4096, period);
        let (b, _) = second.admit(4096, period);
        assert_eq!(gap, 1_000_000_000);
        assert_eq!(b - a, 1_000_000_000);
        assert_eq!(first.totals(), (2, 8192));
        // Set from anywhere, seen by every handle from its next request.
        second.set(&"20us".parse().unwrap()).unwrap();
        assert_eq!(first.model().to_string(), "20us");
        let (c, gap) = first.admit(0, period);
        assert_eq!(
            (c - b, gap),
            (1_000_000_000, 20_000),
            "its turn was taken at 1 s"
        );
    }

    #[test]
    fn every_model_but_steps_round_trips_through_the_page() {
        let n = name("models");
        let _rm = Removed(n.clone());
        let link = SharedLink::open_or_create(&n, None).unwrap();
        for spec in [
            "none",
            "20us",
            "uniform:10us..50us",
            "exp:30us",
            "rate:104857600/s",
        ] {
            link.set(&spec.parse().unwrap()).unwrap();
            assert_eq!(SharedLink::open(&n).unwrap().model().to_string(), spec);
        }
        let err = link.set(&"steps:0=0,1s=50us".parse().unwrap()).unwrap_err();
        assert!(err.to_string().contains("farmem link set"), "{err}");
        assert_eq!(link.model().to_string(), "rate:104857600/s", "unchanged");
    }

    #[test]
    fn bad_names_and_missing_links_are_named() {
        for bad in ["", "a/b", "..", &"x".repeat(65), "a b"] {
            let err = SharedLink::open(bad).unwrap_err();
            assert!(matches!(err, LinkError::BadName(_)), "{bad}: {err}");
        }
        let err = SharedLink::open(&name("absent")).unwrap_err();
        assert!(err.to_string().contains("farmem run --link"), "{err}");
    }
}
