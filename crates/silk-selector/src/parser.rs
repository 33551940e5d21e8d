//! Parser: a recursive-descent parser from tokens to the expression tree in
//! [`crate::ast`], folding constants on the way.
//!
//! It must not evaluate anything that depends on a task, and must not reject what Python
//! would only reject at run time (a call to an unknown function, `'a' < 1`): those are
//! evaluation errors, because short-circuiting may never reach them. Nesting is capped at
//! [`MAX_DEPTH`] so that neither the parser nor the evaluator can overflow the stack.

use crate::ast::{CmpOp, Comparison, Const, ConstSeq, Expr, Function, Offset, SeqKind};
use crate::error::{ParseError, Position};
use crate::lexer::{Token, TokenKind, tokenize};

/// How deeply expressions may nest: parentheses, brackets, `not`, unary signs,
/// subscripts and calls each count one level.
pub const MAX_DEPTH: usize = 64;

/// Parses a whole selector.
pub(crate) fn parse(source: &str) -> Result<Expr, ParseError> {
    let tokens = tokenize(source)?;
    let mut parser = Parser {
        source,
        tokens,
        next: 0,
        depth: 0,
    };
    let expr = parser.or_expr()?;
    parser.expect(&TokenKind::Eof, "an operator or end of input")?;
    Ok(expr)
}

struct Parser<'s> {
    source: &'s str,
    tokens: Vec<Token>,
    /// Index of the next unconsumed token; the last token is always `Eof`.
    next: usize,
    depth: usize,
}

impl Parser<'_> {
    fn peek(&self) -> &TokenKind {
        self.peek_nth(0)
    }

    fn peek_nth(&self, n: usize) -> &TokenKind {
        let last = self.tokens.len().saturating_sub(1);
        self.tokens
            .get((self.next + n).min(last))
            .map_or(&TokenKind::Eof, |t| &t.kind)
    }

    fn offset(&self) -> usize {
        let last = self.tokens.len().saturating_sub(1);
        self.tokens
            .get(self.next.min(last))
            .map_or(self.source.len(), |t| t.offset)
    }

    /// Consumes the next token (at the end, keeps returning `Eof`). Tokens are moved
    /// out rather than cloned: the parser never looks back.
    fn advance(&mut self) -> Token {
        let last = self.tokens.len().saturating_sub(1);
        let index = self.next.min(last);
        if self.next < last {
            self.next += 1;
        }
        match self.tokens.get_mut(index) {
            Some(token) if index < last => {
                let offset = token.offset;
                std::mem::replace(
                    token,
                    Token {
                        kind: TokenKind::Eof,
                        offset,
                    },
                )
            }
            _ => Token {
                kind: TokenKind::Eof,
                offset: self.source.len(),
            },
        }
    }

    fn eat(&mut self, kind: &TokenKind) -> bool {
        if self.peek() == kind {
            self.advance();
            true
        } else {
            false
        }
    }

    fn expect(&mut self, kind: &TokenKind, expected: &'static str) -> Result<(), ParseError> {
        if self.eat(kind) {
            Ok(())
        } else {
            Err(self.expected(expected))
        }
    }

    fn expected(&self, expected: &'static str) -> ParseError {
        ParseError::Expected {
            pos: Position::at(self.source, self.offset()),
            expected,
            found: self.peek().describe(),
        }
    }

    fn unsupported(&self, what: &'static str) -> ParseError {
        ParseError::Unsupported {
            pos: Position::at(self.source, self.offset()),
            what,
        }
    }

    fn enter(&mut self) -> Result<(), ParseError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(ParseError::TooDeep {
                pos: Position::at(self.source, self.offset()),
                limit: MAX_DEPTH,
            });
        }
        Ok(())
    }

    fn leave(&mut self, levels: usize) {
        self.depth = self.depth.saturating_sub(levels);
    }

    fn here(&self) -> Offset {
        Offset::try_from(self.offset()).unwrap_or(Offset::MAX)
    }

    /// `or_expr := and_expr ('or' and_expr)*`
    fn or_expr(&mut self) -> Result<Expr, ParseError> {
        let first = self.and_expr()?;
        if self.peek() != &TokenKind::Or {
            return Ok(first);
        }
        let mut operands = vec![first];
        while self.eat(&TokenKind::Or) {
            operands.push(self.and_expr()?);
        }
        Ok(Expr::Or(operands.into()))
    }

    /// `and_expr := not_expr ('and' not_expr)*`
    fn and_expr(&mut self) -> Result<Expr, ParseError> {
        let first = self.not_expr()?;
        if self.peek() != &TokenKind::And {
            return Ok(first);
        }
        let mut operands = vec![first];
        while self.eat(&TokenKind::And) {
            operands.push(self.not_expr()?);
        }
        Ok(Expr::And(operands.into()))
    }

    /// `not_expr := 'not' not_expr | comparison`
    fn not_expr(&mut self) -> Result<Expr, ParseError> {
        if self.peek() != &TokenKind::Not {
            return self.comparison();
        }
        // Depth is checked before consuming the token, so errors point at it.
        self.enter()?;
        self.advance();
        let operand = self.not_expr()?;
        self.leave(1);
        Ok(match operand {
            Expr::Const(Const::Bool(b)) => Expr::Const(Const::Bool(!b)),
            other => Expr::Not(Box::new(other)),
        })
    }

    /// `comparison := sign_expr (comp_op sign_expr)*`
    fn comparison(&mut self) -> Result<Expr, ParseError> {
        let first = self.sign_expr()?;
        let mut rest = Vec::new();
        while let Some(op) = self.comparison_operator() {
            let at = self.here();
            let tokens = match op {
                CmpOp::NotIn | CmpOp::IsNot => 2,
                _ => 1,
            };
            for _ in 0..tokens {
                self.advance();
            }
            let right = self.sign_expr()?;
            rest.push(Comparison { op, at, right });
        }
        if rest.is_empty() {
            return Ok(first);
        }
        Ok(Expr::Compare {
            first: Box::new(first),
            rest: rest.into(),
        })
    }

    fn comparison_operator(&self) -> Option<CmpOp> {
        Some(match self.peek() {
            TokenKind::Eq => CmpOp::Eq,
            TokenKind::Ne => CmpOp::Ne,
            TokenKind::Lt => CmpOp::Lt,
            TokenKind::Le => CmpOp::Le,
            TokenKind::Gt => CmpOp::Gt,
            TokenKind::Ge => CmpOp::Ge,
            TokenKind::In => CmpOp::In,
            TokenKind::Not if self.peek_nth(1) == &TokenKind::In => CmpOp::NotIn,
            TokenKind::Is if self.peek_nth(1) == &TokenKind::Not => CmpOp::IsNot,
            TokenKind::Is => CmpOp::Is,
            _ => return None,
        })
    }

    /// `sign_expr := ('-' | '+') sign_expr | postfix`
    fn sign_expr(&mut self) -> Result<Expr, ParseError> {
        let negate = match self.peek() {
            TokenKind::Minus => true,
            TokenKind::Plus => false,
            _ => return self.postfix(),
        };
        let at = self.here();
        self.enter()?;
        self.advance();
        let operand = self.sign_expr()?;
        self.leave(1);
        Ok(fold_sign(negate, operand, at))
    }

    /// `postfix := atom ('[' or_expr ']' | '(' arguments ')')*`
    fn postfix(&mut self) -> Result<Expr, ParseError> {
        let callee = match self.peek() {
            TokenKind::Name(name) if self.peek_nth(1) == &TokenKind::LParen => {
                Some(Function::from_name(name))
            }
            _ => None,
        };
        let mut expr = match callee {
            Some(function) => {
                // Runtime errors of the call point at the function name.
                let at = self.here();
                self.advance();
                self.call(function, at)?
            }
            None => self.atom()?,
        };
        // Errors abandon the parse, so only the success path needs to restore the depth.
        let mut levels = 0;
        loop {
            match self.peek() {
                TokenKind::LBracket => {
                    let at = self.here();
                    levels += 1;
                    self.enter()?;
                    self.advance();
                    let index = self.or_expr()?;
                    self.expect(&TokenKind::RBracket, "`]`")?;
                    expr = Expr::Subscript {
                        target: Box::new(expr),
                        index: Box::new(index),
                        at,
                    };
                }
                TokenKind::LParen => {
                    return Err(self.unsupported(
                        "only the built-in functions int, str, float, len and bool can be called",
                    ));
                }
                _ => break,
            }
        }
        self.leave(levels);
        Ok(expr)
    }

    /// Parses `(args)` after a function name; the next token is `(`.
    fn call(&mut self, function: Function, at: Offset) -> Result<Expr, ParseError> {
        self.enter()?;
        self.advance();
        let args = self.elements(&TokenKind::RParen, "`,` or `)`")?;
        self.leave(1);
        Ok(Expr::Call {
            function,
            args: args.into(),
            at,
        })
    }

    /// Comma-separated expressions up to `close` (consumed); a trailing comma is allowed.
    fn elements(
        &mut self,
        close: &TokenKind,
        expected: &'static str,
    ) -> Result<Vec<Expr>, ParseError> {
        let mut items = Vec::new();
        loop {
            if self.eat(close) {
                return Ok(items);
            }
            items.push(self.or_expr()?);
            if self.eat(close) {
                return Ok(items);
            }
            self.expect(&TokenKind::Comma, expected)?;
        }
    }

    fn atom(&mut self) -> Result<Expr, ParseError> {
        let starts_atom = matches!(
            self.peek(),
            TokenKind::Name(_)
                | TokenKind::Int(_)
                | TokenKind::Float(_)
                | TokenKind::Str(_)
                | TokenKind::True
                | TokenKind::False
                | TokenKind::None
                | TokenKind::LBracket
                | TokenKind::LParen
        );
        if !starts_atom {
            return Err(self.expected("an expression"));
        }
        if matches!(self.peek(), TokenKind::LBracket | TokenKind::LParen) {
            return self.display();
        }
        Ok(match self.advance().kind {
            TokenKind::Name(name) => Expr::Name(name.into()),
            TokenKind::Int(value) => Expr::Const(Const::Int(value)),
            TokenKind::Float(value) => Expr::Const(Const::Float(value)),
            TokenKind::True => Expr::Const(Const::Bool(true)),
            TokenKind::False => Expr::Const(Const::Bool(false)),
            TokenKind::None => Expr::Const(Const::None),
            TokenKind::Str(mut value) => {
                // Adjacent string literals concatenate, as in Python.
                while let TokenKind::Str(more) = self.peek() {
                    value.push_str(more);
                    self.advance();
                }
                Expr::Const(Const::Str(value.into()))
            }
            // Excluded by `starts_atom` or handled by `display`.
            _ => return Err(self.expected("an expression")),
        })
    }

    /// A list display, a tuple display or a parenthesized expression; the next token is
    /// `[` or `(`.
    fn display(&mut self) -> Result<Expr, ParseError> {
        self.enter()?;
        if self.advance().kind == TokenKind::LBracket {
            let items = self.elements(&TokenKind::RBracket, "`,` or `]`")?;
            self.leave(1);
            return Ok(fold_seq(SeqKind::List, items));
        }
        if self.eat(&TokenKind::RParen) {
            self.leave(1);
            return Ok(fold_seq(SeqKind::Tuple, Vec::new()));
        }
        let first = self.or_expr()?;
        if self.eat(&TokenKind::RParen) {
            self.leave(1);
            return Ok(first);
        }
        self.expect(&TokenKind::Comma, "`,` or `)`")?;
        let mut items = vec![first];
        items.extend(self.elements(&TokenKind::RParen, "`,` or `)`")?);
        self.leave(1);
        Ok(fold_seq(SeqKind::Tuple, items))
    }
}

/// Folds `-5`, `+1.5`, `-True` into constants; anything else is left to run time, where
/// `-'a'` fails only if evaluation reaches it.
fn fold_sign(negate: bool, operand: Expr, at: Offset) -> Expr {
    let folded = match &operand {
        Expr::Const(Const::Int(i)) => Some(if negate {
            i.checked_neg().map(Const::Int)
        } else {
            Some(Const::Int(*i))
        }),
        Expr::Const(Const::Bool(b)) => {
            let i = i128::from(*b);
            Some(Some(Const::Int(if negate { -i } else { i })))
        }
        Expr::Const(Const::Float(f)) => Some(Some(Const::Float(if negate { -f } else { *f }))),
        _ => None,
    };
    match folded.flatten() {
        Some(constant) => Expr::Const(constant),
        None => Expr::Sign {
            negate,
            operand: Box::new(operand),
            at,
        },
    }
}

/// A list or tuple display made only of constants becomes one constant, indexed for
/// membership tests.
fn fold_seq(kind: SeqKind, items: Vec<Expr>) -> Expr {
    if items.iter().all(|e| matches!(e, Expr::Const(_))) {
        let constants = items
            .into_iter()
            .filter_map(|e| match e {
                Expr::Const(c) => Some(c),
                _ => None,
            })
            .collect();
        Expr::Const(Const::Seq(Box::new(ConstSeq::new(kind, constants))))
    } else {
        Expr::Seq(kind, items.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ast::Membership;

    #[test]
    fn literal_lists_fold_into_indexed_constants() {
        let Ok(Expr::Compare { rest, .. }) = parse("p in ['ZJ', 'JS', 'TJ', 'JS']") else {
            panic!("not a comparison");
        };
        let Expr::Const(Const::Seq(seq)) = &rest[0].right else {
            panic!("list not folded: {:?}", rest[0].right);
        };
        assert_eq!(seq.items.len(), 4);
        assert_eq!(
            seq.index,
            Membership::Strs(vec!["JS".into(), "TJ".into(), "ZJ".into()].into())
        );
    }

    #[test]
    fn precedence_and_chains() {
        let Ok(Expr::Or(operands)) = parse("a or b and not c == 1 < d") else {
            panic!("expected or");
        };
        assert_eq!(operands.len(), 2);
        let Expr::And(conjuncts) = &operands[1] else {
            panic!("expected and")
        };
        let Expr::Not(negated) = &conjuncts[1] else {
            panic!("expected not")
        };
        assert!(matches!(&**negated, Expr::Compare { rest, .. } if rest.len() == 2));
    }

    #[test]
    fn negative_literals_fold() {
        assert_eq!(parse("-3").ok(), Some(Expr::Const(Const::Int(-3))));
        assert_eq!(parse("--3").ok(), Some(Expr::Const(Const::Int(3))));
        assert_eq!(parse("-1.5").ok(), Some(Expr::Const(Const::Float(-1.5))));
    }
}
