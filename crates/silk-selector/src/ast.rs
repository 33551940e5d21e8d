//! The compiled form of a selector: an expression tree in which literal values, and lists
//! and tuples made only of literals, are already folded into constants.
//!
//! The tree is built once by the parser and then only read; it must stay free of interior
//! mutability and reference counting so that a `Selector` is `Send + Sync` and can be
//! shared between router threads. Nodes that can fail at run time carry the byte offset of
//! their operator so errors can name a column.

/// Byte offset into the selector source.
pub(crate) type Offset = u32;

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Expr {
    /// A literal, or a list or tuple of literals.
    Const(Const),
    /// A top-level key of the task; a missing key is `None`.
    Name(Box<str>),
    /// A list or tuple display with at least one non-constant element.
    Seq(SeqKind, Box<[Expr]>),
    Not(Box<Expr>),
    /// Unary `-` (`negate`) or `+` on a non-literal operand.
    Sign {
        negate: bool,
        operand: Box<Expr>,
        at: Offset,
    },
    /// `a and b and c`: returns the first falsy operand, or the last one.
    And(Box<[Expr]>),
    /// `a or b or c`: returns the first truthy operand, or the last one.
    Or(Box<[Expr]>),
    /// `a < b <= c`: each operand evaluated at most once, short-circuiting.
    Compare {
        first: Box<Expr>,
        rest: Box<[Comparison]>,
    },
    Subscript {
        target: Box<Expr>,
        index: Box<Expr>,
        at: Offset,
    },
    Call {
        function: Function,
        args: Box<[Expr]>,
        at: Offset,
    },
}

/// One link of a comparison chain: the operator and its right-hand operand.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Comparison {
    pub(crate) op: CmpOp,
    pub(crate) at: Offset,
    pub(crate) right: Expr,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    In,
    NotIn,
    Is,
    IsNot,
}

impl CmpOp {
    pub(crate) fn symbol(self) -> &'static str {
        match self {
            CmpOp::Eq => "==",
            CmpOp::Ne => "!=",
            CmpOp::Lt => "<",
            CmpOp::Le => "<=",
            CmpOp::Gt => ">",
            CmpOp::Ge => ">=",
            CmpOp::In => "in",
            CmpOp::NotIn => "not in",
            CmpOp::Is => "is",
            CmpOp::IsNot => "is not",
        }
    }
}

/// The callable built-ins. Calls to any other name parse (Python would only fail when
/// the call runs, and short-circuiting may skip it) and fail at evaluation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Function {
    Int,
    Str,
    Float,
    Len,
    Bool,
    Unknown(Box<str>),
}

impl Function {
    pub(crate) fn from_name(name: &str) -> Function {
        match name {
            "int" => Function::Int,
            "str" => Function::Str,
            "float" => Function::Float,
            "len" => Function::Len,
            "bool" => Function::Bool,
            other => Function::Unknown(other.into()),
        }
    }
}

/// Whether a sequence is a list or a tuple: Python never considers the two equal and
/// refuses to order one against the other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SeqKind {
    List,
    Tuple,
}

impl SeqKind {
    pub(crate) fn type_name(self) -> &'static str {
        match self {
            SeqKind::List => "list",
            SeqKind::Tuple => "tuple",
        }
    }
}

/// A value known when the selector is compiled.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Const {
    None,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(Box<str>),
    Seq(Box<ConstSeq>),
}

/// A list or tuple of constants, with an index that makes `x in [...]` a binary search
/// when the elements are all strings or all integers.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ConstSeq {
    pub(crate) kind: SeqKind,
    pub(crate) items: Box<[Const]>,
    pub(crate) index: Membership,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Membership {
    /// Mixed element types: membership compares element by element.
    Scan,
    /// Every element is a string; sorted and deduplicated.
    Strs(Box<[Box<str>]>),
    /// Every element is an int (not a bool); sorted and deduplicated.
    Ints(Box<[i128]>),
}

impl ConstSeq {
    pub(crate) fn new(kind: SeqKind, items: Vec<Const>) -> ConstSeq {
        let index = if !items.is_empty() && items.iter().all(|c| matches!(c, Const::Str(_))) {
            let mut strs: Vec<Box<str>> = items
                .iter()
                .filter_map(|c| match c {
                    Const::Str(s) => Some(s.clone()),
                    _ => None,
                })
                .collect();
            strs.sort_unstable();
            strs.dedup();
            Membership::Strs(strs.into())
        } else if !items.is_empty() && items.iter().all(|c| matches!(c, Const::Int(_))) {
            let mut ints: Vec<i128> = items
                .iter()
                .filter_map(|c| match c {
                    Const::Int(i) => Some(*i),
                    _ => None,
                })
                .collect();
            ints.sort_unstable();
            ints.dedup();
            Membership::Ints(ints.into())
        } else {
            Membership::Scan
        };
        ConstSeq {
            kind,
            items: items.into(),
            index,
        }
    }
}
