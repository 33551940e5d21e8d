//! An incremental parser of `text/event-stream` (server-sent events, as the HTML standard
//! defines them): bytes in, in chunks cut anywhere; whole events out.

/// One event of the stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field (`message` when absent).
    pub event: String,
    /// The `data:` lines, joined with newlines.
    pub data: String,
    /// The last `id:` seen on the stream so far, if any.
    pub id: Option<String>,
}

/// Parses a stream fed in chunks. Lines end in LF, CRLF or CR; `:` lines are comments; an
/// empty line ends an event; an event without `data:` is not dispatched; an unfinished event
/// at the end of the stream is dropped.
#[derive(Debug, Default)]
pub struct SseParser {
    buf: Vec<u8>,
    /// The previous chunk ended in CR: an LF at the start of this one belongs to it.
    skip_lf: bool,
    /// Nothing parsed yet (a byte order mark at the start is skipped).
    started: bool,
    event: String,
    data: String,
    has_data: bool,
    last_id: Option<String>,
}

impl SseParser {
    /// A parser at the start of a stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds the next bytes; returns the events they complete.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<SseEvent> {
        let mut chunk = chunk;
        if self.skip_lf {
            if let Some(rest) = chunk.strip_prefix(b"\n") {
                chunk = rest;
                self.skip_lf = false;
            } else if !chunk.is_empty() {
                self.skip_lf = false;
            }
        }
        self.buf.extend_from_slice(chunk);
        if !self.started && self.buf.len() >= 3 {
            self.started = true;
            if self.buf.starts_with("\u{feff}".as_bytes()) {
                self.buf.drain(..3);
            }
        }
        let mut events = Vec::new();
        let mut start = 0;
        while let Some(offset) = self.buf[start..]
            .iter()
            .position(|&b| b == b'\n' || b == b'\r')
        {
            let end = start + offset;
            let line = String::from_utf8_lossy(&self.buf[start..end]).into_owned();
            let mut next = end + 1;
            if self.buf[end] == b'\r' {
                match self.buf.get(next) {
                    Some(b'\n') => next += 1,
                    Some(_) => {}
                    None => self.skip_lf = true,
                }
            }
            start = next;
            if let Some(event) = self.line(&line) {
                events.push(event);
            }
        }
        self.buf.drain(..start);
        events
    }

    fn line(&mut self, line: &str) -> Option<SseEvent> {
        self.started = true;
        if line.is_empty() {
            let event = std::mem::take(&mut self.event);
            let mut data = std::mem::take(&mut self.data);
            if !std::mem::take(&mut self.has_data) {
                return None;
            }
            if data.ends_with('\n') {
                data.pop();
            }
            return Some(SseEvent {
                event: if event.is_empty() {
                    "message".into()
                } else {
                    event
                },
                data,
                id: self.last_id.clone(),
            });
        }
        if line.starts_with(':') {
            return None;
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "event" => self.event = value.to_owned(),
            "data" => {
                self.data.push_str(value);
                self.data.push('\n');
                self.has_data = true;
            }
            "id" if !value.contains('\0') => self.last_id = Some(value.to_owned()),
            _ => {}
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(event: &str, data: &str, id: Option<&str>) -> SseEvent {
        SseEvent {
            event: event.into(),
            data: data.into(),
            id: id.map(str::to_owned),
        }
    }

    const STREAM: &str = "\u{feff}: hello\n\nevent: run\ndata: {\"id\":\"r1\"}\n\n\
        event: log\nid: 7\ndata:{\"id\":7}\n\nretry: 10\ndata: a\ndata:\ndata: b\n\n\
        event: nodata\n\nevent: end\ndata: {}\n\nevent: cut\ndata: x";

    fn expected() -> Vec<SseEvent> {
        vec![
            ev("run", "{\"id\":\"r1\"}", None),
            ev("log", "{\"id\":7}", Some("7")),
            ev("message", "a\n\nb", Some("7")),
            ev("end", "{}", Some("7")),
        ]
    }

    #[test]
    fn events_come_out_whole() {
        let mut p = SseParser::new();
        assert_eq!(p.push(STREAM.as_bytes()), expected());
    }

    #[test]
    fn chunks_may_be_cut_anywhere_and_lines_end_in_crlf_or_cr() {
        for ending in ["\n", "\r\n", "\r"] {
            let text = STREAM.replace('\n', ending);
            let bytes = text.as_bytes();
            for size in [1, 2, 3, 5, 64] {
                let mut p = SseParser::new();
                let mut got = Vec::new();
                for chunk in bytes.chunks(size) {
                    got.extend(p.push(chunk));
                }
                assert_eq!(got, expected(), "ending {ending:?}, chunks of {size}");
            }
        }
    }

    #[test]
    fn a_cr_then_an_lf_in_the_next_chunk_is_one_line_end() {
        let mut p = SseParser::new();
        assert!(p.push(b"data: a\r").is_empty());
        assert!(p.push(b"\n").is_empty());
        assert_eq!(p.push(b"\r\n"), vec![ev("message", "a", None)]);
    }
}
