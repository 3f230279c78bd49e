//! Small sorts. `core`'s `sort_unstable_by` and `select_nth_unstable_by` are pattern-defeating
//! quicksort and introselect with sorting networks: ~3-10 KB of wasm per element type and
//! comparator once inlined (~100 KB of the module when every sort used them).
//!
//! - [`heapsort_by`] for cold paths (loading a model, building a tokenizer, rare encode cases)
//!   and short lists (the grammar's few stacks a step): a few hundred bytes per element type
//!   (the comparison is a `dyn` call), O(n log n), no allocation.
//! - [`quicksort_by`] and [`select_nth_by`] for the sampler (its candidates and repetition
//!   window): quicksort and quickselect over branchless partitions, insertion sort for short
//!   ranges, monomorphized (the comparison inlines), 1-2 KB each; past 2·log2(n) levels of
//!   partitioning they hand the range to [`heapsort_by`], so no order of the input makes them
//!   quadratic. On the sampler's 49,152 candidates a top-40 takes 0.8x `core`'s time, a full
//!   sort 1.5x (wasmtime).
//! - No `core` sort in the module: the embedder, the last user (its token ids, to find repeats),
//!   now marks ids in a table instead (`embed::Embedder::pool`: 7 % faster than `core`'s sort,
//!   which had been 5 % faster than [`quicksort_by`] there).

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

/// Ranges this short are finished by insertion sort.
const INSERTION: usize = 32;
/// Ranges longer than this take their pivot as a median of nine.
const NINTHER: usize = 128;
/// Elements [`select_nth_by`] samples for a pivot when the wanted rank is low.
const SAMPLE: usize = 32;

/// Sorts `v` so that `less(b, a)` is false for every `a` before `b` (unstable, like
/// [`heapsort_by`]); O(n log n) for any input.
pub fn quicksort_by<T: Copy, F: FnMut(&T, &T) -> bool>(v: &mut [T], mut less: F) {
    sort_range(v, 0, v.len(), false, &mut less, depth_limit(v.len()));
}

/// Sorts `v[lo..hi]`. `after_pivot`: `v[lo - 1]` is an earlier pivot, not after anything in
/// the range; a new pivot equal to it means the range starts with a run of equal elements,
/// which one pass gathers and skips (so many equal elements cost O(n), not O(n²)).
fn sort_range<T: Copy, F: FnMut(&T, &T) -> bool>(
    v: &mut [T],
    mut lo: usize,
    mut hi: usize,
    mut after_pivot: bool,
    less: &mut F,
    mut depth: u32,
) {
    while hi - lo > INSERTION {
        if depth == 0 {
            return heapsort_by(&mut v[lo..hi], less);
        }
        depth -= 1;
        let range = &mut v[lo..hi];
        choose_pivot(range, less);
        if after_pivot && !less(&v[lo - 1], &v[lo]) {
            lo += partition_not_after(&mut v[lo..hi], less);
            continue;
        }
        let p = lo + partition_before(&mut v[lo..hi], less);
        // Recurse into the shorter side, loop on the longer: the stack stays O(log n).
        if p - lo < hi - p {
            sort_range(v, lo, p, after_pivot, less, depth);
            (lo, after_pivot) = (p + 1, true);
        } else {
            sort_range(v, p + 1, hi, true, less, depth);
            hi = p;
        }
    }
    insertion_sort(&mut v[lo..hi], less);
}

/// Reorders `v` so that `v[nth]` is the element a sort by `less` would put there, every element
/// before it not after it, and every element after it not before it (each side in no
/// particular order). `nth < v.len()`.
pub fn select_nth_by<T: Copy, F: FnMut(&T, &T) -> bool>(v: &mut [T], nth: usize, mut less: F) {
    let (mut lo, mut hi) = (0, v.len());
    let mut depth = depth_limit(v.len());
    while hi - lo > INSERTION {
        if depth == 0 {
            return heapsort_by(&mut v[lo..hi], &mut less);
        }
        depth -= 1;
        let (len, rank) = (hi - lo, nth - lo);
        if len > 8 * SAMPLE && rank < len / 16 {
            choose_low_pivot(&mut v[lo..hi], rank, &mut less);
        } else {
            choose_pivot(&mut v[lo..hi], &mut less);
        }
        if lo > 0 && !less(&v[lo - 1], &v[lo]) {
            // A run equal to the earlier pivot: in place once gathered.
            let equal = lo + partition_not_after(&mut v[lo..hi], &mut less);
            if nth < equal {
                return;
            }
            lo = equal;
            continue;
        }
        let p = lo + partition_before(&mut v[lo..hi], &mut less);
        match p.cmp(&nth) {
            core::cmp::Ordering::Equal => return,
            core::cmp::Ordering::Less => lo = p + 1,
            core::cmp::Ordering::Greater => hi = p,
        }
    }
    insertion_sort(&mut v[lo..hi], &mut less);
}

/// Levels of partitioning before a range goes to [`heapsort_by`]: 2·log2(n).
fn depth_limit(n: usize) -> u32 {
    2 * (usize::BITS - n.leading_zeros())
}

/// Moves a pivot to `v[0]` (more than 2 elements): the median of the first, middle and last
/// elements, or for long ranges the median of three such medians (Tukey's ninther), which
/// splits closer to the middle.
fn choose_pivot<T, F: FnMut(&T, &T) -> bool>(v: &mut [T], less: &mut F) {
    let n = v.len();
    let mut median = |v: &mut [T], a: usize, b: usize, c: usize| {
        // Orders v[a] <= v[b] <= v[c] in the comparator's order; the median is then at b.
        if less(&v[b], &v[a]) {
            v.swap(b, a);
        }
        if less(&v[c], &v[b]) {
            v.swap(c, b);
            if less(&v[b], &v[a]) {
                v.swap(b, a);
            }
        }
    };
    let (mid, last) = (n / 2, n - 1);
    if n > NINTHER {
        let step = n / 8;
        median(v, 0, step, 2 * step);
        median(v, mid - step, mid, mid + step);
        median(v, last - 2 * step, last - step, last);
        median(v, step, mid, last - step);
    } else {
        median(v, 0, mid, last);
    }
    v.swap(0, mid);
}

/// Moves a pivot for finding an element of low `rank` to `v[0]`: among [`SAMPLE`] elements
/// spread over `v`, the one a few places above where `rank` would fall. One pass then leaves
/// that element in a short left part (a few percent of `v`) instead of half of it: a top-k over a
/// vocabulary of logits is little more than one pass.
fn choose_low_pivot<T: Copy, F: FnMut(&T, &T) -> bool>(v: &mut [T], rank: usize, less: &mut F) {
    let stride = v.len() / SAMPLE;
    for i in 1..SAMPLE {
        v.swap(i, i * stride);
    }
    insertion_sort(&mut v[..SAMPLE], less);
    let at = (rank * SAMPLE / v.len() + 2).min(SAMPLE - 1);
    v.swap(0, at);
}

/// Partitions `v` around its pivot `v[0]` and returns the pivot's final index `p`: everything
/// in `v[..p]` is before the pivot, nothing in `v[p + 1..]` is. Lomuto's scheme without
/// branches on the comparison (a swap every step, the boundary moved by its result), which
/// keeps random data free of mispredicted branches.
fn partition_before<T, F: FnMut(&T, &T) -> bool>(v: &mut [T], less: &mut F) -> usize {
    let mut store = 1;
    for i in 1..v.len() {
        let before = less(&v[i], &v[0]);
        v.swap(store, i);
        store += before as usize;
    }
    v.swap(0, store - 1);
    store - 1
}

/// Like [`partition_before`] for "not after the pivot": returns how many elements (the pivot
/// and every element equal to it, when nothing in `v` is before it) now lead `v`.
fn partition_not_after<T, F: FnMut(&T, &T) -> bool>(v: &mut [T], less: &mut F) -> usize {
    let (pivot, rest) = v.split_at_mut(1);
    let mut store = 0;
    for i in 0..rest.len() {
        let not_after = !less(&pivot[0], &rest[i]);
        rest.swap(store, i);
        store += not_after as usize;
    }
    store + 1
}

/// Each element in turn taken out and the larger ones before it moved up one place (no swaps).
fn insertion_sort<T: Copy, F: FnMut(&T, &T) -> bool>(v: &mut [T], less: &mut F) {
    for i in 1..v.len() {
        let x = v[i];
        let mut j = i;
        while j > 0 && less(&x, &v[j - 1]) {
            v[j] = v[j - 1];
            j -= 1;
        }
        v[j] = x;
    }
}

#[cfg(test)]
mod tests {
    use super::{heapsort_by, quicksort_by, select_nth_by};
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

    /// Inputs that trouble quicksorts: sorted, reversed, all equal, few distinct values, organ
    /// pipe, random; every length up to 70 and some longer.
    fn inputs() -> Vec<Vec<u32>> {
        let mut x = 987_654_321u32;
        let mut rand = move || {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
            x >> 8
        };
        let mut out = Vec::new();
        for n in (0..70).chain([100, 257, 1000, 5000]) {
            let n = n as u32;
            out.push((0..n).collect());
            out.push((0..n).rev().collect());
            out.push((0..n).map(|_| 7).collect());
            out.push((0..n).map(|_| rand() % 3).collect());
            out.push((0..n).map(|i| i.min(n - i)).collect());
            out.push((0..n).map(|_| rand()).collect());
        }
        out
    }

    #[test]
    fn quicksort_sorts_like_core() {
        for v in inputs() {
            let mut a = v.clone();
            quicksort_by(&mut a, |p, q| p < q);
            let mut b = v.clone();
            b.sort_unstable();
            assert_eq!(a, b, "{v:?}");
            // A comparator with ties broken by position: the result is one order only.
            let mut c: Vec<(u32, usize)> = v.iter().copied().zip(0..).collect();
            quicksort_by(&mut c, |p, q| p.0 > q.0 || (p.0 == q.0 && p.1 < q.1));
            let mut d: Vec<(u32, usize)> = v.iter().copied().zip(0..).collect();
            d.sort_by(|p, q| q.0.cmp(&p.0).then(p.1.cmp(&q.1)));
            assert_eq!(c, d);
        }
    }

    #[test]
    fn select_nth_puts_each_element_in_place() {
        for v in inputs() {
            let mut sorted = v.clone();
            sorted.sort_unstable();
            for nth in [0, 1, v.len() / 3, v.len() / 2, v.len().saturating_sub(1)] {
                if nth >= v.len() {
                    continue;
                }
                let mut a = v.clone();
                select_nth_by(&mut a, nth, |p, q| p < q);
                assert_eq!(a[nth], sorted[nth], "nth {nth} of {v:?}");
                assert!(a[..nth].iter().all(|&x| x <= a[nth]));
                assert!(a[nth + 1..].iter().all(|&x| x >= a[nth]));
                let mut rest = a.clone();
                rest.sort_unstable();
                assert_eq!(rest, sorted, "elements lost");
            }
        }
    }

    /// Median-of-three killers and sorted inputs stay within the depth limit's heapsort, and
    /// the counts of comparisons stay O(n log n).
    #[test]
    fn no_input_makes_them_quadratic() {
        let n = 1 << 14;
        for v in inputs().into_iter().filter(|v| v.len() >= 1000) {
            let mut count = 0usize;
            let mut a = v.clone();
            quicksort_by(&mut a, |p, q| {
                count += 1;
                p < q
            });
            assert!(
                count < 40 * v.len() * 13,
                "{count} comparisons for {}",
                v.len()
            );
        }
        // Alternating high and low values defeat a median of the ends and middle.
        let v: Vec<u32> = (0..n).map(|i| if i % 2 == 0 { i } else { n + i }).collect();
        let mut count = 0usize;
        let mut a = v;
        select_nth_by(&mut a, n as usize / 2, |p, q| {
            count += 1;
            p < q
        });
        assert!(count < 40 * n as usize * 14, "{count} comparisons");
    }
}
