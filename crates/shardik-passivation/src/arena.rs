//! Index-linked doubly linked lists stored in a slab (`Vec`), shared by the policies.
//!
//! Nodes are addressed by `u32` indices; freed slots are recycled through a free list, so a
//! steady-state workload performs no allocation per access.

pub(crate) const NIL: u32 = u32::MAX;

/// Head/tail/length of one list whose nodes live in an [`Arena`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct List {
    pub head: u32,
    pub tail: u32,
    pub len: usize,
}

impl Default for List {
    fn default() -> Self {
        List {
            head: NIL,
            tail: NIL,
            len: 0,
        }
    }
}

#[derive(Debug)]
pub(crate) struct Node<P> {
    prev: u32,
    next: u32,
    pub val: P,
}

/// A slab of list nodes carrying a payload `P`.
#[derive(Debug)]
pub(crate) struct Arena<P> {
    nodes: Vec<Node<P>>,
    free: Vec<u32>,
}

impl<P> Default for Arena<P> {
    fn default() -> Self {
        Arena {
            nodes: Vec::new(),
            free: Vec::new(),
        }
    }
}

impl<P> Arena<P> {
    /// Allocate a detached node (reusing a freed slot when possible).
    pub fn alloc(&mut self, val: P) -> u32 {
        if let Some(idx) = self.free.pop() {
            let n = &mut self.nodes[idx as usize];
            n.val = val;
            n.prev = NIL;
            n.next = NIL;
            idx
        } else {
            let idx = self.nodes.len();
            assert!(idx < NIL as usize, "arena full");
            self.nodes.push(Node {
                prev: NIL,
                next: NIL,
                val,
            });
            idx as u32
        }
    }

    /// Return a detached node's slot to the free list (its payload stays until reuse).
    pub fn release(&mut self, idx: u32) {
        self.free.push(idx);
    }

    #[inline]
    pub fn get(&self, idx: u32) -> &P {
        &self.nodes[idx as usize].val
    }

    #[inline]
    pub fn get_mut(&mut self, idx: u32) -> &mut P {
        &mut self.nodes[idx as usize].val
    }

    #[inline]
    pub fn next(&self, idx: u32) -> u32 {
        self.nodes[idx as usize].next
    }

    #[inline]
    pub fn prev(&self, idx: u32) -> u32 {
        self.nodes[idx as usize].prev
    }

    /// Append a detached node at the tail of `list`.
    pub fn push_back(&mut self, list: &mut List, idx: u32) {
        let tail = list.tail;
        {
            let n = &mut self.nodes[idx as usize];
            n.prev = tail;
            n.next = NIL;
        }
        if tail == NIL {
            list.head = idx;
        } else {
            self.nodes[tail as usize].next = idx;
        }
        list.tail = idx;
        list.len += 1;
    }

    /// Insert a detached node before `at` (or at the tail when `at` is `NIL`).
    pub fn insert_before(&mut self, list: &mut List, idx: u32, at: u32) {
        if at == NIL {
            self.push_back(list, idx);
            return;
        }
        let prev = self.nodes[at as usize].prev;
        {
            let n = &mut self.nodes[idx as usize];
            n.prev = prev;
            n.next = at;
        }
        self.nodes[at as usize].prev = idx;
        if prev == NIL {
            list.head = idx;
        } else {
            self.nodes[prev as usize].next = idx;
        }
        list.len += 1;
    }

    /// Detach a node from `list`.
    pub fn unlink(&mut self, list: &mut List, idx: u32) {
        let (prev, next) = {
            let n = &self.nodes[idx as usize];
            (n.prev, n.next)
        };
        if prev == NIL {
            list.head = next;
        } else {
            self.nodes[prev as usize].next = next;
        }
        if next == NIL {
            list.tail = prev;
        } else {
            self.nodes[next as usize].prev = prev;
        }
        let n = &mut self.nodes[idx as usize];
        n.prev = NIL;
        n.next = NIL;
        list.len -= 1;
    }

    /// Move a node of `list` to its tail.
    pub fn move_to_back(&mut self, list: &mut List, idx: u32) {
        if list.tail != idx {
            self.unlink(list, idx);
            self.push_back(list, idx);
        }
    }
}

/// Size in bytes of one slab node carrying payload `P`.
pub(crate) fn node_size<P>() -> usize {
    std::mem::size_of::<Node<P>>()
}
