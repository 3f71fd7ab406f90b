//! Outputs: writers that turn a [`Report`](crate::report::Report) into bytes for people
//! (the summary on stderr, energy flamegraphs, the HTML report) and for programs (JSON, CSV,
//! folded stacks, speedscope and pprof profiles).
//! They only read the report model.

pub mod csv;
pub mod flamegraph;
pub mod folded;
pub mod functions;
pub mod html;
pub mod json;
pub mod pprof;
pub mod speedscope;
pub mod summary;
