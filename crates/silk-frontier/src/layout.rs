//! The frontier's record layout: key formats and value encodings, shared by the embedded
//! store (fjall keyspaces) and the Redis store (the same records as hash values), so it sits
//! beside both rather than inside one. Everything a frontier writes is encoded and decoded here
//! and nowhere else.
//!
//! This module must not panic on any input read from disk: every decoder returns `None` (or an
//! error) for bytes it cannot use, and the caller reports and skips the record.
//!
//! # Keyspaces
//!
//! | keyspace   | key                                   | value                          |
//! |------------|---------------------------------------|--------------------------------|
//! | `requests` | `seq: u64 BE` (8 bytes)               | request record (below)         |
//! | `seen`     | `segment: u64 BE ‖ fingerprint` (24)  | empty                          |
//! | `meta`     | `counters`                            | counters record (below)        |
//! | `meta`     | `format`                              | `silk-frontier/1` (UTF-8)      |
//! | `meta`     | `delay/` ‖ host key (UTF-8)           | `delay_ms: u64 LE`             |
//!
//! - `requests` holds every request that is pending or in flight (leases are not stored: a
//!   crash turns in-flight leases back into pending requests, as the contract says). A
//!   request is deleted when acked `Done`/`Failed`/`Dropped`. `seq` is assigned from the
//!   `next_seq` counter, so keys are appended in order (cheap for an LSM tree).
//! - `seen` is the exact dedup set: one key per (segment, fingerprint) ever enqueued. Big-endian
//!   segment first, so one segment is one contiguous prefix (the Bloom filter of a segment is
//!   rebuilt from a prefix scan), and the segments before one are one range, deleted once past
//!   their retention (`segment_retention_ms`).
//! - `counters` is rewritten in the same atomic write batch as the data it counts, so the
//!   counters and the data never disagree after a crash.
//!
//! # Request record (format 1)
//!
//! ```text
//! 0      u8      format = 1
//! 1..5   u32 LE  retries          (authoritative; overrides the JSON's `retries`)
//! 5..13  u64 LE  not_before_ms    (retry back-off end; 0 = leasable at once)
//! 13..21 u64 LE  created_ms       (copy of the request's, for the scheduler)
//! 21..25 i32 LE  priority         (copy of the request's, for the scheduler)
//! 25..27 u16 LE  host key length  n
//! 27..   n bytes host key (UTF-8)
//! ..end  JSON of `silk_core::Request`
//! ```
//!
//! The fixed header carries what the scheduler needs, so that rebuilding the in-memory queues
//! at open reads no JSON and parses no URL, and so that a retry rewrites the header in place
//! without touching the JSON. The request itself is JSON (serde_json): `Request::meta` holds
//! `serde_json::Value`s, which compact non-self-describing formats (bincode, postcard) cannot
//! decode, and JSON keeps the record readable and tolerant of fields added to `Request` later
//! (its serde form is a wire format that only grows). It costs about a microsecond per request
//! (encode at enqueue, decode at lease); fjall compresses the blocks on disk (LZ4).
//!
//! # Counters record (format 1)
//!
//! `u8 format = 1`, then `u64 LE` each: total, success, failed, dropped, duplicates, retries,
//! corrupt, next_seq, epoch (incremented at every open; lease ids are `epoch << 40 | n`).

use silk_core::{Fingerprint, Request};

/// Keyspace of pending and in-flight requests.
pub(crate) const REQUESTS: &str = "requests";
/// Keyspace of the exact seen set.
pub(crate) const SEEN: &str = "seen";
/// Keyspace of counters, format marker and host delays.
pub(crate) const META: &str = "meta";

/// `meta` key of the counters record.
pub(crate) const COUNTERS_KEY: &[u8] = b"counters";
/// `meta` key of the format marker.
pub(crate) const FORMAT_KEY: &[u8] = b"format";
/// The format marker this code writes and reads.
pub(crate) const FORMAT: &[u8] = b"silk-frontier/1";
/// Prefix of `meta` keys of host delays.
pub(crate) const DELAY_PREFIX: &[u8] = b"delay/";

const RECORD_FORMAT: u8 = 1;
const HEADER_FIXED: usize = 27;
const COUNTERS_FORMAT: u8 = 1;
const COUNTER_FIELDS: usize = 9;

/// Key of a request record.
pub(crate) fn request_key(seq: u64) -> [u8; 8] {
    seq.to_be_bytes()
}

/// The seq of a request key.
pub(crate) fn decode_request_key(key: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(key.try_into().ok()?))
}

/// Key of a seen-set entry.
pub(crate) fn seen_key(segment: u64, fp: &Fingerprint) -> [u8; 24] {
    let mut k = [0u8; 24];
    k[..8].copy_from_slice(&segment.to_be_bytes());
    k[8..].copy_from_slice(&fp.0);
    k
}

/// Prefix of a segment's seen keys.
pub(crate) fn seen_prefix(segment: u64) -> [u8; 8] {
    segment.to_be_bytes()
}

/// The segment of a seen key (`None`: too short).
pub(crate) fn seen_key_segment(key: &[u8]) -> Option<u64> {
    let s: [u8; 8] = key.get(..8)?.try_into().ok()?;
    Some(u64::from_be_bytes(s))
}

/// The fingerprint of a seen key.
pub(crate) fn decode_seen_key(key: &[u8]) -> Option<Fingerprint> {
    let fp: [u8; 16] = key.get(8..24)?.try_into().ok()?;
    (key.len() == 24).then_some(Fingerprint(fp))
}

/// `meta` key of a host's delay.
pub(crate) fn delay_key(host: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(DELAY_PREFIX.len() + host.len());
    k.extend_from_slice(DELAY_PREFIX);
    k.extend_from_slice(host.as_bytes());
    k
}

/// The fixed fields of a request record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RecordHeader<'a> {
    pub retries: u32,
    pub not_before_ms: u64,
    pub created_ms: u64,
    pub priority: i32,
    pub host: &'a str,
    /// Where the JSON starts.
    pub json_at: usize,
}

/// Encodes a request record.
pub(crate) fn encode_record(
    request: &Request,
    host: &str,
    not_before_ms: u64,
) -> Result<Vec<u8>, serde_json::Error> {
    let host = truncate_host(host);
    let mut v = Vec::with_capacity(HEADER_FIXED + host.len() + 96 + request.url.len());
    v.push(RECORD_FORMAT);
    v.extend_from_slice(&request.retries.to_le_bytes());
    v.extend_from_slice(&not_before_ms.to_le_bytes());
    v.extend_from_slice(&request.created_ms.to_le_bytes());
    v.extend_from_slice(&request.priority.to_le_bytes());
    v.extend_from_slice(&(host.len() as u16).to_le_bytes());
    v.extend_from_slice(host.as_bytes());
    serde_json::to_writer(&mut v, request)?;
    Ok(v)
}

/// Host keys longer than a u16 length cannot be stored; they are cut at a char boundary
/// (a host name is at most 253 bytes, so this only ever meets garbage).
fn truncate_host(host: &str) -> &str {
    silk_core::text::prefix(host, usize::from(u16::MAX))
}

fn le_u32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}
fn le_u64(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// Decodes the header of a request record; `None` if it is not a valid format-1 record.
pub(crate) fn decode_header(v: &[u8]) -> Option<RecordHeader<'_>> {
    if *v.first()? != RECORD_FORMAT {
        return None;
    }
    let retries = le_u32(v, 1)?;
    let not_before_ms = le_u64(v, 5)?;
    let created_ms = le_u64(v, 13)?;
    let priority = i32::from_le_bytes(v.get(21..25)?.try_into().ok()?);
    let host_len = usize::from(u16::from_le_bytes(v.get(25..27)?.try_into().ok()?));
    let json_at = HEADER_FIXED + host_len;
    let host = std::str::from_utf8(v.get(HEADER_FIXED..json_at)?).ok()?;
    if v.len() <= json_at {
        return None;
    }
    Some(RecordHeader {
        retries,
        not_before_ms,
        created_ms,
        priority,
        host,
        json_at,
    })
}

/// Decodes a whole request record (the header's `retries` wins over the JSON's).
pub(crate) fn decode_record(v: &[u8]) -> Result<Request, String> {
    let h = decode_header(v).ok_or_else(|| "bad record header".to_owned())?;
    let mut r: Request = serde_json::from_slice(&v[h.json_at..]).map_err(|e| e.to_string())?;
    r.retries = h.retries;
    Ok(r)
}

/// A copy of `v` with new `retries` and `not_before_ms` (the rest unchanged); `None` if `v`
/// is not a valid record.
pub(crate) fn rewrite_retry(v: &[u8], retries: u32, not_before_ms: u64) -> Option<Vec<u8>> {
    decode_header(v)?;
    let mut out = v.to_vec();
    out[1..5].copy_from_slice(&retries.to_le_bytes());
    out[5..13].copy_from_slice(&not_before_ms.to_le_bytes());
    Some(out)
}

/// The persisted counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Counters {
    pub total: u64,
    pub success: u64,
    pub failed: u64,
    pub dropped: u64,
    pub duplicates: u64,
    pub retries: u64,
    pub corrupt: u64,
    pub next_seq: u64,
    pub epoch: u64,
}

impl Counters {
    fn fields(&self) -> [u64; COUNTER_FIELDS] {
        [
            self.total,
            self.success,
            self.failed,
            self.dropped,
            self.duplicates,
            self.retries,
            self.corrupt,
            self.next_seq,
            self.epoch,
        ]
    }

    /// Requests stored and not finished.
    pub fn left(&self) -> u64 {
        self.total
            .saturating_sub(self.success + self.failed + self.dropped)
    }

    /// The counters record.
    pub fn encode(&self) -> [u8; 1 + 8 * COUNTER_FIELDS] {
        let mut out = [0u8; 1 + 8 * COUNTER_FIELDS];
        out[0] = COUNTERS_FORMAT;
        for (i, f) in self.fields().iter().enumerate() {
            out[1 + 8 * i..9 + 8 * i].copy_from_slice(&f.to_le_bytes());
        }
        out
    }

    /// Decodes a counters record; `None` if invalid.
    pub fn decode(v: &[u8]) -> Option<Self> {
        if v.len() != 1 + 8 * COUNTER_FIELDS || v[0] != COUNTERS_FORMAT {
            return None;
        }
        let f = |i: usize| le_u64(v, 1 + 8 * i);
        Some(Self {
            total: f(0)?,
            success: f(1)?,
            failed: f(2)?,
            dropped: f(3)?,
            duplicates: f(4)?,
            retries: f(5)?,
            corrupt: f(6)?,
            next_seq: f(7)?,
            epoch: f(8)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> Request {
        let mut r = Request::from_canonical("https://example.com/a?b=1".into());
        r.priority = -3;
        r.created_ms = 42;
        r.retries = 1;
        r.meta.insert("k".into(), serde_json::json!({"x": [1, 2]}));
        r
    }

    #[test]
    fn record_roundtrip_and_retry_rewrite() {
        let r = request();
        let v = encode_record(&r, "example.com", 7).unwrap();
        let h = decode_header(&v).unwrap();
        assert_eq!(
            (h.retries, h.not_before_ms, h.created_ms, h.priority),
            (1, 7, 42, -3)
        );
        assert_eq!(h.host, "example.com");
        assert_eq!(decode_record(&v).unwrap(), r);
        let v2 = rewrite_retry(&v, 2, 99).unwrap();
        let h2 = decode_header(&v2).unwrap();
        assert_eq!((h2.retries, h2.not_before_ms), (2, 99));
        assert_eq!(decode_record(&v2).unwrap().retries, 2);
    }

    #[test]
    fn garbage_never_panics() {
        let v = encode_record(&request(), "example.com", 7).unwrap();
        for cut in 0..v.len() {
            let _ = decode_header(&v[..cut]);
            let _ = decode_record(&v[..cut]);
            let _ = rewrite_retry(&v[..cut], 1, 1);
        }
        let mut bad_utf8 = v.clone();
        bad_utf8[HEADER_FIXED] = 0xff;
        assert!(decode_header(&bad_utf8).is_none());
        let mut huge_len = v.clone();
        huge_len[25..27].copy_from_slice(&u16::MAX.to_le_bytes());
        assert!(decode_header(&huge_len).is_none());
        assert!(decode_record(&[1, 2, 3]).is_err());
        assert!(Counters::decode(&[1, 2, 3]).is_none());
        assert!(decode_seen_key(&[0; 23]).is_none());
        assert!(decode_request_key(&[0; 7]).is_none());
    }

    #[test]
    fn counters_roundtrip() {
        let c = Counters {
            total: 9,
            success: 2,
            failed: 1,
            dropped: 1,
            next_seq: 9,
            epoch: 3,
            ..Default::default()
        };
        assert_eq!(Counters::decode(&c.encode()), Some(c));
        assert_eq!(c.left(), 5);
    }

    #[test]
    fn seen_keys_sort_by_segment() {
        let fp = silk_core::fingerprint("GET", "https://a/", None);
        let a = seen_key(1, &fp);
        let b = seen_key(256, &fp);
        assert!(a < b);
        assert!(a.starts_with(&seen_prefix(1)));
        assert_eq!(decode_seen_key(&a), Some(fp));
        assert_eq!(seen_key_segment(&b), Some(256));
        assert_eq!(seen_key_segment(&[1, 2]), None);
    }
}
