//! Index-linked doubly linked lists on a slab (after quick_cache): no
//! pointers, no per-node allocation after warm-up, O(1) move-to-front and
//! unlink by handle. Several lists may share one slab (active/inactive).

/// A handle to a node in an [`IndexList`] slab.
pub type Handle = u32;

const NIL: Handle = Handle::MAX;

#[derive(Debug, Clone)]
struct Node<T> {
    value: T,
    prev: Handle,
    next: Handle,
}

/// The ends of one list threaded through a shared slab.
#[derive(Debug, Clone, Copy)]
pub struct Ends {
    head: Handle,
    tail: Handle,
    len: usize,
}

impl Default for Ends {
    fn default() -> Self {
        Self {
            head: NIL,
            tail: NIL,
            len: 0,
        }
    }
}

impl Ends {
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// A slab of nodes; lists are [`Ends`] values threaded through it.
#[derive(Debug, Clone)]
pub struct IndexList<T> {
    nodes: Vec<Node<T>>,
    free: Vec<Handle>,
}

impl<T: Copy> IndexList<T> {
    /// Room for `capacity` nodes up front, at most 2^16: a huge configured
    /// capacity only costs memory as the lists fill.
    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            nodes: Vec::with_capacity(capacity.min(1 << 16)),
            free: Vec::new(),
        }
    }

    pub fn get(&self, h: Handle) -> T {
        self.nodes[h as usize].value
    }

    /// Allocates a node for `value` and links it at the head (most recent) of `list`.
    pub fn push_front(&mut self, list: &mut Ends, value: T) -> Handle {
        let node = Node {
            value,
            prev: NIL,
            next: NIL,
        };
        let h = match self.free.pop() {
            Some(h) => {
                self.nodes[h as usize] = node;
                h
            }
            None => {
                self.nodes.push(node);
                (self.nodes.len() - 1) as Handle
            }
        };
        self.link_front(list, h);
        h
    }

    /// Unlinks and frees `h`, returning its value.
    pub fn remove(&mut self, list: &mut Ends, h: Handle) -> T {
        self.unlink(list, h);
        self.free.push(h);
        self.nodes[h as usize].value
    }

    /// Unlinks and frees the tail (least recent) of `list`.
    pub fn pop_back(&mut self, list: &mut Ends) -> Option<T> {
        (list.tail != NIL).then(|| self.remove(list, list.tail))
    }

    pub fn back(&self, list: &Ends) -> Option<T> {
        (list.tail != NIL).then(|| self.get(list.tail))
    }

    /// Moves `h` from `from` to the head of `to` (which may be the same list).
    pub fn move_to_front(&mut self, from: &mut Ends, to: &mut Ends, h: Handle) {
        self.unlink(from, h);
        self.link_front(to, h);
    }

    /// Moves `h` to the head of the list it is already in.
    pub fn promote(&mut self, list: &mut Ends, h: Handle) {
        self.unlink(list, h);
        self.link_front(list, h);
    }

    /// Values from head (most recent) to tail.
    pub fn iter<'a>(&'a self, list: &Ends) -> impl Iterator<Item = T> + 'a {
        let mut cur = list.head;
        std::iter::from_fn(move || {
            (cur != NIL).then(|| {
                let node = &self.nodes[cur as usize];
                cur = node.next;
                node.value
            })
        })
    }

    fn link_front(&mut self, list: &mut Ends, h: Handle) {
        let old = list.head;
        {
            let n = &mut self.nodes[h as usize];
            n.prev = NIL;
            n.next = old;
        }
        if old != NIL {
            self.nodes[old as usize].prev = h;
        } else {
            list.tail = h;
        }
        list.head = h;
        list.len += 1;
    }

    fn unlink(&mut self, list: &mut Ends, h: Handle) {
        let (prev, next) = {
            let n = &self.nodes[h as usize];
            (n.prev, n.next)
        };
        if prev != NIL {
            self.nodes[prev as usize].next = next;
        } else {
            list.head = next;
        }
        if next != NIL {
            self.nodes[next as usize].prev = prev;
        } else {
            list.tail = prev;
        }
        list.len -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_keep_order_across_moves() {
        let mut slab = IndexList::with_capacity(4);
        let (mut a, mut b) = (Ends::default(), Ends::default());
        let h1 = slab.push_front(&mut a, 1);
        slab.push_front(&mut a, 2);
        let h3 = slab.push_front(&mut a, 3);
        assert_eq!(slab.iter(&a).collect::<Vec<_>>(), vec![3, 2, 1]);
        slab.promote(&mut a, h1);
        assert_eq!(slab.iter(&a).collect::<Vec<_>>(), vec![1, 3, 2]);
        slab.move_to_front(&mut a, &mut b, h3);
        assert_eq!(slab.iter(&a).collect::<Vec<_>>(), vec![1, 2]);
        assert_eq!(slab.iter(&b).collect::<Vec<_>>(), vec![3]);
        assert_eq!(slab.pop_back(&mut a), Some(2));
        assert_eq!(slab.pop_back(&mut b), Some(3));
        assert_eq!(slab.pop_back(&mut b), None);
        assert_eq!((a.len(), b.len()), (1, 0));
        // freed slots are reused
        slab.push_front(&mut b, 9);
        assert_eq!(slab.nodes.len(), 3);
    }
}
