//! Deterministic mutations of byte strings, for the stable runs of fuzz bodies
//! (`crates/silk/tests/fuzz_bodies.rs`): the same seed gives the same inputs everywhere, so
//! a failure names a case that can be run again. Not a fuzzer: a cheap, bounded sweep over
//! the neighbourhood of the seed corpus on every `cargo test`; `bench/fuzz.sh` runs the real
//! one.

/// xorshift64*.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed` (0 is replaced: xorshift needs a non-zero state).
    pub fn new(seed: u64) -> Self {
        Rng(seed.max(1))
    }

    /// The next number.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }
}

/// Bytes that tend to matter to parsers of text formats.
const BYTES: &[u8] = b"{}[]<>:/?#&=%@-,'\"*!|\\\n\t \0\x1e\x7f\xff\xc3\xe4";

/// One to four edits of `data`: bit flips, odd bytes, truncation, a duplicated, deleted or
/// moved slice, an inserted token from `tokens`.
pub fn mutate(rng: &mut Rng, data: &[u8], tokens: &[&str]) -> Vec<u8> {
    let mut data = data.to_vec();
    for _ in 0..=rng.below(4) {
        let len = data.len();
        match rng.below(7) {
            0 if len > 0 => {
                let i = rng.below(len);
                data[i] ^= 1 << rng.below(8);
            }
            1 => {
                let i = rng.below(len + 1);
                data.insert(i, BYTES[rng.below(BYTES.len())]);
            }
            2 if len > 0 => data.truncate(rng.below(len)),
            3 if len > 0 => {
                let (a, b) = span(rng, len);
                let copy = data[a..b].to_vec();
                let at = rng.below(data.len() + 1);
                data.splice(at..at, copy);
            }
            4 if len > 0 => {
                let (a, b) = span(rng, len);
                data.drain(a..b);
            }
            5 if !tokens.is_empty() => {
                let token = tokens[rng.below(tokens.len())].as_bytes();
                let at = rng.below(len + 1);
                data.splice(at..at, token.iter().copied());
            }
            _ if len > 1 => {
                let (i, j) = (rng.below(len), rng.below(len));
                data.swap(i, j);
            }
            _ => data.push(BYTES[rng.below(BYTES.len())]),
        }
    }
    data
}

/// A short span `a..b` of `0..len` (`len` > 0).
fn span(rng: &mut Rng, len: usize) -> (usize, usize) {
    let a = rng.below(len);
    let b = (a + 1 + rng.below(64)).min(len);
    (a, b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_mutations() {
        let run = |seed| {
            let mut rng = Rng::new(seed);
            (0..50)
                .map(|_| mutate(&mut rng, b"name: x\nstart_urls: []\n", &["*a", "&a "]))
                .collect::<Vec<_>>()
        };
        assert_eq!(run(7), run(7));
        assert_ne!(run(7), run(8));
        let mut rng = Rng::new(1);
        for _ in 0..1_000 {
            let _ = mutate(&mut rng, b"", &[]);
        }
    }
}
