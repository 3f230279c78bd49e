//! A small sort for cold paths (loading a model, building a tokenizer, rare encode cases).
//!
//! `core`'s `sort_unstable_by` is pattern-defeating quicksort with sorting networks: ~10-35 KB
//! of wasm per element type and comparator once inlined, which for the handful of sorts done
//! while loading was ~100 KB of the module. This heapsort is a few hundred bytes per element
//! type (the comparison is a `dyn` call) and O(n log n) with no allocation; the hot sorts (the
//! sampler's candidates, the embedder's token ids, the grammar's stacks) stay on `core`'s.

/// Sorts `v` into the order where `less(b, a)` is false for every `a` before `b`. Unstable:
/// comparators that must not depend on the starting order break ties themselves.
#[inline(never)]
pub fn heapsort_by<T>(v: &mut [T], less: &mut dyn FnMut(&T, &T) -> bool) {
    let n = v.len();
    for i in (0..n / 2).rev() {
        sift_down(v, i, n, less);
    }
    for end in (1..n).rev() {
        v.swap(0, end);
        sift_down(v, 0, end, less);
    }
}

fn sift_down<T>(v: &mut [T], mut node: usize, end: usize, less: &mut dyn FnMut(&T, &T) -> bool) {
    loop {
        let mut child = 2 * node + 1;
        if child >= end {
            return;
        }
        if child + 1 < end && less(&v[child], &v[child + 1]) {
            child += 1;
        }
        if !less(&v[node], &v[child]) {
            return;
        }
        v.swap(node, child);
        node = child;
    }
}

#[cfg(test)]
mod tests {
    use super::heapsort_by;
    use alloc::vec::Vec;

    #[test]
    fn sorts_like_core() {
        let mut x = 12345u32;
        for n in [0usize, 1, 2, 3, 7, 16, 100, 1000] {
            let v: Vec<(u32, u32)> = (0..n as u32)
                .map(|i| {
                    x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
                    ((x >> 16) % 37, i)
                })
                .collect();
            let mut a = v.clone();
            heapsort_by(&mut a, &mut |p, q| p < q);
            let mut b = v.clone();
            b.sort_unstable();
            assert_eq!(a, b, "n = {n}");
            let mut c = v.clone();
            heapsort_by(&mut c, &mut |p, q| p.0 > q.0 || (p.0 == q.0 && p.1 < q.1));
            let mut d = v;
            d.sort_by_key(|q| core::cmp::Reverse(q.0));
            assert_eq!(c, d, "n = {n}, descending and stable");
        }
    }
}
