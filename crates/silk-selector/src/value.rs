//! The evaluator's values, and Python's rules for them: truthiness, equality, ordering
//! and membership.
//!
//! A [`Val`] borrows from the task JSON and from the compiled selector wherever it can, so
//! evaluating a typical selector allocates nothing. This module must not allocate on the
//! success path of comparisons and membership tests, and must not recurse into nested task
//! values past [`MAX_VALUE_DEPTH`] (task JSON may be deeper than the stack allows).

use std::borrow::Cow;
use std::cmp::Ordering;

use serde_json::{Map, Value};

use crate::ast::{CmpOp, Const, ConstSeq, Membership, SeqKind};

/// How deeply comparisons and `str()` follow nested lists and dicts of a task.
pub(crate) const MAX_VALUE_DEPTH: usize = 128;

/// A Python value during evaluation.
#[derive(Debug, Clone)]
pub(crate) enum Val<'a> {
    None,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(Cow<'a, str>),
    Seq(Seq<'a>),
    Dict(&'a Map<String, Value>),
}

/// A list or tuple, wherever its elements live.
#[derive(Debug, Clone)]
pub(crate) enum Seq<'a> {
    /// A JSON array of the task (always a list).
    Json(&'a [Value]),
    /// A folded literal of the selector.
    Const(&'a ConstSeq),
    /// A view of an [`Seq::Owned`] sequence.
    Borrowed(SeqKind, &'a [Val<'a>]),
    /// Built at run time by a list or tuple display with non-constant elements.
    Owned(SeqKind, Vec<Val<'a>>),
}

/// Why an operation on values failed; the evaluator adds the position.
#[derive(Debug)]
pub(crate) enum OpError {
    Type(String),
    TooDeep,
}

type OpResult<T> = Result<T, OpError>;

impl<'a> Val<'a> {
    pub(crate) fn from_json(value: &'a Value) -> Val<'a> {
        match value {
            Value::Null => Val::None,
            Value::Bool(b) => Val::Bool(*b),
            Value::Number(n) => match (n.as_i64(), n.as_u64()) {
                (Some(i), _) => Val::Int(i128::from(i)),
                (None, Some(u)) => Val::Int(i128::from(u)),
                // Not an integer: serde_json always has an f64 for it.
                (None, None) => Val::Float(n.as_f64().unwrap_or(f64::NAN)),
            },
            Value::String(s) => Val::Str(Cow::Borrowed(s)),
            Value::Array(items) => Val::Seq(Seq::Json(items)),
            Value::Object(map) => Val::Dict(map),
        }
    }

    pub(crate) fn from_const(constant: &'a Const) -> Val<'a> {
        match constant {
            Const::None => Val::None,
            Const::Bool(b) => Val::Bool(*b),
            Const::Int(i) => Val::Int(*i),
            Const::Float(f) => Val::Float(*f),
            Const::Str(s) => Val::Str(Cow::Borrowed(s)),
            Const::Seq(seq) => Val::Seq(Seq::Const(seq)),
        }
    }

    /// A cheap copy that borrows from `self` instead of cloning owned parts.
    pub(crate) fn view(&self) -> Val<'_> {
        match self {
            Val::None => Val::None,
            Val::Bool(b) => Val::Bool(*b),
            Val::Int(i) => Val::Int(*i),
            Val::Float(f) => Val::Float(*f),
            Val::Str(s) => Val::Str(Cow::Borrowed(s)),
            Val::Seq(seq) => Val::Seq(seq.view()),
            Val::Dict(map) => Val::Dict(map),
        }
    }

    /// Python's name for the value's type, as used in its error messages.
    pub(crate) fn type_name(&self) -> &'static str {
        match self {
            Val::None => "NoneType",
            Val::Bool(_) => "bool",
            Val::Int(_) => "int",
            Val::Float(_) => "float",
            Val::Str(_) => "str",
            Val::Seq(seq) => seq.kind().type_name(),
            Val::Dict(_) => "dict",
        }
    }

    /// Python's truthiness: `None`, `False`, zero and empty containers are false.
    pub(crate) fn truthy(&self) -> bool {
        match self {
            Val::None => false,
            Val::Bool(b) => *b,
            Val::Int(i) => *i != 0,
            Val::Float(f) => *f != 0.0,
            Val::Str(s) => !s.is_empty(),
            Val::Seq(seq) => seq.len() != 0,
            Val::Dict(map) => !map.is_empty(),
        }
    }

    /// Whether Python could hash the value (use it as a dict key): lists and dicts, and
    /// tuples containing them, cannot.
    pub(crate) fn hashable(&self, depth: usize) -> OpResult<bool> {
        match self {
            Val::Seq(seq) if seq.kind() == SeqKind::Tuple => {
                let depth = deeper(depth)?;
                for item in seq.items() {
                    if !item.hashable(depth)? {
                        return Ok(false);
                    }
                }
                Ok(true)
            }
            Val::Seq(_) | Val::Dict(_) => Ok(false),
            _ => Ok(true),
        }
    }

    fn number(&self) -> Option<Num> {
        match self {
            Val::Bool(b) => Some(Num::Int(i128::from(*b))),
            Val::Int(i) => Some(Num::Int(*i)),
            Val::Float(f) => Some(Num::Float(*f)),
            _ => None,
        }
    }
}

impl<'a> Seq<'a> {
    pub(crate) fn kind(&self) -> SeqKind {
        match self {
            Seq::Json(_) => SeqKind::List,
            Seq::Const(seq) => seq.kind,
            Seq::Borrowed(kind, _) | Seq::Owned(kind, _) => *kind,
        }
    }

    pub(crate) fn len(&self) -> usize {
        match self {
            Seq::Json(items) => items.len(),
            Seq::Const(seq) => seq.items.len(),
            Seq::Borrowed(_, items) => items.len(),
            Seq::Owned(_, items) => items.len(),
        }
    }

    pub(crate) fn get(&self, i: usize) -> Option<Val<'_>> {
        match self {
            Seq::Json(items) => items.get(i).map(Val::from_json),
            Seq::Const(seq) => seq.items.get(i).map(Val::from_const),
            Seq::Borrowed(_, items) => items.get(i).map(Val::view),
            Seq::Owned(_, items) => items.get(i).map(Val::view),
        }
    }

    /// Element `i`, consuming the sequence so that owned elements move out.
    pub(crate) fn into_item(self, i: usize) -> Option<Val<'a>> {
        match self {
            Seq::Json(items) => items.get(i).map(Val::from_json),
            Seq::Const(seq) => seq.items.get(i).map(Val::from_const),
            Seq::Borrowed(_, items) => items.get(i).map(Val::view),
            Seq::Owned(_, items) => items.into_iter().nth(i),
        }
    }

    fn view(&self) -> Seq<'_> {
        match self {
            Seq::Json(items) => Seq::Json(items),
            Seq::Const(seq) => Seq::Const(seq),
            Seq::Borrowed(kind, items) => Seq::Borrowed(*kind, items),
            Seq::Owned(kind, items) => Seq::Borrowed(*kind, items),
        }
    }

    pub(crate) fn items(&self) -> impl Iterator<Item = Val<'_>> {
        (0..self.len()).filter_map(move |i| self.get(i))
    }
}

#[derive(Debug, Clone, Copy)]
enum Num {
    Int(i128),
    Float(f64),
}

fn compare_numbers(a: Num, b: Num) -> Option<Ordering> {
    match (a, b) {
        (Num::Int(a), Num::Int(b)) => Some(a.cmp(&b)),
        (Num::Float(a), Num::Float(b)) => a.partial_cmp(&b),
        (Num::Int(a), Num::Float(b)) => compare_int_float(a, b),
        (Num::Float(a), Num::Int(b)) => compare_int_float(b, a).map(Ordering::reverse),
    }
}

/// 2^127: every i128 is below it, and every float at or above it is above every i128.
const TWO_POW_127: f64 = 170_141_183_460_469_231_731_687_303_715_884_105_728.0;

/// The integer equal to `f`, if there is one in range.
pub(crate) fn exact_int(f: f64) -> Option<i128> {
    // Inside [-2^127, 2^127) and integral, so `as` is exact.
    (f.fract() == 0.0 && (-TWO_POW_127..TWO_POW_127).contains(&f)).then_some(f as i128)
}

/// Compares an int with a float exactly, as Python does (`2**53 + 1 != 2.0**53`), rather
/// than by converting the int to a float. `None` when `f` is NaN.
fn compare_int_float(i: i128, f: f64) -> Option<Ordering> {
    if f.is_nan() {
        return None;
    }
    if f >= TWO_POW_127 {
        return Some(Ordering::Less);
    }
    if f < -TWO_POW_127 {
        return Some(Ordering::Greater);
    }
    let whole = f.trunc();
    // In range and integral, so the conversion is exact.
    let whole_int = whole as i128;
    Some(i.cmp(&whole_int).then_with(|| {
        let fraction = f - whole;
        if fraction > 0.0 {
            Ordering::Less
        } else if fraction < 0.0 {
            Ordering::Greater
        } else {
            Ordering::Equal
        }
    }))
}

/// Python's `==`. Values of unrelated types are simply unequal.
pub(crate) fn equal(a: &Val<'_>, b: &Val<'_>, depth: usize) -> OpResult<bool> {
    Ok(match (a, b) {
        (Val::Str(a), Val::Str(b)) => a == b,
        (Val::None, Val::None) => true,
        (Val::Seq(a), Val::Seq(b)) => {
            if a.kind() != b.kind() || a.len() != b.len() {
                return Ok(false);
            }
            let depth = deeper(depth)?;
            for (x, y) in a.items().zip(b.items()) {
                if !equal(&x, &y, depth)? {
                    return Ok(false);
                }
            }
            true
        }
        (Val::Dict(a), Val::Dict(b)) => {
            if a.len() != b.len() {
                return Ok(false);
            }
            let depth = deeper(depth)?;
            for (key, x) in a.iter() {
                let Some(y) = b.get(key) else {
                    return Ok(false);
                };
                if !equal(&Val::from_json(x), &Val::from_json(y), depth)? {
                    return Ok(false);
                }
            }
            true
        }
        _ => match (a.number(), b.number()) {
            (Some(x), Some(y)) => compare_numbers(x, y) == Some(Ordering::Equal),
            _ => false,
        },
    })
}

fn deeper(depth: usize) -> OpResult<usize> {
    if depth >= MAX_VALUE_DEPTH {
        Err(OpError::TooDeep)
    } else {
        Ok(depth + 1)
    }
}

/// Applies one comparison operator with Python's semantics.
pub(crate) fn compare(op: CmpOp, a: &Val<'_>, b: &Val<'_>) -> OpResult<bool> {
    match op {
        CmpOp::Eq => equal(a, b, 0),
        CmpOp::Ne => equal(a, b, 0).map(|eq| !eq),
        CmpOp::Lt | CmpOp::Le | CmpOp::Gt | CmpOp::Ge => order(op, a, b, 0),
        CmpOp::In => contains(b, a),
        CmpOp::NotIn => contains(b, a).map(|found| !found),
        CmpOp::Is => Ok(identical(a, b)),
        CmpOp::IsNot => Ok(!identical(a, b)),
    }
}

/// `is` is only meaningful for the singletons `None`, `True` and `False`; any other pair
/// is "not identical" (selectors have no object identity to speak of).
fn identical(a: &Val<'_>, b: &Val<'_>) -> bool {
    match (a, b) {
        (Val::None, Val::None) => true,
        (Val::Bool(x), Val::Bool(y)) => x == y,
        _ => false,
    }
}

fn order(op: CmpOp, a: &Val<'_>, b: &Val<'_>, depth: usize) -> OpResult<bool> {
    let ordering = match (a, b) {
        (Val::Str(x), Val::Str(y)) => Some(x.as_ref().cmp(y.as_ref())),
        (Val::Seq(x), Val::Seq(y)) if x.kind() == y.kind() => {
            let depth = deeper(depth)?;
            // Lexicographic: the first unequal pair decides, else the lengths do.
            for (p, q) in x.items().zip(y.items()) {
                if !equal(&p, &q, depth)? {
                    return order(op, &p, &q, depth);
                }
            }
            Some(x.len().cmp(&y.len()))
        }
        _ => match (a.number(), b.number()) {
            (Some(x), Some(y)) => compare_numbers(x, y),
            _ => {
                return Err(OpError::Type(format!(
                    "'{}' not supported between instances of '{}' and '{}'",
                    op.symbol(),
                    a.type_name(),
                    b.type_name()
                )));
            }
        },
    };
    // NaN compares false with everything.
    Ok(ordering.is_some_and(|o| match op {
        CmpOp::Lt => o == Ordering::Less,
        CmpOp::Le => o != Ordering::Greater,
        CmpOp::Gt => o == Ordering::Greater,
        _ => o != Ordering::Less,
    }))
}

/// Python's `needle in container`.
pub(crate) fn contains(container: &Val<'_>, needle: &Val<'_>) -> OpResult<bool> {
    match container {
        Val::Seq(Seq::Const(seq)) => contains_const(seq, needle),
        Val::Seq(seq) => {
            for item in seq.items() {
                if equal(&item, needle, 0)? {
                    return Ok(true);
                }
            }
            Ok(false)
        }
        Val::Str(haystack) => match needle {
            Val::Str(n) => Ok(haystack.contains(n.as_ref())),
            other => Err(OpError::Type(format!(
                "'in <string>' requires string as left operand, not {}",
                other.type_name()
            ))),
        },
        Val::Dict(map) => match needle {
            Val::Str(key) => Ok(map.contains_key(key.as_ref())),
            // JSON keys are strings, so no other hashable value is a key.
            other if other.hashable(0)? => Ok(false),
            other => Err(unhashable(other)),
        },
        other => Err(OpError::Type(format!(
            "argument of type '{}' is not iterable",
            other.type_name()
        ))),
    }
}

pub(crate) fn unhashable(value: &Val<'_>) -> OpError {
    let type_name = match value {
        // A tuple is unhashable because of what it holds.
        Val::Seq(seq) if seq.kind() == SeqKind::Tuple => seq
            .items()
            .find(|item| !item.hashable(0).unwrap_or(true))
            .map_or("tuple", |item| item.type_name()),
        other => other.type_name(),
    };
    OpError::Type(format!("unhashable type: '{type_name}'"))
}

fn contains_const(seq: &ConstSeq, needle: &Val<'_>) -> OpResult<bool> {
    match &seq.index {
        // A string equals only a string.
        Membership::Strs(strs) => Ok(match needle {
            Val::Str(s) => strs
                .binary_search_by(|probe| probe.as_ref().cmp(s.as_ref()))
                .is_ok(),
            _ => false,
        }),
        // An int equals a bool, an int or an integral float with the same value.
        Membership::Ints(ints) => Ok(match needle {
            Val::Bool(b) => ints.binary_search(&i128::from(*b)).is_ok(),
            Val::Int(i) => ints.binary_search(i).is_ok(),
            Val::Float(f) => exact_int(*f).is_some_and(|i| ints.binary_search(&i).is_ok()),
            _ => false,
        }),
        Membership::Scan => {
            for item in seq.items.iter() {
                if equal(&Val::from_const(item), needle, 0)? {
                    return Ok(true);
                }
            }
            Ok(false)
        }
    }
}
