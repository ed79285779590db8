//! Tests of the compressed pool: each behaviour alone, then a proptest
//! against a plain store, with and without `auto`'s tuner.

use super::*;
use crate::backend::FaultClock;
use crate::store::{FaultOp, MemStore, SlabSource};
use proptest::prelude::*;

const P: u64 = PAGE as u64;

fn setup(max_bytes: u64) -> (Arc<MemStore>, CompressedStore, u64) {
    setup_with(max_bytes, CompressedTierConfig::default())
}

fn setup_with(max_bytes: u64, cfg: CompressedTierConfig) -> (Arc<MemStore>, CompressedStore, u64) {
    let below = Arc::new(MemStore::new(1 << 30));
    let base = below.allocate(64 * P).unwrap()[0].0;
    let store = CompressedStore::new(below.clone(), cfg, max_bytes);
    (below, store, base)
}

/// `auto`'s pool with a verdict every `window` pages written back, on
/// while half as many are read from it (or would be, off), tried again
/// after one window that would pay; reads alone decide, however well the
/// test's pages shrink.
fn tuned(window: u32) -> CompressedTierConfig {
    CompressedTierConfig {
        tuner: Some(farmem_policy::tier::TunerConfig {
            window,
            min_reads_per_write: 0.5,
            max_backoff: 1,
            min_shrink: f64::INFINITY,
            ab: None,
        }),
        ..Default::default()
    }
}

fn lines_of(addr: u64, data: &[u8]) -> Vec<(u64, [u8; 64])> {
    let mut v = Vec::new();
    push_lines(&mut v, addr, data);
    v
}

/// Text-like: compresses well.
fn compressible(seed: u8) -> Vec<u8> {
    (0..PAGE)
        .map(|i| b"farmem pages "[(i + seed as usize) % 13])
        .collect()
}

fn random(seed: u64) -> Vec<u8> {
    farmem_core::noise::noise_bytes(PAGE, seed.wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

fn read(s: &CompressedStore, addr: u64, len: usize) -> Vec<u8> {
    let mut buf = vec![0xAA; len];
    s.read(addr, &mut buf).unwrap();
    buf
}

#[test]
fn compressible_and_zero_pages_stay_local_and_read_back() {
    let (below, s, base) = setup(1 << 20);
    let text = compressible(3);
    s.write_lines(&lines_of(base, &text)).unwrap();
    s.write_lines(&lines_of(base + P, &[0u8; PAGE])).unwrap();
    assert_eq!(below.stats().lines_written, 0, "nothing went below");
    assert_eq!(read(&s, base, PAGE), text);
    assert_eq!(read(&s, base + P, PAGE), vec![0u8; PAGE]);
    let st = s.stats();
    assert_eq!((st.stored, st.stored_zero, st.pages), (1, 1, 2));
    assert!(st.bytes_out < PAGE as u64 / 4, "{st:?}");
    assert_eq!(s.local_bytes(), st.bytes);
    assert_eq!(st.bytes, 2 * ENTRY_OVERHEAD + st.bytes_out);
}

#[test]
fn incompressible_pages_pass_down_and_replace_the_kept_copy() {
    let (below, s, base) = setup(1 << 20);
    s.write_lines(&lines_of(base, &compressible(0))).unwrap();
    let noise = random(7);
    s.write_lines(&lines_of(base, &noise)).unwrap();
    assert_eq!(below.stats().lines_written, 64);
    assert_eq!(s.stats().pages, 0);
    assert_eq!(s.local_bytes(), 0);
    assert_eq!(read(&s, base, PAGE), noise);
}

#[test]
fn lines_patch_a_kept_page_and_pass_down_otherwise() {
    let (below, s, base) = setup(1 << 20);
    let mut want = compressible(1);
    s.write_lines(&lines_of(base, &want)).unwrap();
    s.write_lines(&[(base + 128, [9u8; 64]), (base + 4032, [8u8; 64])])
        .unwrap();
    want[128..192].fill(9);
    want[4032..].fill(8);
    assert_eq!(read(&s, base, PAGE), want);
    assert_eq!(below.stats().lines_written, 0);
    // Not kept: the lines go below as they are.
    s.write_lines(&[(base + 5 * P + 64, [5u8; 64])]).unwrap();
    assert_eq!(below.stats().lines_written, 1);
    let got = read(&s, base + 5 * P, PAGE);
    assert_eq!(&got[64..128], &[5u8; 64]);
    // A read across pages: kept, below, kept.
    s.write_lines(&lines_of(base + 6 * P, &compressible(2)))
        .unwrap();
    let got = read(&s, base + P - 10, 5 * P as usize + 20);
    assert_eq!(&got[..10], &want[PAGE - 10..]);
    assert_eq!(&got[4 * PAGE + 10 + 64..4 * PAGE + 10 + 128], &[5u8; 64]);
    assert_eq!(&got[5 * PAGE + 10..], &compressible(2)[..10]);
}

#[test]
fn noise_soon_goes_below_untried_and_text_is_tried_again() {
    let (below, s, base) = setup(1 << 30);
    for i in 0..1024u64 {
        s.write_lines(&lines_of(base + (i % 32) * P, &random(i)))
            .unwrap();
    }
    let st = s.stats();
    assert_eq!(st.passed_down, 1024, "{st:?}");
    assert!(st.untried > 600, "{st:?}");
    assert_eq!(below.stats().lines_written, 64 * 1024);
    for i in 0..32u64 {
        assert_eq!(read(&s, base + i * P, PAGE), random(992 + i), "page {i}");
    }
    // Text again: kept once the probes see it shrink.
    for i in 0..8192u64 {
        s.write_lines(&lines_of(base + (i % 32) * P, &compressible(i as u8)))
            .unwrap();
    }
    let st = s.stats();
    assert!(st.stored > 4096, "{st:?}");
    for i in 0..32u64 {
        assert_eq!(read(&s, base + i * P, PAGE), compressible((8160 + i) as u8));
    }
}

#[test]
fn a_full_pool_demotes_its_oldest_pages_and_loses_none() {
    // Room for about three pages.
    let (below, s, base) = setup(3 * (ENTRY_OVERHEAD + 40));
    for i in 0..10 {
        s.write_lines(&lines_of(base + i * P, &compressible(i as u8)))
            .unwrap();
    }
    let st = s.stats();
    assert!(st.bytes <= 3 * (ENTRY_OVERHEAD + 40), "{st:?}");
    assert_eq!(st.demoted + st.pages, 10, "{st:?}");
    assert!(st.demoted >= 7);
    assert!(
        st.trims >= 1,
        "dropped pages past a quarter of the pool: {st:?}"
    );
    assert_eq!(below.stats().lines_written, 64 * st.demoted);
    for i in 0..10 {
        assert_eq!(
            read(&s, base + i * P, PAGE),
            compressible(i as u8),
            "page {i}"
        );
    }
    // The newest are the ones kept.
    assert!(s.pool.lock().pages.contains_key(&(base + 9 * P)));
}

#[test]
fn a_failed_demotion_keeps_the_pages_and_a_retry_lands_them() {
    let (below, s, base) = setup(ENTRY_OVERHEAD + 40);
    s.write_lines(&lines_of(base, &compressible(1))).unwrap();
    below.fail_nth(0, FaultOp::Write);
    let second = lines_of(base + P, &compressible(2));
    assert!(s.write_lines(&second).is_err());
    // Both still readable: the first was not forgotten.
    assert_eq!(read(&s, base, PAGE), compressible(1));
    assert_eq!(read(&s, base + P, PAGE), compressible(2));
    s.write_lines(&second).unwrap();
    assert_eq!(s.stats().demoted, 1);
    assert_eq!(read(&s, base, PAGE), compressible(1));
    assert_eq!(read(&s, base + P, PAGE), compressible(2));
}

#[test]
fn reads_in_signal_handlers_come_from_the_pool_or_below() {
    let (_below, s, base) = setup(1 << 20);
    s.write_lines(&lines_of(base, &compressible(4))).unwrap();
    let mut buf = vec![0u8; PAGE];
    assert!(s.read_in_signal(base, &mut buf));
    assert_eq!(buf, compressible(4));
    assert!(s.read_in_signal(base + P, &mut buf));
    assert_eq!(buf, vec![0u8; PAGE]);
    // A mix takes the ordinary path.
    let mut two = vec![0u8; 2 * PAGE];
    assert!(!s.read_in_signal(base, &mut two));
}

#[test]
fn a_tuned_pool_not_read_back_turns_off_gives_its_memory_back_and_loses_nothing() {
    let (below, s, base) = setup_with(1 << 20, tuned(4));
    let write = |pages: std::ops::Range<u64>| {
        for i in pages {
            s.write_lines(&lines_of(base + i * P, &compressible(i as u8)))
                .unwrap();
        }
    };
    let check = |pages: std::ops::Range<u64>| {
        for i in pages {
            assert_eq!(read(&s, base + i * P, PAGE), compressible(i as u8));
        }
    };
    // Four kept, none read back: off at the fourth, whose write-back
    // demotes all four.
    write(0..4);
    let st = s.stats();
    assert_eq!((st.stored, st.switches, st.demoted), (4, 1, 4), "{st:?}");
    assert_eq!((st.pages, s.local_bytes()), (0, 0), "{st:?}");
    check(0..4);
    // Off: pages go below as they are, remembered as the pool's.
    let lines_before = below.stats().lines_written;
    write(4..8);
    assert_eq!(below.stats().lines_written - lines_before, 4 * 64);
    assert_eq!(s.stats().off_passed, 4);
    // Reads of them would have been served by the pool: after the
    // next window it is on again, and keeps the page after.
    check(4..6);
    check(4..6);
    write(8..12);
    assert_eq!(s.stats().switches, 2);
    assert_eq!(s.stats().stored, 4, "off until now");
    write(12..13);
    assert_eq!((s.stats().stored, s.stats().pages), (5, 1));
    assert!(s.local_bytes() > 0);
    check(0..13);
}

/// A program under a cache of `LIMIT` pages less the pool's bytes, over a
/// store whose fetches from below cost `below_ns` and from the pool
/// `hit_ns`, each access 1 µs of work, on a clock of its own: the stall
/// `auto`'s tuner sees is the one these costs make, whatever the machine.
struct Sim {
    below: Arc<MemStore>,
    store: CompressedStore,
    clock: &'static FaultClock,
    base: u64,
    /// Resident pages, oldest first.
    cache: VecDeque<u64>,
}

const LIMIT: u64 = 100;

impl Sim {
    fn new(pages: u64) -> Self {
        let below = Arc::new(MemStore::new(1 << 30));
        let base = below.allocate(pages * P).unwrap()[0].0;
        let clock: &'static FaultClock = Box::leak(Box::new(FaultClock::manual()));
        let cfg = CompressedTierConfig {
            tuner: Some(farmem_policy::tier::TunerConfig {
                ab: Some(farmem_policy::tier::AbConfig {
                    // A few hundred faults an epoch, as the runtime's
                    // 100 ms have thousands: fewer, and the epochs' own
                    // sampling noise passes the hysteresis.
                    epoch_ns: 20_000_000,
                    min_faults: 64,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let max = cfg.pool_bytes(LIMIT * P);
        let store = CompressedStore::with_clock(below.clone(), cfg, max, clock);
        // The program's data, far before it starts.
        for page in 0..pages {
            below
                .write_lines(&lines_of(base + page * P, &Self::contents(page)))
                .unwrap();
        }
        Self {
            below,
            store,
            clock,
            base,
            cache: VecDeque::new(),
        }
    }

    /// Half noise, half text: kept at about half its size (not the
    /// quarter that would hold the tuner's probes off).
    fn contents(page: u64) -> Vec<u8> {
        let mut v = random(page);
        v[PAGE / 2..].copy_from_slice(&compressible(page as u8)[PAGE / 2..]);
        v
    }

    /// Writes `page`, faulting it in if not resident; evicts (writes
    /// back) the oldest while the cache is over its room.
    fn access(&mut self, page: u64, below_ns: u64, hit_ns: u64) {
        let addr = self.base + page * P;
        if !self.cache.contains(&addr) {
            let missed = self.store.stats().misses;
            let got = read(&self.store, addr, PAGE);
            assert!(got == Self::contents(page), "page {page}");
            let hit = self.store.stats().misses == missed;
            let stall = 5_000 + if hit { hit_ns } else { below_ns };
            self.clock.stall(stall);
            self.clock.advance(stall);
            self.cache.push_back(addr);
        }
        self.clock.advance(1_000);
        let room = (LIMIT * P).saturating_sub(self.store.local_bytes()) / P;
        while self.cache.len() as u64 > room {
            let Some(victim) = self.cache.pop_front() else {
                break;
            };
            let page = (victim - self.base) / P;
            self.store
                .write_lines(&lines_of(victim, &Self::contents(page)))
                .unwrap();
        }
    }

    /// Uniform random accesses over `pages` (1.3 times the limit).
    fn run(&mut self, pages: u64, accesses: u64, below_ns: u64, hit_ns: u64) {
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        for _ in 0..accesses {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            self.access(x % pages, below_ns, hit_ns);
        }
    }

    fn is_on(&self) -> bool {
        self.store.pool.lock().is_on()
    }
}

#[test]
fn auto_keeps_the_pool_over_a_slow_tier_and_turns_it_off_over_a_fast_one() {
    let pages = LIMIT * 13 / 10;
    // Slow below (100 µs a fetch, a hit 2 µs): the pool's hits save more
    // than its cache costs.
    let mut slow = Sim::new(pages);
    slow.run(pages, 100_000, 100_000, 2_000);
    let st = slow.store.stats();
    assert!(slow.is_on(), "{st:?}");
    assert!(st.probes >= 1 && st.probes_won == 0, "{st:?}");
    assert!(st.epochs_on > st.epochs_off && st.epochs_off >= 1, "{st:?}");
    assert!(st.stall_per_mille_on < st.stall_per_mille_off, "{st:?}");
    assert!(st.epoch_stall_ns_on > 0, "{st:?}");
    // Fast below (2 µs, a hit 10 µs): the pool only adds faults and
    // slower ones; the first probe turns it off, and it stays off.
    let mut fast = Sim::new(pages);
    fast.run(pages, 100_000, 2_000, 10_000);
    let st = fast.store.stats();
    assert!(!fast.is_on(), "{st:?}");
    assert_eq!(st.probes_won, 1, "{st:?}");
    assert!(st.epochs_off > st.epochs_on, "{st:?}");
    assert!(st.stall_per_mille_off < st.stall_per_mille_on, "{st:?}");
    // Nothing lost either way.
    for sim in [&slow, &fast] {
        for page in 0..pages {
            let addr = sim.base + page * P;
            if !sim.cache.contains(&addr) {
                let got = read(&sim.store, addr, PAGE);
                assert!(got == Sim::contents(page), "page {page}");
            }
        }
        assert!(sim.below.stats().lines_written > 0);
    }
}

#[test]
fn a_pool_turned_off_drains_a_few_batches_per_write_back_one_at_a_time() {
    let n = 1200;
    let (below, s, base) = setup_with(1 << 20, tuned(n as u32));
    for i in 0..n {
        s.write_lines(&lines_of(base + i * P, &compressible(i as u8)))
            .unwrap();
    }
    // Turned off, a pool of 1 MiB drains 16 pages a batch.
    let per_write = (demote_batch(1 << 20) * DRAIN_BATCHES) as u64;
    assert_eq!(per_write, 16 * 8);
    let st = s.stats();
    assert_eq!((st.switches, st.demoted), (1, per_write), "{st:?}");
    let mut calls = below.stats().write_lines_calls;
    // Each later write-back drains as many more, each batch in a write of
    // its own (the page written goes below in the first).
    for i in 1..n.div_ceil(per_write) {
        s.write_lines(&lines_of(base + (n + i) * P, &compressible(0)))
            .unwrap();
        let st = s.stats();
        assert_eq!(st.demoted, (per_write * (i + 1)).min(n), "{st:?}");
        let now = below.stats().write_lines_calls;
        assert!(
            now - calls <= DRAIN_BATCHES as u64,
            "{} writes",
            now - calls
        );
        calls = now;
    }
    let st = s.stats();
    assert_eq!((st.demoted, st.pages, s.local_bytes()), (n, 0, 0));
    for i in 0..n {
        assert_eq!(read(&s, base + i * P, PAGE), compressible(i as u8));
    }
}

#[test]
fn a_page_stored_again_and_again_leaves_no_trail() {
    let (_below, s, base) = setup(1 << 20);
    for i in 0..10_000u64 {
        let page = base + (i % 3) * P;
        s.write_lines(&lines_of(page, &compressible(i as u8)))
            .unwrap();
        if i % 7 == 0 {
            // Passed down: gone from the pool.
            s.write_lines(&lines_of(page, &random(i))).unwrap();
        }
    }
    let pool = s.pool.lock();
    assert!(
        pool.order.len() <= 2 * pool.pages.len() + 64,
        "{}",
        pool.order.len()
    );
    drop(pool);
    for i in 0..3u64 {
        let last = (0..10_000u64).rev().find(|j| j % 3 == i).unwrap();
        let want = if last % 7 == 0 {
            random(last)
        } else {
            compressible(last as u8)
        };
        assert_eq!(read(&s, base + i * P, PAGE), want);
    }
}

#[derive(Debug, Clone)]
enum Op {
    Page(u64, u8),
    Noise(u64, u64),
    Zero(u64),
    Line(u64, u8, u8),
    /// Most of a page's lines, in noise: a kept page patched too big to keep.
    NoisyLines(u64, u64),
    Bytes(u64, u16, u8),
    Read(u64, u16),
}

fn op() -> impl Strategy<Value = Op> {
    let page = 0..8u64;
    prop_oneof![
        (page.clone(), any::<u8>()).prop_map(|(p, s)| Op::Page(p, s)),
        (page.clone(), any::<u64>()).prop_map(|(p, s)| Op::Noise(p, s)),
        page.clone().prop_map(Op::Zero),
        (page.clone(), 0..64u8, any::<u8>()).prop_map(|(p, l, b)| Op::Line(p, l, b)),
        (page.clone(), any::<u64>()).prop_map(|(p, s)| Op::NoisyLines(p, s)),
        (page.clone(), 0..8192u16, any::<u8>()).prop_map(|(p, o, b)| Op::Bytes(p, o, b)),
        (page, 0..12000u16).prop_map(|(p, n)| Op::Read(p, n)),
    ]
}

proptest! {
    /// Whatever mix of whole pages, lines, bytes and reads, with a pool
    /// small enough to demote, reads return what a plain store would.
    #[test]
    fn reads_match_a_plain_store(
        ops in proptest::collection::vec(op(), 1..60),
        tuner in proptest::option::of(1..4u32),
    ) {
        // With a tuner of a tiny window, the pool turns off and on
        // again all along.
        let cfg = tuner.map_or_else(CompressedTierConfig::default, tuned);
        let (_below, s, base) = setup_with(2 * (ENTRY_OVERHEAD + 60), cfg);
        let oracle = MemStore::new(1 << 30);
        let obase = oracle.allocate(64 * P).unwrap()[0].0;
        for op in ops {
            let (off, lines) = match op {
                Op::Page(p, seed) => (p * P, lines_of(0, &compressible(seed))),
                Op::Noise(p, seed) => (p * P, lines_of(0, &random(seed))),
                Op::Zero(p) => (p * P, lines_of(0, &[0u8; PAGE])),
                Op::Line(p, l, b) => (p * P + l as u64 * 64, vec![(0, [b; 64])]),
                Op::NoisyLines(p, seed) => {
                    let mut lines = lines_of(0, &random(seed));
                    lines.truncate(56);
                    (p * P, lines)
                }
                Op::Bytes(p, o, b) => {
                    let data = vec![b; 100];
                    s.write(base + p * P + o as u64, &data).unwrap();
                    oracle.write(obase + p * P + o as u64, &data).unwrap();
                    continue;
                }
                Op::Read(p, n) => {
                    let got = read(&s, base + p * P, n as usize);
                    let mut want = vec![0u8; n as usize];
                    oracle.read(obase + p * P, &mut want).unwrap();
                    prop_assert_eq!(got, want);
                    continue;
                }
            };
            let shift = |b: u64| lines.iter().map(|(a, l)| (b + off + a, *l)).collect::<Vec<_>>();
            s.write_lines(&shift(base)).unwrap();
            oracle.write_lines(&shift(obase)).unwrap();
        }
        let st = s.stats();
        prop_assert!(st.bytes <= 2 * (ENTRY_OVERHEAD + 60) || st.pages <= 1, "{:?}", st);
    }
}

#[test]
fn a_batch_demotes_a_sixteenth_of_a_small_pool_and_at_most_64_pages() {
    assert_eq!(demote_batch(1_258_291), 19, "a fifth of 6 MiB");
    assert_eq!(demote_batch(16 << 10), 4, "a tiny pool: a few pages");
    assert_eq!(demote_batch(52 << 20), DEMOTE_BATCH, "a fifth of 258 MiB");
}
