//! Helpers shared by the crate's unit tests.

/// A fixed-seed xorshift generator: `next(n)` draws in `[0, n)`, so a failing case replays
/// exactly from its seed.
pub(crate) fn xorshift(seed: u64) -> impl FnMut(u64) -> u64 {
    let mut state = seed;
    move |n: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % n
    }
}
