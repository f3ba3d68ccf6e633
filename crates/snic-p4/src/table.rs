//! Match-action tables: the entry store and lookup for every P4 match kind.
//!
//! Keys are a list of fields, each at most 128 bits wide, given as `u128` values.
//! (skeleton: types shared by the executor, the entries parser and the runtime; the structure
//! behind `Table` is being written)

/// A key field's match kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MatchKind {
    /// `exact`
    Exact,
    /// `ternary`
    Ternary,
    /// `lpm`
    Lpm,
    /// `range`
    Range,
    /// `optional` (exact or wildcard)
    Optional,
}

/// How one key field of an entry matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FieldMatch {
    /// Equal to the value.
    Exact(u128),
    /// `key & mask == value & mask`.
    Ternary {
        /// The value.
        value: u128,
        /// The mask.
        mask: u128,
    },
    /// The top `len` bits (of the field's width) equal the value's.
    Lpm {
        /// The value.
        value: u128,
        /// The prefix length, 0..=width.
        len: u32,
    },
    /// `lo <= key <= hi`.
    Range {
        /// Lowest value matched.
        lo: u128,
        /// Highest value matched.
        hi: u128,
    },
    /// `optional`: `Some(v)` matches `v` only, `None` matches anything.
    Optional(Option<u128>),
}
