//! DaeMon Fig. 3 direction on small workloads with proportionally small caches.

use farmem_sim::eval::{FIG3_SCHEMES, fig3};
use farmem_sim::{ConfigBuilder, Input, simulate};
use farmem_workloads::Scale;

#[test]
fn daemon_fig3_direction_holds_at_small_scale() {
    let mut b = ConfigBuilder::preset("daemon").unwrap();
    // Footprints are ~1/16 of the defaults, and so are the caches.
    for (k, v) in [
        ("llc.size", "256KiB"),
        ("l2.size", "32KiB"),
        ("l1d.size", "8KiB"),
    ] {
        b.set(k, v).unwrap();
    }
    let cfg = b.build().unwrap();
    let mut results = Vec::new();
    for w in ["stream", "pr", "spmv"] {
        let input = Input::Workload {
            name: w.into(),
            scale: Scale::Factor(1.0 / 16.0),
            seed: 1,
        };
        for s in FIG3_SCHEMES {
            results.push(simulate(&cfg, s, &input).unwrap());
        }
    }
    let f = fig3(&results);
    for c in &f.checks {
        println!(
            "{:<45} paper {:<16} measured {:.2} {}",
            c.claim,
            c.paper,
            c.measured,
            if c.pass { "ok" } else { "FAIL" }
        );
    }
    println!("{:?}", f.geomean);
    assert!(f.pass(), "{:#?}", f);
}
