//! Content-Encoding decoding (gzip, deflate, br) of a body that arrives in chunks, with the
//! body limit enforced on the decoded bytes *inside* the decoder: a gzip bomb stops at
//! `max_body_bytes` of output, whatever its ratio.
//!
//! The fetcher decodes here rather than letting the HTTP client do it so that it can count
//! the bytes that crossed the wire (`wire_bytes`) and bound the decoded size exactly. This
//! module knows nothing about HTTP beyond the header value; it must not allocate more than
//! the limit.

use std::io::{self, Write};

/// Why a body could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CodingError {
    /// The decoded body passed the limit.
    TooLarge,
    /// The compressed stream ended before it was complete.
    Incomplete(String),
    /// The compressed stream is not valid.
    Corrupt(String),
    /// A coding Silk does not decode (it never asks for one).
    Unsupported(String),
}

/// A `Vec` that refuses to grow past its limit, or (truncating) keeps what fits, drops the
/// rest and says so.
struct Limited {
    buf: Vec<u8>,
    limit: usize,
    truncate: bool,
    cut: bool,
}

#[derive(Debug)]
struct LimitExceeded;

impl std::fmt::Display for LimitExceeded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("decoded body limit exceeded")
    }
}
impl std::error::Error for LimitExceeded {}

impl Write for Limited {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        if self.buf.len() + data.len() > self.limit {
            if !self.truncate {
                return Err(io::Error::other(LimitExceeded));
            }
            let room = self.limit - self.buf.len();
            self.buf.extend_from_slice(&data[..room]);
            self.cut = true;
            return Ok(data.len());
        }
        self.buf.extend_from_slice(data);
        Ok(data.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

enum Inner {
    Identity(Limited),
    Gzip(flate2::write::MultiGzDecoder<Limited>),
    Zlib(flate2::write::ZlibDecoder<Limited>),
    RawDeflate(flate2::write::DeflateDecoder<Limited>),
    /// `deflate` is zlib-wrapped by the standard and raw in the wild: wait for two bytes.
    DeflateUndecided(Limited, Vec<u8>),
    Brotli(Box<brotli_decompressor::DecompressorWriter<Limited>>),
}

/// Decodes one body, chunk by chunk.
pub(crate) struct ContentDecoder {
    inner: Inner,
    /// Whether any wire byte arrived: an empty body (HEAD, 204, 304) is empty whatever its
    /// announced coding.
    seen: bool,
}

fn map_io(e: io::Error, what: &str) -> CodingError {
    if e.get_ref().is_some_and(|inner| inner.is::<LimitExceeded>()) {
        CodingError::TooLarge
    } else if e.kind() == io::ErrorKind::UnexpectedEof || e.kind() == io::ErrorKind::WriteZero {
        CodingError::Incomplete(format!("{what} body ends early"))
    } else {
        CodingError::Corrupt(format!("corrupt {what} body: {e}"))
    }
}

impl ContentDecoder {
    /// A decoder for the `Content-Encoding` header value (`None` = identity), whose output may
    /// not exceed `limit` bytes (an error, or with `truncate` the first `limit` bytes are
    /// kept and [`ContentDecoder::is_cut`] turns true); `capacity` pre-sizes the output.
    pub(crate) fn new(
        content_encoding: Option<&str>,
        limit: u64,
        capacity: usize,
        truncate: bool,
    ) -> Result<Self, CodingError> {
        let limit = usize::try_from(limit).unwrap_or(usize::MAX);
        let out = Limited {
            buf: Vec::with_capacity(capacity.min(limit)),
            limit,
            truncate,
            cut: false,
        };
        let mut codings = content_encoding
            .unwrap_or("")
            .split(',')
            .map(|c| c.trim().to_ascii_lowercase())
            .filter(|c| !c.is_empty() && c != "identity");
        let coding = codings.next();
        if let Some(second) = codings.next() {
            return Err(CodingError::Unsupported(format!(
                "stacked content codings `{}, {second}`",
                coding.unwrap_or_default()
            )));
        }
        let inner = match coding.as_deref() {
            None => Inner::Identity(out),
            Some("gzip" | "x-gzip") => Inner::Gzip(flate2::write::MultiGzDecoder::new(out)),
            Some("deflate") => Inner::DeflateUndecided(out, Vec::with_capacity(2)),
            Some("br") => Inner::Brotli(Box::new(brotli_decompressor::DecompressorWriter::new(
                out,
                16 * 1024,
            ))),
            Some(other) => {
                return Err(CodingError::Unsupported(format!(
                    "content-encoding `{other}`"
                )));
            }
        };
        Ok(Self { inner, seen: false })
    }

    /// Feeds the next wire chunk.
    pub(crate) fn push(&mut self, chunk: &[u8]) -> Result<(), CodingError> {
        self.seen |= !chunk.is_empty();
        match &mut self.inner {
            Inner::Identity(out) => out.write_all(chunk).map_err(|e| map_io(e, "identity")),
            Inner::Gzip(d) => d.write_all(chunk).map_err(|e| map_io(e, "gzip")),
            Inner::Zlib(d) => d.write_all(chunk).map_err(|e| map_io(e, "deflate")),
            Inner::RawDeflate(d) => d.write_all(chunk).map_err(|e| map_io(e, "deflate")),
            Inner::Brotli(d) => d.write_all(chunk).map_err(|e| map_io(e, "br")),
            Inner::DeflateUndecided(out, head) => {
                head.extend_from_slice(chunk);
                if head.len() < 2 {
                    return Ok(());
                }
                let head = std::mem::take(head);
                let out = std::mem::replace(
                    out,
                    Limited {
                        buf: Vec::new(),
                        limit: 0,
                        truncate: false,
                        cut: false,
                    },
                );
                self.inner = if is_zlib_header(head[0], head[1]) {
                    Inner::Zlib(flate2::write::ZlibDecoder::new(out))
                } else {
                    Inner::RawDeflate(flate2::write::DeflateDecoder::new(out))
                };
                self.push(&head)
            }
        }
    }

    fn output(&mut self) -> &mut Limited {
        match &mut self.inner {
            Inner::Identity(out) | Inner::DeflateUndecided(out, _) => out,
            Inner::Gzip(d) => d.get_mut(),
            Inner::Zlib(d) => d.get_mut(),
            Inner::RawDeflate(d) => d.get_mut(),
            Inner::Brotli(d) => d.get_mut(),
        }
    }

    /// Whether a truncating decoder reached its limit (the caller stops reading).
    pub(crate) fn is_cut(&mut self) -> bool {
        self.output().cut
    }

    /// Ends the body: the decoded bytes, or why the stream is incomplete or corrupt. A cut
    /// body is returned as it is, without checking the rest of the stream.
    pub(crate) fn finish(mut self) -> Result<Vec<u8>, CodingError> {
        if !self.seen {
            return Ok(Vec::new());
        }
        if self.is_cut() {
            return Ok(std::mem::take(&mut self.output().buf));
        }
        match self.inner {
            Inner::Identity(out) => Ok(out.buf),
            Inner::Gzip(d) => d.finish().map(|o| o.buf).map_err(|e| map_io(e, "gzip")),
            Inner::Zlib(d) => d.finish().map(|o| o.buf).map_err(|e| map_io(e, "deflate")),
            Inner::RawDeflate(d) => d.finish().map(|o| o.buf).map_err(|e| map_io(e, "deflate")),
            Inner::DeflateUndecided(out, head) if head.is_empty() => Ok(out.buf),
            Inner::DeflateUndecided(..) => {
                Err(CodingError::Incomplete("deflate body ends early".into()))
            }
            Inner::Brotli(mut d) => {
                d.close().map_err(|e| map_io(e, "br"))?;
                d.into_inner()
                    .map(|o| o.buf)
                    .map_err(|_| CodingError::Incomplete("br body ends early".into()))
            }
        }
    }
}

/// RFC 1950: compression method 8 and a header checksum that divides by 31.
fn is_zlib_header(cmf: u8, flg: u8) -> bool {
    cmf & 0x0f == 8 && (u16::from(cmf) << 8 | u16::from(flg)) % 31 == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::Compression;

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), Compression::default());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    fn decode(
        coding: Option<&str>,
        wire: &[u8],
        limit: u64,
        chunk: usize,
    ) -> Result<Vec<u8>, CodingError> {
        let mut d = ContentDecoder::new(coding, limit, 0, false)?;
        for c in wire.chunks(chunk.max(1)) {
            d.push(c)?;
        }
        d.finish()
    }

    #[test]
    fn gzip_deflate_identity_round_trip() {
        let text = b"hello hello hello hello".repeat(50);
        assert_eq!(
            decode(Some("gzip"), &gzip(&text), 1 << 20, 7).unwrap(),
            text
        );
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), Compression::default());
        z.write_all(&text).unwrap();
        assert_eq!(
            decode(Some("deflate"), &z.finish().unwrap(), 1 << 20, 1).unwrap(),
            text
        );
        let mut raw = flate2::write::DeflateEncoder::new(Vec::new(), Compression::default());
        raw.write_all(&text).unwrap();
        assert_eq!(
            decode(Some("Deflate"), &raw.finish().unwrap(), 1 << 20, 3).unwrap(),
            text
        );
        assert_eq!(decode(None, &text, 1 << 20, 64).unwrap(), text);
        assert_eq!(decode(Some("identity"), &text, 1 << 20, 64).unwrap(), text);
    }

    #[test]
    fn bomb_stops_at_the_limit() {
        let zeros = vec![0u8; 4 << 20];
        let wire = gzip(&zeros);
        assert!(wire.len() < 10_000);
        assert_eq!(
            decode(Some("gzip"), &wire, 1 << 20, 4096),
            Err(CodingError::TooLarge)
        );
        assert_eq!(
            decode(None, &zeros, 1 << 20, 4096),
            Err(CodingError::TooLarge)
        );
    }

    #[test]
    fn truncated_and_corrupt_streams_fail() {
        let wire = gzip(&b"abcdefgh".repeat(1000));
        let cut = &wire[..wire.len() / 2];
        assert!(matches!(
            decode(Some("gzip"), cut, 1 << 20, 100),
            Err(CodingError::Incomplete(_))
        ));
        assert!(matches!(
            decode(Some("gzip"), b"this is not gzip at all", 1 << 20, 5),
            Err(CodingError::Corrupt(_))
        ));
        assert!(matches!(
            decode(Some("br"), b"\xff\xff\xff\xff garbage", 1 << 20, 5),
            Err(CodingError::Corrupt(_))
        ));
        assert!(matches!(
            decode(Some("zstd"), b"", 1, 1),
            Err(CodingError::Unsupported(_))
        ));
        assert!(matches!(
            decode(Some("gzip, br"), b"", 1, 1),
            Err(CodingError::Unsupported(_))
        ));
    }

    #[test]
    fn truncating_keeps_the_first_bytes() {
        let text = b"0123456789".repeat(100);
        let mut d = ContentDecoder::new(Some("gzip"), 25, 0, true).unwrap();
        let wire = gzip(&text);
        for c in wire.chunks(10) {
            d.push(c).unwrap();
            if d.is_cut() {
                break;
            }
        }
        assert!(d.is_cut());
        assert_eq!(d.finish().unwrap(), &text[..25]);
    }

    #[test]
    fn empty_body_with_a_coding_is_empty() {
        assert_eq!(decode(Some("deflate"), b"", 10, 1).unwrap(), b"");
        assert_eq!(decode(Some("gzip"), b"", 10, 1).unwrap(), b"");
        assert_eq!(decode(Some("br"), b"", 10, 1).unwrap(), b"");
    }
}
