//! Lexer: turns selector source into tokens, following Python's lexical rules for the
//! parts selectors use (names, keywords, string and number literals, operators).
//!
//! It must not know about precedence or meaning; that is the parser's job. Every token
//! carries the byte offset where it starts, from which errors compute a line and column.
//! Whitespace, including newlines, is insignificant everywhere (Python only allows
//! newlines inside brackets; selectors live in YAML strings and are more lenient), and
//! `#` starts a comment running to the end of the line.

use crate::error::{ParseError, Position};

/// What a token is. String literals are already unescaped.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum TokenKind {
    Name(String),
    Int(i128),
    Float(f64),
    Str(String),
    // Keywords that mean something in a selector.
    And,
    Or,
    Not,
    In,
    Is,
    True,
    False,
    None,
    // Punctuation.
    LParen,
    RParen,
    LBracket,
    RBracket,
    Comma,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    Minus,
    Plus,
    Eof,
}

impl TokenKind {
    /// How the token reads in an error message ("found `)`", "found name `x`").
    pub(crate) fn describe(&self) -> String {
        match self {
            TokenKind::Name(name) => format!("name `{}`", crate::text::truncate(name, 40)),
            TokenKind::Int(value) => format!("number `{value}`"),
            TokenKind::Float(value) => format!("number `{}`", crate::text::float_repr(*value)),
            TokenKind::Str(_) => "string literal".to_owned(),
            TokenKind::Eof => "end of input".to_owned(),
            other => format!("`{}`", other.symbol()),
        }
    }

    fn symbol(&self) -> &'static str {
        match self {
            TokenKind::And => "and",
            TokenKind::Or => "or",
            TokenKind::Not => "not",
            TokenKind::In => "in",
            TokenKind::Is => "is",
            TokenKind::True => "True",
            TokenKind::False => "False",
            TokenKind::None => "None",
            TokenKind::LParen => "(",
            TokenKind::RParen => ")",
            TokenKind::LBracket => "[",
            TokenKind::RBracket => "]",
            TokenKind::Comma => ",",
            TokenKind::Eq => "==",
            TokenKind::Ne => "!=",
            TokenKind::Lt => "<",
            TokenKind::Le => "<=",
            TokenKind::Gt => ">",
            TokenKind::Ge => ">=",
            TokenKind::Minus => "-",
            TokenKind::Plus => "+",
            TokenKind::Name(_)
            | TokenKind::Int(_)
            | TokenKind::Float(_)
            | TokenKind::Str(_)
            | TokenKind::Eof => "",
        }
    }
}

/// A token and the byte offset of its first character.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Token {
    pub(crate) kind: TokenKind,
    pub(crate) offset: usize,
}

/// Python keywords outside the selector subset; naming them in an error beats treating
/// `if` as a task key.
const RESERVED: &[&str] = &[
    "as", "assert", "async", "await", "break", "class", "continue", "def", "del", "elif", "else",
    "except", "finally", "for", "from", "global", "if", "import", "lambda", "nonlocal", "pass",
    "raise", "return", "try", "while", "with", "yield",
];

/// Splits `source` into tokens, ending with [`TokenKind::Eof`].
pub(crate) fn tokenize(source: &str) -> Result<Vec<Token>, ParseError> {
    let mut lexer = Lexer {
        source,
        pos: 0,
        tokens: Vec::new(),
    };
    lexer.run()?;
    Ok(lexer.tokens)
}

struct Lexer<'s> {
    source: &'s str,
    /// Byte offset of the next unread character.
    pos: usize,
    tokens: Vec<Token>,
}

impl<'s> Lexer<'s> {
    fn run(&mut self) -> Result<(), ParseError> {
        while let Some(c) = self.peek() {
            let start = self.pos;
            match c {
                ' ' | '\t' | '\n' | '\r' | '\x0c' => self.bump(),
                '#' => {
                    while self.peek().is_some_and(|c| c != '\n') {
                        self.bump();
                    }
                }
                // Explicit line joining, as in Python.
                '\\' if matches!(self.peek_at(1), Some('\n' | '\r')) => {
                    self.bump();
                    self.bump();
                }
                '\'' | '"' => {
                    let value = self.string(start, false)?;
                    self.push(TokenKind::Str(value), start);
                }
                '0'..='9' => self.number(start)?,
                '.' if self.peek_at(1).is_some_and(|c| c.is_ascii_digit()) => self.number(start)?,
                c if is_name_start(c) => self.name_or_keyword(start)?,
                _ => self.punctuation(c, start)?,
            }
        }
        self.push(TokenKind::Eof, self.source.len());
        Ok(())
    }

    fn peek(&self) -> Option<char> {
        self.source[self.pos..].chars().next()
    }

    fn peek_at(&self, n: usize) -> Option<char> {
        self.source[self.pos..].chars().nth(n)
    }

    fn bump(&mut self) {
        if let Some(c) = self.peek() {
            self.pos += c.len_utf8();
        }
    }

    fn push(&mut self, kind: TokenKind, offset: usize) {
        self.tokens.push(Token { kind, offset });
    }

    fn position(&self, offset: usize) -> Position {
        Position::at(self.source, offset)
    }

    fn punctuation(&mut self, c: char, start: usize) -> Result<(), ParseError> {
        let next = self.peek_at(1);
        let (kind, len) = match (c, next) {
            ('(', _) => (TokenKind::LParen, 1),
            (')', _) => (TokenKind::RParen, 1),
            ('[', _) => (TokenKind::LBracket, 1),
            (']', _) => (TokenKind::RBracket, 1),
            (',', _) => (TokenKind::Comma, 1),
            ('-', _) => (TokenKind::Minus, 1),
            ('+', _) => (TokenKind::Plus, 1),
            ('=', Some('=')) => (TokenKind::Eq, 2),
            ('!', Some('=')) => (TokenKind::Ne, 2),
            ('<', Some('=')) => (TokenKind::Le, 2),
            ('>', Some('=')) => (TokenKind::Ge, 2),
            ('<', Some('>')) => {
                return Err(self.unsupported(start, "`<>` is not supported (use `!=`)"));
            }
            ('<', _) => (TokenKind::Lt, 1),
            ('>', _) => (TokenKind::Gt, 1),
            ('=', _) => {
                return Err(self.unsupported(
                    start,
                    "assignment `=` is not supported (use `==` to compare)",
                ));
            }
            ('&', Some('&')) => {
                return Err(self.unsupported(start, "`&&` is not supported (use `and`)"));
            }
            ('|', Some('|')) => {
                return Err(self.unsupported(start, "`||` is not supported (use `or`)"));
            }
            ('!', _) => return Err(self.unsupported(start, "`!` is not supported (use `not`)")),
            ('.', _) => {
                return Err(self.unsupported(start, "attribute access `.` is not supported"));
            }
            ('{', _) => {
                return Err(self.unsupported(start, "dict and set literals are not supported"));
            }
            ('*' | '/' | '%' | '&' | '|' | '^' | '~' | '@', _) => {
                return Err(
                    self.unsupported(start, "arithmetic and bitwise operators are not supported")
                );
            }
            (':', _) => return Err(self.unsupported(start, "slices and `:` are not supported")),
            (found, _) => {
                return Err(ParseError::UnexpectedCharacter {
                    pos: self.position(start),
                    found,
                });
            }
        };
        self.pos += len;
        self.push(kind, start);
        Ok(())
    }

    fn unsupported(&self, offset: usize, what: &'static str) -> ParseError {
        ParseError::Unsupported {
            pos: self.position(offset),
            what,
        }
    }

    fn name_or_keyword(&mut self, start: usize) -> Result<(), ParseError> {
        while self.peek().is_some_and(is_name_continue) {
            self.bump();
        }
        let word = &self.source[start..self.pos];
        // String prefixes: r'…', u'…', R"…", U"…" (bytes and f-strings are not supported).
        if matches!(self.peek(), Some('\'' | '"')) {
            let raw = match word {
                "r" | "R" => Some(true),
                "u" | "U" => Some(false),
                _ => None,
            };
            if let Some(raw) = raw {
                let value = self.string(start, raw)?;
                self.push(TokenKind::Str(value), start);
                return Ok(());
            }
            // Other Python prefixes (`b`, `f`, `rb`, `Fr`…); a keyword such as `in'x'` is
            // not a prefix and falls through.
            let other_prefix = word.len() <= 2
                && word
                    .chars()
                    .all(|c| matches!(c, 'b' | 'B' | 'r' | 'R' | 'u' | 'U' | 'f' | 'F'));
            if other_prefix {
                return Err(self.unsupported(
                    start,
                    "byte strings, f-strings and combined string prefixes are not supported",
                ));
            }
        }
        let kind = match word {
            "and" => TokenKind::And,
            "or" => TokenKind::Or,
            "not" => TokenKind::Not,
            "in" => TokenKind::In,
            "is" => TokenKind::Is,
            "True" => TokenKind::True,
            "False" => TokenKind::False,
            "None" => TokenKind::None,
            _ if RESERVED.contains(&word) => {
                return Err(ParseError::UnsupportedKeyword {
                    pos: self.position(start),
                    keyword: word.to_owned(),
                });
            }
            _ => TokenKind::Name(word.to_owned()),
        };
        self.push(kind, start);
        Ok(())
    }

    /// Lexes a string literal whose prefix (if any) starts at `start`; `self.pos` is at
    /// the opening quote.
    fn string(&mut self, start: usize, raw: bool) -> Result<String, ParseError> {
        let Some(quote) = self.peek() else {
            return Err(ParseError::UnterminatedString {
                pos: self.position(start),
            });
        };
        let triple = self.peek_at(1) == Some(quote) && self.peek_at(2) == Some(quote);
        let quote_len = if triple { 3 } else { 1 };
        self.pos += quote_len;
        let mut value = String::new();
        loop {
            let Some(c) = self.peek() else {
                return Err(ParseError::UnterminatedString {
                    pos: self.position(start),
                });
            };
            if c == quote
                && (!triple || (self.peek_at(1) == Some(quote) && self.peek_at(2) == Some(quote)))
            {
                self.pos += quote_len;
                return Ok(value);
            }
            if (c == '\n' || c == '\r') && !triple {
                return Err(ParseError::UnterminatedString {
                    pos: self.position(start),
                });
            }
            if c == '\\' {
                let escape_start = self.pos;
                self.bump();
                let Some(next) = self.peek() else {
                    return Err(ParseError::UnterminatedString {
                        pos: self.position(start),
                    });
                };
                if raw {
                    // In raw strings a backslash keeps itself and protects the next
                    // character from ending the literal.
                    value.push('\\');
                    value.push(next);
                    self.bump();
                } else {
                    self.escape(escape_start, &mut value)?;
                }
                continue;
            }
            value.push(c);
            self.bump();
        }
    }

    /// Decodes the escape whose backslash is at `escape_start`; `self.pos` is just past it.
    fn escape(&mut self, escape_start: usize, out: &mut String) -> Result<(), ParseError> {
        let Some(c) = self.peek() else {
            return Err(self.invalid_escape(escape_start, self.pos));
        };
        self.bump();
        let simple = match c {
            '\n' => return Ok(()),
            '\r' => {
                if self.peek() == Some('\n') {
                    self.bump();
                }
                return Ok(());
            }
            '\\' => '\\',
            '\'' => '\'',
            '"' => '"',
            'a' => '\x07',
            'b' => '\x08',
            'f' => '\x0c',
            'n' => '\n',
            'r' => '\r',
            't' => '\t',
            'v' => '\x0b',
            '0'..='7' => {
                let mut code = c.to_digit(8).unwrap_or(0);
                for _ in 0..2 {
                    match self.peek().and_then(|d| d.to_digit(8)) {
                        Some(d) => {
                            code = code * 8 + d;
                            self.bump();
                        }
                        None => break,
                    }
                }
                char::from_u32(code).ok_or_else(|| self.invalid_escape(escape_start, self.pos))?
            }
            'x' => self.hex_escape(escape_start, 2)?,
            'u' => self.hex_escape(escape_start, 4)?,
            'U' => self.hex_escape(escape_start, 8)?,
            'N' => return Err(self.invalid_escape(escape_start, self.pos)),
            // Python keeps unknown escapes as written (with a warning).
            other => {
                out.push('\\');
                other
            }
        };
        out.push(simple);
        Ok(())
    }

    fn hex_escape(&mut self, escape_start: usize, digits: usize) -> Result<char, ParseError> {
        let mut code: u32 = 0;
        for _ in 0..digits {
            let Some(digit) = self.peek().and_then(|d| d.to_digit(16)) else {
                // Show the offending character too, unless it ends the literal.
                let end = match self.peek() {
                    Some(c) if !matches!(c, '\'' | '"' | '\n') => self.pos + c.len_utf8(),
                    _ => self.pos,
                };
                return Err(self.invalid_escape(escape_start, end));
            };
            code = code.saturating_mul(16).saturating_add(digit);
            self.bump();
        }
        // Surrogates and values past U+10FFFF have no `char`.
        char::from_u32(code).ok_or_else(|| self.invalid_escape(escape_start, self.pos))
    }

    /// An invalid escape spanning bytes `escape_start..end` (both on char boundaries).
    fn invalid_escape(&self, escape_start: usize, end: usize) -> ParseError {
        ParseError::InvalidEscape {
            pos: self.position(escape_start),
            escape: self
                .source
                .get(escape_start..end)
                .unwrap_or("\\")
                .to_owned(),
        }
    }

    /// Lexes an int or float literal: decimal, `0x`/`0o`/`0b` ints, `_` between digits.
    fn number(&mut self, start: usize) -> Result<(), ParseError> {
        while self
            .peek()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
            || (matches!(self.peek(), Some('+' | '-'))
                && matches!(self.source[..self.pos].chars().last(), Some('e' | 'E'))
                && !self.source[start..].starts_with("0x")
                && !self.source[start..].starts_with("0X"))
        {
            self.bump();
        }
        let literal = &self.source[start..self.pos];
        let invalid = || ParseError::InvalidNumber {
            pos: self.position(start),
            literal: literal.to_owned(),
        };
        let lower = literal.to_ascii_lowercase();
        let (digits, radix) = match lower.get(..2) {
            Some("0x") => (&lower[2..], 16),
            Some("0o") => (&lower[2..], 8),
            Some("0b") => (&lower[2..], 2),
            _ => (lower.as_str(), 10),
        };
        // After a prefix Python allows one leading underscore: `0x_ff`.
        let digits = if radix == 10 {
            digits
        } else {
            digits.strip_prefix('_').unwrap_or(digits)
        };
        let is_float = radix == 10 && digits.contains(['.', 'e']);
        let clean = strip_underscores(digits, radix).ok_or_else(invalid)?;
        if is_float {
            // Rust would accept `inf`/`nan` here, Python would not; those never reach
            // this point because a number starts with a digit or `.`, and the checks
            // below reject letters other than one `e`.
            let valid = clean
                .chars()
                .all(|c| c.is_ascii_digit() || matches!(c, '.' | 'e' | '+' | '-'));
            let value: f64 = if valid {
                clean.parse().map_err(|_| invalid())?
            } else {
                return Err(invalid());
            };
            self.push(TokenKind::Float(value), start);
            return Ok(());
        }
        if clean.is_empty() || !clean.chars().all(|c| c.is_digit(radix)) {
            return Err(invalid());
        }
        // Python rejects `0123` (ambiguous with old octal) but accepts `000`.
        if radix == 10
            && clean.len() > 1
            && clean.starts_with('0')
            && clean.chars().any(|c| c != '0')
        {
            return Err(invalid());
        }
        let value =
            i128::from_str_radix(&clean, radix).map_err(|_| ParseError::IntegerOutOfRange {
                pos: self.position(start),
                literal: literal.to_owned(),
            })?;
        self.push(TokenKind::Int(value), start);
        Ok(())
    }
}

/// Removes `_` separators from a number's digits, which Python allows only singly and
/// between two digits. Returns `None` when they are misplaced.
pub(crate) fn strip_underscores(digits: &str, radix: u32) -> Option<String> {
    if !digits.contains('_') {
        return Some(digits.to_owned());
    }
    let chars: Vec<char> = digits.chars().collect();
    let mut out = String::with_capacity(digits.len());
    for (i, &c) in chars.iter().enumerate() {
        if c == '_' {
            let before = i.checked_sub(1).and_then(|j| chars.get(j));
            let after = chars.get(i + 1);
            let is_digit = |d: Option<&char>| d.is_some_and(|d| d.is_digit(radix));
            if !is_digit(before) || !is_digit(after) {
                return None;
            }
        } else {
            out.push(c);
        }
    }
    Some(out)
}

fn is_name_start(c: char) -> bool {
    c == '_' || c.is_alphabetic()
}

fn is_name_continue(c: char) -> bool {
    c == '_' || c.is_alphanumeric()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(source: &str) -> Vec<TokenKind> {
        tokenize(source)
            .unwrap_or_else(|e| panic!("{source}: {e}"))
            .into_iter()
            .map(|t| t.kind)
            .collect()
    }

    #[test]
    fn strings_follow_python_escapes() {
        assert_eq!(kinds(r"'a\'b'")[0], TokenKind::Str("a'b".into()));
        assert_eq!(
            kinds(r#""\x41\u00e9\U0001F600\101\n""#)[0],
            TokenKind::Str("Aé😀A\n".into())
        );
        assert_eq!(kinds(r"'\d'")[0], TokenKind::Str("\\d".into()));
        assert_eq!(kinds(r"r'\d\''")[0], TokenKind::Str("\\d\\'".into()));
        assert_eq!(kinds("'''a'b'''")[0], TokenKind::Str("a'b".into()));
        assert_eq!(kinds("'找新'")[0], TokenKind::Str("找新".into()));
    }

    #[test]
    fn numbers_follow_python_rules() {
        assert_eq!(kinds("1_000")[0], TokenKind::Int(1000));
        assert_eq!(kinds("0x_ff")[0], TokenKind::Int(255));
        assert_eq!(
            kinds("0o17 0b101")[..2],
            [TokenKind::Int(15), TokenKind::Int(5)]
        );
        assert_eq!(kinds("1.5e-3")[0], TokenKind::Float(1.5e-3));
        assert_eq!(kinds(".5")[0], TokenKind::Float(0.5));
        assert_eq!(kinds("5.")[0], TokenKind::Float(5.0));
        assert_eq!(kinds("000")[0], TokenKind::Int(0));
        for bad in [
            "0123", "1__0", "1_", "1e", "0x", "1j", "1.2.3", "0b2", "1e+",
        ] {
            assert!(
                matches!(tokenize(bad), Err(ParseError::InvalidNumber { .. })),
                "{bad}: {:?}",
                tokenize(bad)
            );
        }
    }

    #[test]
    fn keywords_may_touch_string_literals() {
        assert_eq!(
            kinds("'a' in'abc'or'x'"),
            [
                TokenKind::Str("a".into()),
                TokenKind::In,
                TokenKind::Str("abc".into()),
                TokenKind::Or,
                TokenKind::Str("x".into()),
                TokenKind::Eof
            ]
        );
        assert!(matches!(
            tokenize("rb'x'"),
            Err(ParseError::Unsupported { .. })
        ));
        assert!(matches!(
            tokenize("f'x'"),
            Err(ParseError::Unsupported { .. })
        ));
    }

    #[test]
    fn names_may_be_unicode() {
        assert_eq!(kinds("省份")[0], TokenKind::Name("省份".into()));
    }
}
