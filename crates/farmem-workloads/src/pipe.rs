//! A workload's generation (or a trace's decoding) on its own thread,
//! feeding a sink on the caller's thread in batches.
//!
//! Generating PageRank's accesses costs about as much as simulating them;
//! on two cores the two overlap, and the consumer's caches hold only the
//! sink's state, not the generator's graph. Order is kept exactly: every
//! call the producer makes on its sink reaches the consumer's sink in the
//! same order, so a piped run equals an unpiped one record for record.

use crossbeam_channel::{Receiver, Sender, bounded};

use farmem_core::PAGE_SIZE;

use crate::{Access, Sink};

/// Accesses per batch: large enough that a hand-off (a wake-up of tens of
/// µs on a VM) is rare against the batch's work, small enough (384 KiB)
/// to stay in a core's L2 while the consumer reads it.
pub const BATCH: usize = 16 * 1024;

/// Batches in flight between the two threads: the producer runs this far
/// ahead before it waits.
const DEPTH: usize = 4;

/// What crosses from the producer to the consumer, in the producer's order.
enum Msg {
    Begin(u64),
    Accesses(Vec<Access>),
    Page(u64, Box<[u8]>),
}

/// The producer's sink: collects accesses into batches.
struct Batcher {
    tx: Sender<Msg>,
    recycled: Receiver<Vec<Access>>,
    batch: Vec<Access>,
    contents: bool,
}

/// What the producer's thread unwinds with once the consumer is gone.
struct ConsumerGone;

impl Batcher {
    fn send(&mut self, m: Msg) {
        if self.tx.send(m).is_err() {
            // The consumer hung up: it panicked, and its panic waits for
            // this thread to end before it propagates. A generator has no
            // way to be told to stop, so it is unwound from here (without
            // the panic hook: the consumer's panic is the one reported).
            std::panic::resume_unwind(Box::new(ConsumerGone));
        }
    }

    fn flush(&mut self) {
        if self.batch.is_empty() {
            return;
        }
        let fresh = self
            .recycled
            .try_recv()
            .unwrap_or_else(|_| Vec::with_capacity(BATCH));
        let full = std::mem::replace(&mut self.batch, fresh);
        self.send(Msg::Accesses(full));
    }
}

impl Sink for Batcher {
    fn begin(&mut self, footprint: u64) {
        self.flush();
        self.send(Msg::Begin(footprint));
    }

    #[inline]
    fn access(&mut self, a: Access) {
        self.batch.push(a);
        if self.batch.len() == BATCH {
            self.flush();
        }
    }

    fn wants_contents(&self) -> bool {
        self.contents
    }

    fn page(&mut self, addr: u64, data: &[u8]) {
        self.flush();
        let mut page = vec![0u8; PAGE_SIZE as usize].into_boxed_slice();
        let n = data.len().min(page.len());
        page[..n].copy_from_slice(&data[..n]);
        self.send(Msg::Page(addr, page));
    }
}

/// Runs `produce` on a new thread with a sink whose calls reach `sink` on
/// this thread, in order, accesses in batches ([`Sink::access_batch`]).
/// Returns what `produce` returned once both are done.
///
/// # Panics
/// Re-raises a panic of the producer, or of `sink` (the producer then
/// stops at its next batch rather than run to its end).
pub fn piped<S, T, F>(sink: &mut S, produce: F) -> T
where
    S: Sink + ?Sized,
    T: Send,
    F: FnOnce(&mut dyn Sink) -> T + Send,
{
    let (tx, rx) = bounded::<Msg>(DEPTH);
    let (give_back, recycled) = bounded::<Vec<Access>>(DEPTH + 1);
    let contents = sink.wants_contents();
    std::thread::scope(|scope| {
        let producer = scope.spawn(move || {
            let mut batcher = Batcher {
                tx,
                recycled,
                batch: Vec::with_capacity(BATCH),
                contents,
            };
            let out = produce(&mut batcher);
            batcher.flush();
            out
        });
        for m in rx {
            match m {
                Msg::Begin(footprint) => sink.begin(footprint),
                Msg::Accesses(mut batch) => {
                    sink.access_batch(&batch);
                    batch.clear();
                    let _ = give_back.try_send(batch);
                }
                Msg::Page(addr, data) => sink.page(addr, &data),
            }
        }
        match producer.join() {
            Ok(out) => out,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records every call, to compare a piped run with a direct one.
    #[derive(Default, PartialEq, Debug)]
    struct Log {
        calls: Vec<String>,
        contents: bool,
    }

    impl Sink for Log {
        fn begin(&mut self, footprint: u64) {
            self.calls.push(format!("begin {footprint}"));
        }
        fn access(&mut self, a: Access) {
            self.calls.push(format!("{} {} {}", a.addr, a.gap, a.write));
        }
        fn wants_contents(&self) -> bool {
            self.contents
        }
        fn page(&mut self, addr: u64, data: &[u8]) {
            self.calls.push(format!("page {addr} {}", data[0]));
        }
    }

    fn produce(s: &mut dyn Sink) -> u64 {
        s.begin(1 << 20);
        let mut n = 0;
        for i in 0..(BATCH as u64 * 3 + 17) {
            if i % 5000 == 0 && s.wants_contents() {
                s.page(i * 4096, &[i as u8; 4096]);
            }
            s.access(Access::load(i * 64, 8, (i % 7) as u32));
            n += 1;
        }
        n
    }

    #[test]
    fn a_piped_run_makes_the_same_calls_in_the_same_order() {
        for contents in [false, true] {
            let mut direct = Log {
                contents,
                ..Log::default()
            };
            let n = produce(&mut direct);
            let mut through = Log {
                contents,
                ..Log::default()
            };
            assert_eq!(piped(&mut through, produce), n);
            assert_eq!(through.calls.len(), direct.calls.len());
            assert_eq!(through, direct);
        }
    }

    #[test]
    fn a_consumer_that_panics_stops_the_producer_at_its_next_batch() {
        struct Panics;
        impl Sink for Panics {
            fn access(&mut self, _: Access) {
                panic!("the simulation failed");
            }
        }
        let produced = std::sync::atomic::AtomicU64::new(0);
        let got = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            piped(&mut Panics, |s| {
                // Years of accesses, were it not stopped.
                for i in 0..u64::MAX {
                    s.access(Access::load(i * 64, 8, 0));
                    produced.store(i, std::sync::atomic::Ordering::Relaxed);
                }
            })
        }));
        // The consumer's panic is the one reported.
        let panic = got.unwrap_err();
        assert_eq!(panic.downcast_ref::<&str>(), Some(&"the simulation failed"));
        // The producer ran at most the channel's depth of batches past it.
        let n = produced.load(std::sync::atomic::Ordering::Relaxed);
        assert!(n < (BATCH * (DEPTH + 3)) as u64, "{n}");
    }

    #[test]
    fn a_producer_that_fails_returns_its_error_after_what_it_sent() {
        let mut log = Log::default();
        let r: Result<(), &str> = piped(&mut log, |s| {
            s.access(Access::store(64, 8, 0));
            Err("trace truncated")
        });
        assert_eq!(r, Err("trace truncated"));
        assert_eq!(log.calls, vec!["64 0 true".to_string()]);
    }
}
