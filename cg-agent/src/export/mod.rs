//! Outputs: writers that turn a [`Report`](crate::report::Report) into bytes for people
//! (the summary on stderr) and for programs (JSON). They only read the report model.

pub mod json;
pub mod summary;
