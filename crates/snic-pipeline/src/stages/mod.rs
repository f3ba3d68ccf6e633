//! The built-in stages: `parse`, `classify`, `l2fwd` and `tap`.

pub mod classify;
pub mod l2fwd;
pub mod parse;
pub mod tap;

pub use classify::Classify;
pub use l2fwd::{L2Fwd, L2Mode, MacTable};
pub use parse::Parse;
pub use tap::Tap;
