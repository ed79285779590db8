//! Every fault path, way of waiting for faults and of fetching gives the
//! same bytes.

use std::sync::Arc;

use farmem_runtime::{Config, FaultPath, MemStore, PAGE, Runtime, WaitMode, uffd};

#[test]
fn wait_modes_handlers_and_fillers_all_serve_faults() {
    if let Err(why) = uffd::available() {
        eprintln!("skipping: {why}");
        return;
    }
    let pages = 512usize;
    use FaultPath::{Signal, Thread};
    for (path, wait, handlers, fillers) in [
        (Thread, WaitMode::Poll, 1, 0),
        (Thread, WaitMode::Poll, 1, 2),
        (Thread, WaitMode::Poll, 3, 0),
        (Thread, WaitMode::Spin, 1, 0),
        (Thread, WaitMode::Hybrid { spin_us: 200 }, 2, 1),
        (Signal, WaitMode::Poll, 1, 0),
        (Signal, WaitMode::Poll, 1, 2),
    ] {
        let store = Arc::new(MemStore::new(1 << 30));
        let cfg = Config {
            local_bytes: 64 * PAGE,
            fault_path: path,
            wait,
            handlers,
            fillers,
            slab_batch: 16 << 20,
            ..Config::default()
        };
        let rt = Runtime::new(cfg, store.clone(), store.clone()).unwrap();
        let r = rt.region(pages as u64 * PAGE).unwrap();
        std::thread::scope(|s| {
            for t in 0..2usize {
                let r = &r;
                s.spawn(move || {
                    for p in (t..pages).step_by(2) {
                        r.write_at(p * PAGE as usize + 8 * t, &(p as u64).to_le_bytes())
                            .unwrap();
                    }
                });
            }
        });
        for p in 0..pages {
            let mut b = [0u8; 8];
            r.read_at(p * PAGE as usize + 8 * (p % 2), &mut b).unwrap();
            assert_eq!(
                u64::from_le_bytes(b),
                p as u64,
                "{path}/{wait:?}/{handlers}/{fillers}: page {p}"
            );
        }
        let st = rt.stats();
        assert!(st.pages_evicted_dirty > 0, "{st:?}");
        assert!(rt.last_error().is_none(), "{:?}", rt.last_error());
    }
}
