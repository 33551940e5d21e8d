//! The first line of dedup: one Bloom filter (fastbloom) per time segment, in memory.
//!
//! A Bloom filter answers "definitely new" or "maybe seen". "Definitely new" is final; "maybe"
//! must be confirmed by the backend against its exact seen set, so a false positive costs one
//! store read and never loses a URL. This module must not be the only record of what was
//! seen: a backend rebuilds a segment's filter from its stored seen set ([`SegmentBlooms::load`])
//! whenever the segment is not in memory (at open, or when the clock moves to a segment this
//! process has not held).
//!
//! The filter is fed the first 8 bytes of the request fingerprint (xxh3-128, already uniformly
//! distributed), so it hashes nothing itself. Each filter is sized once for `expected_urls` at
//! `bloom_fp_rate`; past that count it keeps working with a growing false-positive rate (more
//! store reads, no loss). At most [`KEEP_SEGMENTS`] filters are held (the current segment and
//! the previous one, for a clock that steps back a little); older ones are dropped.
//!
//! In front of the filter sits [`RecentSet`], an exact bounded cache of recently met
//! fingerprints: a true duplicate is a Bloom "maybe" by construction, and confirming each
//! one in the store would cost microseconds; most are recent and are recognised there with
//! one cache miss (the filter costs one miss per hash function).

use fastbloom::BloomFilter;
use silk_core::Fingerprint;
use std::collections::BTreeMap;

/// How many segments' filters stay in memory.
pub(crate) const KEEP_SEGMENTS: usize = 2;

/// What the filter says about a fingerprint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Probe {
    /// Never inserted in this segment: new for sure (and now inserted).
    New,
    /// Possibly inserted: confirm with the store.
    Maybe,
}

struct Segment {
    bloom: BloomFilter,
    /// Fingerprints inserted (distinct as far as the filter could tell).
    count: u64,
}

/// Bloom filters of the segments held in memory.
pub(crate) struct SegmentBlooms {
    expected_urls: usize,
    fp_rate: f64,
    segments: BTreeMap<u64, Segment>,
}

fn bloom_hash(fp: &Fingerprint) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&fp.0[..8]);
    u64::from_le_bytes(b)
}

impl SegmentBlooms {
    /// Filters sized for `expected_urls` each at `fp_rate`.
    pub fn new(expected_urls: u64, fp_rate: f64) -> Self {
        Self {
            expected_urls: usize::try_from(expected_urls.max(1)).unwrap_or(usize::MAX),
            fp_rate,
            segments: BTreeMap::new(),
        }
    }

    /// Whether `segment` is in memory (if not, [`Self::load`] it before probing).
    pub fn has(&self, segment: u64) -> bool {
        self.segments.contains_key(&segment)
    }

    /// Installs the filter of `segment` built from its stored fingerprints, dropping the
    /// oldest segments beyond [`KEEP_SEGMENTS`].
    pub fn load(&mut self, segment: u64, stored: impl IntoIterator<Item = Fingerprint>) {
        let mut bloom =
            BloomFilter::with_false_pos(self.fp_rate).expected_items(self.expected_urls);
        let mut count = 0;
        for fp in stored {
            bloom.insert_hash(bloom_hash(&fp));
            count += 1;
        }
        self.segments.insert(segment, Segment { bloom, count });
        while self.segments.len() > KEEP_SEGMENTS {
            self.segments.pop_first();
        }
    }

    /// Probes and inserts. The segment must be loaded; an unloaded one answers `Maybe`.
    pub fn probe_insert(&mut self, segment: u64, fp: &Fingerprint) -> Probe {
        let Some(s) = self.segments.get_mut(&segment) else {
            return Probe::Maybe;
        };
        if s.bloom.insert_hash(bloom_hash(fp)) {
            Probe::Maybe
        } else {
            s.count += 1;
            Probe::New
        }
    }

    /// Records that a `Maybe` turned out new (a false positive), for the count.
    pub fn confirm_new(&mut self, segment: u64) {
        if let Some(s) = self.segments.get_mut(&segment) {
            s.count += 1;
        }
    }

    /// Bytes held by the filters.
    pub fn bytes(&self) -> u64 {
        self.segments
            .values()
            .map(|s| (s.bloom.num_bits() / 8) as u64)
            .sum()
    }

    /// Fingerprints held by the filters.
    pub fn urls(&self) -> u64 {
        self.segments.values().map(|s| s.count).sum()
    }
}

/// Ways per bucket of [`RecentSet`].
const WAYS: usize = 4;

/// An exact, bounded set of recently met fingerprints (a 4-way set-associative cache with
/// LRU in each bucket), asked before the Bloom filter: a hit is a duplicate without a store
/// read. Only fingerprints known to be stored are inserted. Crawls re-find the same links over and over
/// (navigation, pagination), so most duplicates are recent ones.
///
/// It is exact (full 16-byte fingerprints) but forgetful: a miss says nothing, and the
/// caller asks the store. Segments are part of the key (the segment is mixed into the stored
/// value), so a segment change needs no flush.
pub(crate) struct RecentSet {
    slots: Vec<u128>,
    mask: usize,
}

impl RecentSet {
    /// A set of about `entries` fingerprints (rounded up to a power of two, at least 64).
    pub fn new(entries: usize) -> Self {
        let buckets = (entries / WAYS).max(16).next_power_of_two();
        Self {
            slots: vec![0; buckets * WAYS],
            mask: buckets - 1,
        }
    }

    fn tag(segment: u64, fp: &Fingerprint) -> u128 {
        // Mixing the segment in keeps segments apart; 0 marks an empty slot, so a tag of 0
        // is never stored or found (the caller then asks the store: still exact).
        fp.as_u128() ^ u128::from(segment).wrapping_mul(0x9E37_79B9_7F4A_7C15_F39C_C060_5CED_C835)
    }

    fn bucket(&self, tag: u128) -> usize {
        // Both halves mixed: independent of the Bloom filter's hash (the first 8 bytes).
        let h = (tag >> 64) as u64;
        ((h.rotate_left(17) ^ (tag as u64)) as usize & self.mask) * WAYS
    }

    /// Whether `(segment, fp)` was inserted recently; a hit becomes the most recent.
    pub fn contains(&mut self, segment: u64, fp: &Fingerprint) -> bool {
        let tag = Self::tag(segment, fp);
        if tag == 0 {
            return false;
        }
        let b = self.bucket(tag);
        let ways = &mut self.slots[b..b + WAYS];
        match ways.iter().position(|&t| t == tag) {
            Some(i) => {
                ways[..=i].rotate_right(1);
                true
            }
            None => false,
        }
    }

    /// Records `(segment, fp)` as the most recent of its bucket, evicting the least recent.
    pub fn insert(&mut self, segment: u64, fp: &Fingerprint) {
        let tag = Self::tag(segment, fp);
        if tag == 0 {
            return;
        }
        let b = self.bucket(tag);
        let ways = &mut self.slots[b..b + WAYS];
        let i = ways.iter().position(|&t| t == tag).unwrap_or(WAYS - 1);
        ways[..=i].rotate_right(1);
        ways[0] = tag;
    }

    /// Bytes held.
    pub fn bytes(&self) -> u64 {
        (self.slots.len() * std::mem::size_of::<u128>()) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fp(i: u64) -> Fingerprint {
        silk_core::fingerprint("GET", &format!("https://example.com/{i}"), None)
    }

    #[test]
    fn new_then_maybe() {
        let mut b = SegmentBlooms::new(1_000, 0.01);
        assert_eq!(b.probe_insert(0, &fp(1)), Probe::Maybe, "unloaded segment");
        b.load(0, []);
        assert_eq!(b.probe_insert(0, &fp(1)), Probe::New);
        assert_eq!(b.probe_insert(0, &fp(1)), Probe::Maybe);
        assert_eq!(b.urls(), 1);
        assert!(b.bytes() > 0);
    }

    #[test]
    fn keeps_two_segments_and_reloads() {
        let mut b = SegmentBlooms::new(1_000, 0.01);
        b.load(0, [fp(1)]);
        b.load(1, []);
        b.load(2, []);
        assert!(!b.has(0));
        assert!(b.has(1) && b.has(2));
        b.load(0, [fp(1)]);
        assert_eq!(b.probe_insert(0, &fp(1)), Probe::Maybe);
    }

    #[test]
    fn false_positive_rate_is_near_target() {
        let mut b = SegmentBlooms::new(10_000, 0.01);
        b.load(0, (0..10_000).map(fp));
        let fps = (10_000..11_000)
            .filter(|&i| b.probe_insert(0, &fp(i)) == Probe::Maybe)
            .count();
        assert!(fps < 50, "{fps} false positives in 1,000");
    }

    #[test]
    fn recent_set_is_exact_and_lru() {
        let mut r = RecentSet::new(64);
        assert!(!r.contains(0, &fp(1)));
        r.insert(0, &fp(1));
        assert!(r.contains(0, &fp(1)));
        assert!(!r.contains(1, &fp(1)), "segments are apart");
        for i in 2..10_000 {
            r.insert(0, &fp(i));
            assert!(r.contains(0, &fp(i)));
        }
        let kept = (0..10_000).filter(|&i| r.contains(0, &fp(i))).count();
        assert!(kept <= 64, "bounded: {kept}");
        assert_eq!(r.bytes(), 64 * 16);
    }
}
