//! The evaluator: walks a compiled expression against one task.
//!
//! It must not allocate for the common shapes of selector (names compared with literals,
//! membership in literal lists, `and`/`or`/`not`), must not mutate anything, and must not
//! recurse deeper than the tree the parser built (which [`crate::MAX_DEPTH`] bounds). In a
//! boolean context (the selector itself, operands of `and`/`or`/`not`) it computes truth
//! values directly instead of materialising the operands Python would return.

use serde_json::{Map, Value};

use std::borrow::Cow;

use crate::ast::{Comparison, Expr, Function, Offset};
use crate::builtins::{self, CallError, truncate};
use crate::error::{EvalError, Position};
use crate::value::{self, MAX_VALUE_DEPTH, OpError, Seq, Val};

pub(crate) struct Evaluator<'a> {
    /// The task's top-level keys; `None` when the task is not a JSON object, in which
    /// case every name is missing.
    fields: Option<&'a Map<String, Value>>,
    /// The selector source, for turning offsets into positions in errors.
    source: &'a str,
}

/// The hot paths box their error so that results stay small (a `Val` and a tag); `?`
/// boxes the plain errors of the cold paths.
type EvalResult<T> = Result<T, Box<EvalError>>;
type ColdResult<T> = Result<T, EvalError>;

impl<'a> Evaluator<'a> {
    pub(crate) fn new(task: &'a Value, source: &'a str) -> Self {
        Evaluator {
            fields: task.as_object(),
            source,
        }
    }

    /// The task's value for `name`. Tasks are small objects, where a scan comparing
    /// lengths first beats the map's ordered search (which `memcmp`s every key it passes);
    /// large objects use the map's own lookup.
    fn lookup(&self, name: &str) -> Option<&'a Value> {
        const SCAN_MAX_KEYS: usize = 16;
        let fields = self.fields?;
        if fields.len() > SCAN_MAX_KEYS {
            return fields.get(name);
        }
        fields
            .iter()
            .find(|(key, _)| key.len() == name.len() && key.as_str() == name)
            .map(|(_, value)| value)
    }

    fn position(&self, at: Offset) -> Position {
        Position::at(self.source, usize::try_from(at).unwrap_or(usize::MAX))
    }

    fn op_error(&self, at: Offset, error: OpError) -> EvalError {
        let pos = self.position(at);
        match error {
            OpError::Type(message) => EvalError::Type { pos, message },
            OpError::TooDeep => EvalError::TooDeep {
                pos,
                limit: MAX_VALUE_DEPTH,
            },
        }
    }

    /// The truth value of `expr`, as `bool(expr)` would give it.
    pub(crate) fn truth(&self, expr: &'a Expr) -> EvalResult<bool> {
        match expr {
            Expr::And(operands) => {
                for operand in operands.iter() {
                    if !self.truth(operand)? {
                        return Ok(false);
                    }
                }
                Ok(true)
            }
            Expr::Or(operands) => {
                for operand in operands.iter() {
                    if self.truth(operand)? {
                        return Ok(true);
                    }
                }
                Ok(false)
            }
            Expr::Not(operand) => Ok(!self.truth(operand)?),
            Expr::Compare { first, rest } => self.compare_chain(first, rest),
            other => Ok(self.value(other)?.truthy()),
        }
    }

    /// The value of `expr`, as Python would compute it.
    fn value(&self, expr: &'a Expr) -> EvalResult<Val<'a>> {
        match expr {
            Expr::Const(constant) => Ok(Val::from_const(constant)),
            Expr::Name(name) => Ok(self.lookup(name).map_or(Val::None, Val::from_json)),
            Expr::Seq(kind, items) => {
                let items = items
                    .iter()
                    .map(|item| self.value(item))
                    .collect::<EvalResult<Vec<_>>>()?;
                Ok(Val::Seq(Seq::Owned(*kind, items)))
            }
            Expr::Not(operand) => Ok(Val::Bool(!self.truth(operand)?)),
            Expr::Sign {
                negate,
                operand,
                at,
            } => Ok(self.sign(*negate, self.value(operand)?, *at)?),
            // `and`/`or` return the deciding operand, not a bool.
            Expr::And(operands) => self.short_circuit(operands, false),
            Expr::Or(operands) => self.short_circuit(operands, true),
            Expr::Compare { first, rest } => Ok(Val::Bool(self.compare_chain(first, rest)?)),
            Expr::Subscript { target, index, at } => {
                let target = self.value(target)?;
                let index = self.value(index)?;
                Ok(self.subscript(target, &index, *at)?)
            }
            Expr::Call { function, args, at } => self.call(function, args, *at),
        }
    }

    /// `and` (stop at the first falsy operand) or `or` (stop at the first truthy one).
    fn short_circuit(&self, operands: &'a [Expr], stop_when: bool) -> EvalResult<Val<'a>> {
        let Some((last, init)) = operands.split_last() else {
            return Ok(Val::None);
        };
        for operand in init {
            let value = self.value(operand)?;
            if value.truthy() == stop_when {
                return Ok(value);
            }
        }
        self.value(last)
    }

    /// `a op1 b op2 c …` is `a op1 b and b op2 c …` with `b` evaluated once.
    fn compare_chain(&self, first: &'a Expr, rest: &'a [Comparison]) -> EvalResult<bool> {
        let mut left = self.value(first)?;
        for link in rest {
            let right = self.value(&link.right)?;
            if !value::compare(link.op, &left, &right).map_err(|e| self.op_error(link.at, e))? {
                return Ok(false);
            }
            left = right;
        }
        Ok(true)
    }

    fn sign(&self, negate: bool, operand: Val<'a>, at: Offset) -> ColdResult<Val<'a>> {
        let result = match operand {
            Val::Bool(b) => Some(Val::Int(i128::from(b))),
            Val::Int(i) => Some(Val::Int(i)),
            Val::Float(f) => Some(Val::Float(f)),
            _ => None,
        };
        let Some(number) = result else {
            return Err(EvalError::Type {
                pos: self.position(at),
                message: format!(
                    "bad operand type for unary {}: '{}'",
                    if negate { '-' } else { '+' },
                    operand.type_name()
                ),
            });
        };
        if !negate {
            return Ok(number);
        }
        match number {
            Val::Int(i) => i
                .checked_neg()
                .map(Val::Int)
                .ok_or_else(|| EvalError::Overflow {
                    pos: self.position(at),
                    message: "negation does not fit in 128 bits".to_owned(),
                }),
            Val::Float(f) => Ok(Val::Float(-f)),
            other => Ok(other),
        }
    }

    fn subscript(&self, target: Val<'a>, index: &Val<'a>, at: Offset) -> ColdResult<Val<'a>> {
        let type_error = |message: String| EvalError::Type {
            pos: self.position(at),
            message,
        };
        match target {
            Val::Dict(map) => match index {
                Val::Str(key) => map.get(key.as_ref()).map(Val::from_json).ok_or_else(|| {
                    EvalError::KeyNotFound {
                        pos: self.position(at),
                        key: builtins::str_repr(&truncate(key, 100)),
                    }
                }),
                other if !other.hashable(0).map_err(|e| self.op_error(at, e))? => {
                    Err(self.op_error(at, value::unhashable(other)))
                }
                other => {
                    let mut key = String::new();
                    builtins::write_repr(&mut key, other, 0).map_err(|e| self.op_error(at, e))?;
                    Err(EvalError::KeyNotFound {
                        pos: self.position(at),
                        key: truncate(&key, 100).into_owned(),
                    })
                }
            },
            Val::Seq(seq) => {
                let type_name = seq.kind().type_name();
                let i = self.index(index, type_name, at)?;
                let len = seq.len();
                let slot = resolve_index(i, len).ok_or(EvalError::IndexOutOfRange {
                    pos: self.position(at),
                    index: i,
                    type_name,
                    len,
                })?;
                seq.into_item(slot).ok_or(EvalError::IndexOutOfRange {
                    pos: self.position(at),
                    index: i,
                    type_name,
                    len,
                })
            }
            Val::Str(s) => {
                let i = self.index(index, "str", at)?;
                let len = s.chars().count();
                let out_of_range = EvalError::IndexOutOfRange {
                    pos: self.position(at),
                    index: i,
                    type_name: "str",
                    len,
                };
                let slot = resolve_index(i, len).ok_or_else(|| out_of_range.clone())?;
                let (start, c) = s.char_indices().nth(slot).ok_or(out_of_range)?;
                let end = start + c.len_utf8();
                Ok(Val::Str(match s {
                    Cow::Borrowed(b) => Cow::Borrowed(&b[start..end]),
                    Cow::Owned(o) => Cow::Owned(o[start..end].to_owned()),
                }))
            }
            other => Err(type_error(format!(
                "'{}' object is not subscriptable",
                other.type_name()
            ))),
        }
    }

    /// An index for a list, tuple or string: an int or a bool.
    fn index(&self, index: &Val<'_>, type_name: &str, at: Offset) -> ColdResult<i128> {
        match index {
            Val::Int(i) => Ok(*i),
            Val::Bool(b) => Ok(i128::from(*b)),
            other => Err(EvalError::Type {
                pos: self.position(at),
                message: format!(
                    "{type_name} indices must be integers, not '{}'",
                    other.type_name()
                ),
            }),
        }
    }

    fn call(&self, function: &'a Function, args: &'a [Expr], at: Offset) -> EvalResult<Val<'a>> {
        // Python looks the function up before evaluating its arguments.
        let run: for<'v> fn(&mut [Val<'v>]) -> Result<Val<'v>, CallError> = match function {
            Function::Int => builtins::int,
            Function::Str => builtins::str,
            Function::Float => builtins::float,
            Function::Len => builtins::len,
            Function::Bool => builtins::bool,
            Function::Unknown(name) => {
                return Err(Box::new(EvalError::UnknownFunction {
                    pos: self.position(at),
                    name: name.to_string(),
                }));
            }
        };
        // Built-ins take at most two arguments, so three slots on the stack are enough
        // to produce every arity error; the real count is patched in.
        let mut values = [Val::None, Val::None, Val::None];
        let mut count = 0;
        for arg in args {
            let value = self.value(arg)?;
            if let Some(slot) = values.get_mut(count) {
                *slot = value;
            }
            count += 1;
        }
        let given = count.min(values.len());
        let result = run(&mut values[..given]).map_err(|e| match e {
            CallError::Arity {
                function, expected, ..
            } => CallError::Arity {
                function,
                expected,
                found: count,
            },
            other => other,
        });
        result.map_err(|e| Box::new(self.call_error(at, e)))
    }

    fn call_error(&self, at: Offset, error: CallError) -> EvalError {
        let pos = self.position(at);
        match error {
            CallError::Type(message) => EvalError::Type { pos, message },
            CallError::Value(message) => EvalError::Value { pos, message },
            CallError::Overflow(message) => EvalError::Overflow { pos, message },
            CallError::Arity {
                function,
                expected,
                found,
            } => EvalError::Arity {
                pos,
                function,
                expected,
                found,
            },
            CallError::TooDeep => EvalError::TooDeep {
                pos,
                limit: MAX_VALUE_DEPTH,
            },
        }
    }
}

/// Maps a Python index (negative counts from the end) to a slot, if in range.
fn resolve_index(i: i128, len: usize) -> Option<usize> {
    let len_i = i128::try_from(len).ok()?;
    let slot = if i < 0 { i + len_i } else { i };
    if (0..len_i).contains(&slot) {
        usize::try_from(slot).ok()
    } else {
        None
    }
}
