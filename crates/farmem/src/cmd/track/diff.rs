//! Dirty data of one page between two snapshots, at every tracking
//! granularity at once (Kona's Table 2 columns and the sizes between).

/// Bytes of a page.
pub const PAGE: usize = 4096;

/// Tracking granularities reported, smallest first: a cache line, two
/// sizes between, and a page.
pub const GRANULARITIES: [usize; 4] = [64, 256, 1024, PAGE];

/// What changed, summed over pages: bytes whose value changed, and units of
/// each granularity holding at least one of them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Dirty {
    pub bytes: u64,
    pub units: [u64; GRANULARITIES.len()],
}

impl Dirty {
    /// Adds what changed between `old` and `new`, two images of one page.
    pub fn add_page(&mut self, old: &[u8], new: &[u8]) {
        if old == new {
            return;
        }
        let line = GRANULARITIES[0];
        let mut lines = [false; PAGE / 64];
        for (i, (a, b)) in old.chunks(line).zip(new.chunks(line)).enumerate() {
            if a != b {
                lines[i] = true;
                self.bytes += a.iter().zip(b).filter(|(x, y)| x != y).count() as u64;
            }
        }
        // Larger units are dirty when any of their lines is.
        for (g, units) in GRANULARITIES.iter().zip(self.units.iter_mut()) {
            let per = g / line;
            *units += lines.chunks(per).filter(|c| c.iter().any(|&d| d)).count() as u64;
        }
    }

    /// A page that appeared (zero-filled memory first touched).
    pub fn add_new_page(&mut self, new: &[u8]) {
        self.add_page(&[0u8; PAGE][..new.len()], new);
    }

    pub fn merge(&mut self, other: &Dirty) {
        self.bytes += other.bytes;
        for (a, b) in self.units.iter_mut().zip(other.units) {
            *a += b;
        }
    }

    /// Bytes a tracker at each granularity would move, over bytes changed
    /// (Kona's dirty data amplification); `None` when nothing changed.
    pub fn amplification(&self) -> [Option<f64>; GRANULARITIES.len()] {
        let mut out = [None; GRANULARITIES.len()];
        if self.bytes > 0 {
            for ((o, g), u) in out.iter_mut().zip(GRANULARITIES).zip(self.units) {
                *o = Some((u * g as u64) as f64 / self.bytes as f64);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_word_per_page_is_512x_at_a_page_and_8x_at_a_line() {
        let old = vec![0u8; PAGE];
        let mut new = old.clone();
        new[1000..1008].copy_from_slice(&u64::MAX.to_le_bytes());
        let mut d = Dirty::default();
        for _ in 0..10 {
            d.add_page(&old, &new);
        }
        assert_eq!(d.bytes, 80);
        assert_eq!(d.units, [10, 10, 10, 10]);
        let a = d.amplification();
        assert_eq!(a[0], Some(8.0));
        assert_eq!(a[3], Some(512.0));
    }

    #[test]
    fn units_of_each_size_count_once_and_bytes_count_exactly() {
        let old = vec![7u8; PAGE];
        let mut new = old.clone();
        // Two bytes in line 0, a byte in line 3 (same 256 B unit), a byte
        // in line 40 (another 1 KiB unit); one "write" of an equal value.
        new[0] = 1;
        new[63] = 1;
        new[200] = 9;
        new[40 * 64 + 5] = 0;
        new[500] = 7;
        let mut d = Dirty::default();
        d.add_page(&old, &new);
        assert_eq!(d.bytes, 4);
        assert_eq!(d.units, [3, 2, 2, 1]);
        let mut same = Dirty::default();
        same.add_page(&old, &old);
        assert_eq!(same, Dirty::default());
        assert_eq!(same.amplification(), [None; 4]);
        let mut fresh = Dirty::default();
        fresh.add_new_page(&new);
        assert_eq!(
            fresh.bytes,
            PAGE as u64 - 1,
            "against zeros: every byte but the one 0"
        );
    }
}
