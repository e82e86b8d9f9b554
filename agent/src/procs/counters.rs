//! `struct sp_counters` as the flat array of u64 words it is: adding,
//! subtracting and the sparse form of a growth (the findings' window).

use std::mem::size_of;

use crate::bpf::types::sp_counters;

/// Number of u64 counters in `struct sp_counters`.
const COUNTER_WORDS: usize = size_of::<sp_counters>() / size_of::<u64>();
const _: () = assert!(size_of::<sp_counters>() == COUNTER_WORDS * size_of::<u64>());

/// `struct sp_counters` as a flat slice of its u64 words.
pub(super) fn words(c: &sp_counters) -> &[u64] {
    // SAFETY: sp_counters is #[repr(C)] and made only of u64 and (nested)
    // arrays of u64, so it has u64 alignment, no padding (asserted above) and
    // is exactly COUNTER_WORDS u64 values laid out back to back.
    unsafe { std::slice::from_raw_parts((c as *const sp_counters).cast::<u64>(), COUNTER_WORDS) }
}

fn words_mut(c: &mut sp_counters) -> &mut [u64] {
    // SAFETY: as in `words`; the exclusive borrow of `c` covers the slice.
    unsafe { std::slice::from_raw_parts_mut((c as *mut sp_counters).cast::<u64>(), COUNTER_WORDS) }
}

/// `into += from`, element by element.
pub fn add_counters(into: &mut sp_counters, from: &sp_counters) {
    for (a, b) in words_mut(into).iter_mut().zip(words(from)) {
        *a = a.wrapping_add(*b);
    }
}

/// The non-zero counters of `c` as (word index, value): a growth over a
/// short time touches a few of its hundred-odd words.
pub fn sparse_counters(c: &sp_counters) -> Box<[(u16, u64)]> {
    (words(c).iter().enumerate())
        .filter(|&(_, &w)| w != 0)
        .map(|(i, &w)| (i as u16, w)) // COUNTER_WORDS is far below u16::MAX
        .collect()
}

/// `into += from`, `from` as [`sparse_counters`] gives it.
pub fn add_sparse_counters(into: &mut sp_counters, from: &[(u16, u64)]) {
    let words = words_mut(into);
    for &(i, w) in from {
        words[usize::from(i)] = words[usize::from(i)].wrapping_add(w);
    }
}

/// `into -= from`, element by element (growth between two readings).
pub fn sub_counters(into: &mut sp_counters, from: &sp_counters) {
    for (a, b) in words_mut(into).iter_mut().zip(words(from)) {
        *a = a.wrapping_sub(*b);
    }
}
