//! STREAM's four kernels (McCalpin), for ThymesisFlow's bandwidth study
//! (seed 003 §V-A): copy, scale, add and triad over three arrays of f64,
//! timed one by one, with arrays as large as the caller asks (the study
//! wants them well beyond local memory).
//!
//! Where this differs from `stream.c`: each element of `a` starts from a
//! hash of its index rather than one value for all, so a page served from
//! the wrong place or as zeros changes the answer; the check is exact:
//! every element runs the same f64 operations in the same order as its
//! scalar model, so each must equal its model bit for bit (`stream.c`
//! allows a relative error of 1e-13 on the averages); and the scalar `q`
//! is sqrt(2) - 1, which keeps the values bounded over any number of
//! passes (a pass multiplies `a` by 2q + q^2: `stream.c`'s 3.0 grows them
//! 15x a pass, to infinity after about 260, where no check can see a
//! wrong page).

use farmem_core::mix64;

/// The scalar `q`: 2q + q^2 = 1.
const SCALAR: f64 = std::f64::consts::SQRT_2 - 1.0;
/// The fewest elements a run uses.
const MIN_ELEMENTS: usize = 1024;

/// One kernel: its name and the bytes it moves per element (read + write).
pub const KERNELS: [(&str, u64); 4] = [("copy", 16), ("scale", 16), ("add", 24), ("triad", 24)];

/// What a run measured: per kernel, the best and mean bandwidth over the
/// passes, and whether every element came out as its model says.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub elements: usize,
    pub passes: usize,
    /// Per kernel, in [`KERNELS`] order: best and mean bytes per second.
    pub best_bps: [f64; 4],
    pub mean_bps: [f64; 4],
    /// Elements that differ from their model (0 when right).
    pub wrong: usize,
    /// A hash of the three arrays' final contents.
    pub checksum: u64,
}

/// Elements of each of the three arrays for about `bytes` in all.
pub fn elements_for(bytes: u64) -> usize {
    (bytes / 24).max(MIN_ELEMENTS as u64) as usize
}

/// Element `i`'s first value of `a`: in [1, 2), from a hash of `i`.
fn start(i: usize) -> f64 {
    1.0 + (mix64(i as u64) >> 12) as f64 / (1u64 << 52) as f64
}

/// One pass of the four kernels on one element, as the arrays see it.
fn model_pass(a: &mut f64, b: &mut f64, c: &mut f64) {
    *c = *a;
    *b = SCALAR * *c;
    *c = *a + *b;
    *a = *b + SCALAR * *c;
}

/// Runs `passes` passes of the four kernels over arrays of `elements`;
/// `each(pass)` after each (1-based); `clock` reads seconds (passed in so
/// tests can count without timing).
pub fn run(
    elements: usize,
    passes: usize,
    mut clock: impl FnMut() -> f64,
    mut each: impl FnMut(usize),
) -> Report {
    let n = elements.max(MIN_ELEMENTS);
    let mut a: Vec<f64> = (0..n).map(start).collect();
    let mut b = vec![2.0f64; n];
    let mut c = vec![0.0f64; n];
    let mut best = [0.0f64; 4];
    let mut total = [0.0f64; 4];
    for pass in 1..=passes {
        let mut t = [0.0f64; 4];
        let t0 = clock();
        c.copy_from_slice(&a);
        let t1 = clock();
        b.iter_mut().zip(&c).for_each(|(b, c)| *b = SCALAR * c);
        let t2 = clock();
        c.iter_mut()
            .zip(a.iter().zip(&b))
            .for_each(|(c, (a, b))| *c = a + b);
        let t3 = clock();
        a.iter_mut()
            .zip(b.iter().zip(&c))
            .for_each(|(a, (b, c))| *a = b + SCALAR * c);
        let t4 = clock();
        t[0] = t1 - t0;
        t[1] = t2 - t1;
        t[2] = t3 - t2;
        t[3] = t4 - t3;
        for (k, (_, per)) in KERNELS.iter().enumerate() {
            let bps = if t[k] > 0.0 {
                (per * n as u64) as f64 / t[k]
            } else {
                0.0
            };
            best[k] = best[k].max(bps);
            total[k] += bps;
        }
        each(pass);
    }
    let mut wrong = 0;
    let mut checksum = 0xcbf2_9ce4_8422_2325u64;
    for i in 0..n {
        let (mut ma, mut mb, mut mc) = (start(i), 2.0, 0.0);
        for _ in 0..passes {
            model_pass(&mut ma, &mut mb, &mut mc);
        }
        let got = [a[i], b[i], c[i]];
        if got.map(f64::to_bits) != [ma, mb, mc].map(f64::to_bits) {
            wrong += 1;
        }
        for v in got {
            checksum = (checksum ^ v.to_bits()).wrapping_mul(0x0100_0000_01b3);
        }
    }
    let mean = total.map(|t| t / passes.max(1) as f64);
    Report {
        elements: n,
        passes,
        best_bps: best,
        mean_bps: mean,
        wrong,
        checksum,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_element_matches_its_model_and_bandwidth_counts_the_bytes() {
        // A clock that advances 1 s per reading: each kernel takes 1 s.
        let mut now = 0.0;
        let mut passes_seen = Vec::new();
        let r = run(
            3000,
            2,
            || {
                now += 1.0;
                now
            },
            |p| passes_seen.push(p),
        );
        assert_eq!(passes_seen, [1, 2]);
        assert_eq!(r.wrong, 0);
        assert_eq!(r.elements, 3000);
        // Each kernel is timed between two readings 1 s apart.
        assert_eq!(r.best_bps, [48_000.0, 48_000.0, 72_000.0, 72_000.0]);
        assert_eq!(r.mean_bps, r.best_bps);
        // The answer depends only on the size and the passes.
        let again = run(3000, 2, || 0.0, |_| {});
        assert_eq!(again.checksum, r.checksum);
        assert_ne!(run(3000, 3, || 0.0, |_| {}).checksum, r.checksum);
    }

    #[test]
    fn the_model_is_streams_recurrence_and_stays_bounded() {
        let (mut a, mut b, mut c) = (1.0, 2.0, 0.0);
        model_pass(&mut a, &mut b, &mut c);
        let q = SCALAR;
        assert_eq!((a, b, c), (q + q * (1.0 + q), q, 1.0 + q));
        for _ in 0..100_000 {
            model_pass(&mut a, &mut b, &mut c);
        }
        assert!(a.is_finite() && (0.5..2.0).contains(&a), "{a}");
        assert_eq!(elements_for(24 << 20), 1 << 20);
        assert_eq!(elements_for(0), MIN_ELEMENTS);
        // Every element starts from its own value.
        let starts: std::collections::HashSet<u64> =
            (0..4096).map(|i| start(i).to_bits()).collect();
        assert_eq!(starts.len(), 4096);
    }
}
