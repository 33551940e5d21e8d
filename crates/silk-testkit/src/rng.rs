//! A tiny deterministic pseudo-random generator (SplitMix64) for page generation.
//!
//! It exists so that the demo site's bytes depend only on its config, forever: it must not
//! be replaced by a crate whose output may change between versions, and it must never be
//! seeded from time or the OS.

#[derive(Debug, Clone)]
pub(crate) struct Rng(u64);

/// Independent random streams per page, so that e.g. the price of a page does not change
/// when its link generation changes.
pub(crate) mod stream {
    pub(crate) const FACTS: u64 = 1;
    pub(crate) const TEXT: u64 = 2;
    pub(crate) const LINKS: u64 = 3;
    pub(crate) const SEARCH: u64 = 4;
}

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Rng {
    pub(crate) fn for_page(seed: u64, host: u32, page: u32, stream: u64) -> Self {
        let key = (u64::from(host) << 32) | u64::from(page);
        Rng(mix(seed ^ 0x5EED_5111_C0DE_0001)
            ^ mix(key)
            ^ mix(stream.wrapping_mul(0xD6E8_FEB8_6659_FD93)))
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix(self.0)
    }

    /// Uniform-enough integer in `0..n`; `n` must be non-zero.
    pub(crate) fn below(&mut self, n: u32) -> u32 {
        (((self.next_u64() >> 32) * u64::from(n)) >> 32) as u32
    }

    /// True with probability `num / den`.
    pub(crate) fn chance(&mut self, num: u32, den: u32) -> bool {
        self.below(den) < num
    }

    pub(crate) fn hex(&mut self) -> u64 {
        self.next_u64() & 0xFFFF_FFFF_FFFF
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_sequence_and_bounds_hold() {
        let mut a = Rng::for_page(7, 1, 2, stream::LINKS);
        let mut b = Rng::for_page(7, 1, 2, stream::LINKS);
        let mut c = Rng::for_page(7, 1, 2, stream::TEXT);
        let xs: Vec<u64> = (0..8).map(|_| a.next_u64()).collect();
        let ys: Vec<u64> = (0..8).map(|_| b.next_u64()).collect();
        let zs: Vec<u64> = (0..8).map(|_| c.next_u64()).collect();
        assert_eq!(xs, ys);
        assert_ne!(xs, zs);
        let mut seen = [false; 5];
        for _ in 0..1000 {
            let v = a.below(5);
            assert!(v < 5);
            seen[v as usize] = true;
        }
        assert!(seen.iter().all(|s| *s));
    }
}
