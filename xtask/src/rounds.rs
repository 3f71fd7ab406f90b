//! What the benchmarks share to turn their rounds into figures: the median of the rounds, and a
//! report cg-trace wrote, read back as JSON.

use std::path::Path;

use anyhow::{Context, Result};
use serde_json::Value;

/// The median of a benchmark's rounds (the upper one of an even count); `v` must not be empty.
pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// A JSON file (a report cg-trace wrote), read whole.
pub(crate) fn read_json(path: &Path) -> Result<Value> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(serde_json::from_str(&text)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_rounds_ignores_their_order() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 3.0);
    }
}
