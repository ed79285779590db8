//! Every registered replacement policy drives the evictor without losing data.

use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use farmem_policy::cache::PolicyConfig;
use farmem_runtime::{Config, MemStore, PAGE, Runtime, uffd};

#[test]
fn every_policy_keeps_every_byte() {
    if let Err(why) = uffd::available() {
        eprintln!("skipping: {why}");
        return;
    }
    let pages = 1024usize;
    for name in PolicyConfig::NAMES {
        let policy = PolicyConfig::from_name(name).unwrap();
        let store = Arc::new(MemStore::new(1 << 30));
        let cfg = Config {
            local_bytes: 128 * PAGE,
            policy,
            slab_batch: 16 << 20,
            ..Config::default()
        };
        let mut shadow = vec![0u8; pages * PAGE as usize];
        let extents;
        {
            let rt = Runtime::new(cfg.clone(), store.clone(), store.clone()).unwrap();
            let r = rt.region((pages as u64) * PAGE).unwrap();
            let mut rng = SmallRng::seed_from_u64(7);
            for _ in 0..20_000 {
                // Skewed: a quarter of the pages take most accesses, so
                // policies that keep hot pages have something to keep.
                let p = if rng.gen_bool(0.8) {
                    rng.gen_range(0..pages / 4)
                } else {
                    rng.gen_range(0..pages)
                };
                let at = p * PAGE as usize + rng.gen_range(0..PAGE as usize - 8);
                if rng.gen_bool(0.5) {
                    let v: [u8; 8] = rng.r#gen();
                    r.write_at(at, &v).unwrap();
                    shadow[at..at + 8].copy_from_slice(&v);
                } else {
                    let mut b = [0u8; 8];
                    r.read_at(at, &mut b).unwrap();
                    assert_eq!(b, shadow[at..at + 8], "{name}: read at {at}");
                }
            }
            let st = rt.stats();
            assert!(st.resident_pages <= 128, "{name}: {st:?}");
            assert!(st.pages_evicted_dirty > 0, "{name}: {st:?}");
            r.sync().unwrap();
            assert!(rt.last_error().is_none(), "{name}: {:?}", rt.last_error());
            eprintln!(
                "{name}: fetched {} evicted clean {} dirty {}",
                st.pages_fetched, st.pages_evicted_clean, st.pages_evicted_dirty
            );
            extents = r.extents().unwrap();
        }
        let rt = Runtime::new(cfg, store.clone(), store.clone()).unwrap();
        let r = rt.region_over(&extents).unwrap();
        let mut page = vec![0u8; PAGE as usize];
        for (p, want) in shadow.chunks(PAGE as usize).enumerate() {
            r.read_at(p * PAGE as usize, &mut page).unwrap();
            assert!(page == want, "{name}: page {p} differs after reload");
        }
    }
}
