//! First in, first out: DaeMon's sensitivity study replaces LRU by FIFO in
//! local memory. Hits do not reorder. The list itself is LRU's, without
//! promotion on a hit.

/// FIFO over a slab-linked list: O(1) insert, evict and remove.
pub type Fifo = super::lru::OrderedList<false>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::Access;
    use crate::cache::ReplacementPolicy;

    #[test]
    fn evicts_oldest_admission_even_if_recently_hit() {
        let mut fifo = Fifo::new(3);
        for b in [1, 2, 3] {
            assert_eq!(fifo.access(b, 0), Access::Miss { evicted: None });
        }
        assert_eq!(fifo.access(1, 0), Access::Hit);
        assert_eq!(fifo.order(), vec![3, 2, 1]);
        assert_eq!(fifo.access(4, 0), Access::Miss { evicted: Some(1) });
        assert_eq!(fifo.order(), vec![4, 3, 2]);
        assert!(fifo.remove(3));
        assert_eq!(fifo.evict(0), Some(2));
        assert_eq!(fifo.len(), 1);
    }
}
