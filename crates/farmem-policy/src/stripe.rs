//! How much of each page each path carries when far memory is striped over
//! several (xDM's multi-path access, seed 004 §3.2: "I/O width", network
//! channels in parallel).
//!
//! A stream over striped memory takes as long as its slowest path takes
//! for its share, so each path's share follows its measured bandwidth: two
//! paths of 100 and 50 MiB/s carry 2/3 and 1/3 of every page and stream
//! 150 MiB/s together, where an even split would stream 100. Shares are
//! whole units (a multiple of the page's lines), at least one each, and
//! paths within [`SplitConfig::even_within`] of each other split evenly,
//! so a noisy measurement of equal paths does not leave capacity unused.
//!
//! Where the seed is silent: it stripes across backends without saying in
//! what proportion; the proportion here is the one that makes every path
//! finish together.

/// How pages are split.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SplitConfig {
    /// Bytes of a share's unit (default 256: four cache lines; a 4 KiB
    /// page has 16).
    pub unit: usize,
    /// Paths whose bandwidths differ by less than this share of the
    /// fastest split evenly (default 0.15: measurements of equal paths on
    /// a busy host differ by about that).
    pub even_within: f64,
}

impl Default for SplitConfig {
    fn default() -> Self {
        Self {
            unit: 256,
            even_within: 0.15,
        }
    }
}

impl SplitConfig {
    /// Bytes of a `page` each path carries, in the order of `bandwidths`
    /// (bytes per second, as measured): proportional to them in whole
    /// units, at least one unit each, summing to `page`. Bandwidths that
    /// are not positive and finite count as the slowest measured (or all
    /// as equal when none is). `page` must hold a unit per path, else the
    /// split is even in bytes.
    pub fn split(&self, bandwidths: &[f64], page: usize) -> Vec<usize> {
        let n = bandwidths.len();
        let unit = self.unit.max(1);
        if n == 0 {
            return Vec::new();
        }
        let units = page / unit;
        if units < n || !page.is_multiple_of(unit) {
            return even_bytes(n, page);
        }
        let usable = |b: &f64| b.is_finite() && *b > 0.0;
        let slowest = bandwidths
            .iter()
            .copied()
            .filter(usable)
            .fold(f64::INFINITY, f64::min);
        let fastest = bandwidths
            .iter()
            .copied()
            .filter(usable)
            .fold(0.0, f64::max);
        if !slowest.is_finite() || slowest >= fastest * (1.0 - self.even_within) {
            return even_units(n, units, unit);
        }
        let bw: Vec<f64> = bandwidths
            .iter()
            .map(|b| if usable(b) { *b } else { slowest })
            .collect();
        let total: f64 = bw.iter().sum();
        // Largest remainder, at least one unit each.
        let exact: Vec<f64> = bw.iter().map(|b| b / total * units as f64).collect();
        let mut got: Vec<usize> = exact.iter().map(|e| (e.floor() as usize).max(1)).collect();
        while got.iter().sum::<usize>() > units {
            // The sum exceeds units >= n, so the largest holds two or more.
            let Some(i) = (0..n).max_by_key(|&i| (got[i], std::cmp::Reverse(i))) else {
                break;
            };
            got[i] -= 1;
        }
        let mut left = units - got.iter().sum::<usize>();
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by(|&a, &b| {
            let frac = |i: usize| exact[i] - exact[i].floor();
            frac(b).total_cmp(&frac(a)).then(a.cmp(&b))
        });
        for &i in order.iter().cycle() {
            if left == 0 {
                break;
            }
            got[i] += 1;
            left -= 1;
        }
        got.into_iter().map(|u| u * unit).collect()
    }
}

/// `units` of `unit` bytes dealt out evenly, the first paths taking the
/// remainder.
fn even_units(n: usize, units: usize, unit: usize) -> Vec<usize> {
    (0..n)
        .map(|i| (units / n + usize::from(i < units % n)) * unit)
        .collect()
}

fn even_bytes(n: usize, page: usize) -> Vec<usize> {
    (0..n)
        .map(|i| page / n + usize::from(i < page % n))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: usize = 4096;

    fn split(bw: &[f64]) -> Vec<usize> {
        SplitConfig::default().split(bw, PAGE)
    }

    #[test]
    fn shares_follow_bandwidth_in_whole_units() {
        assert_eq!(split(&[100.0, 50.0]), vec![2816, 1280]);
        assert_eq!(split(&[50.0, 100.0]), vec![1280, 2816]);
        assert_eq!(split(&[300.0, 100.0]), vec![3072, 1024]);
        assert_eq!(split(&[1e9, 1.0]), vec![3840, 256], "at least a unit each");
        for bw in [[3.0, 1.0, 1.0], [7.0, 2.0, 1.0], [1.0, 1.0, 9.0]] {
            let s = split(&bw);
            assert_eq!(s.iter().sum::<usize>(), PAGE, "{bw:?} -> {s:?}");
            assert!(s.iter().all(|b| b % 256 == 0 && *b >= 256), "{s:?}");
        }
    }

    #[test]
    fn paths_measured_about_equal_split_evenly() {
        assert_eq!(split(&[100.0, 90.0]), vec![2048, 2048]);
        assert_eq!(split(&[100.0, 100.0, 100.0]), vec![1536, 1280, 1280]);
        assert_eq!(split(&[0.0, f64::NAN]), vec![2048, 2048]);
        // Unmeasured paths count as the slowest measured.
        assert_eq!(split(&[100.0, 0.0, 50.0]), vec![2048, 1024, 1024]);
    }

    #[test]
    fn pages_too_small_for_a_unit_each_split_in_bytes() {
        let cfg = SplitConfig::default();
        assert_eq!(cfg.split(&[2.0, 1.0], 300), vec![150, 150]);
        assert_eq!(cfg.split(&[1.0; 17], PAGE).len(), 17);
        assert_eq!(cfg.split(&[1.0; 17], PAGE).iter().sum::<usize>(), PAGE);
        assert!(cfg.split(&[], PAGE).is_empty());
    }
}
