//! The Mann-Whitney U test (two-sided) on two sets of per-run figures, and medians: is one
//! run set's energy different from the other's, on a noisy machine, without assuming the
//! figures are normally distributed?
//!
//! The p-value is exact (the U statistic's distribution counted over every assignment of
//! ranks) when there are no ties and both sets hold at most [`EXACT_MAX_N`] runs; otherwise
//! it is the normal approximation with the tie correction of the variance and a continuity
//! correction of 0.5.

/// The largest set for which the exact distribution is counted (the count grows as
/// n1 x n2 x (n1 + n2); 50 x 50 takes well under a millisecond).
pub const EXACT_MAX_N: usize = 50;

/// How the p-value was computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    Exact,
    NormalApproximation,
}

impl Method {
    pub fn describe(self) -> &'static str {
        match self {
            Method::Exact => "exact",
            Method::NormalApproximation => {
                "normal approximation with tie and continuity corrections"
            }
        }
    }
}

/// A test's outcome.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MannWhitney {
    /// U of the first set (the number of pairs in which its figure is the larger, ties
    /// counting one half).
    pub u1: f64,
    /// Two-sided p-value.
    pub p_value: f64,
    pub method: Method,
}

/// The two-sided Mann-Whitney U test of `a` against `b`; `None` when a set is empty or a
/// figure is not finite.
pub fn mann_whitney(a: &[f64], b: &[f64]) -> Option<MannWhitney> {
    let (n1, n2) = (a.len(), b.len());
    if n1 == 0 || n2 == 0 || a.iter().chain(b).any(|x| !x.is_finite()) {
        return None;
    }
    // Ranks over both sets, ties getting their mean rank.
    let mut all: Vec<(f64, usize)> = a
        .iter()
        .map(|&x| (x, 0))
        .chain(b.iter().map(|&x| (x, 1)))
        .collect();
    all.sort_by(|x, y| x.0.total_cmp(&y.0));
    let n = all.len();
    let mut rank_sum_a = 0.0;
    let mut tie_term = 0.0; // sum of t^3 - t over groups of ties
    let mut i = 0;
    while i < n {
        let mut j = i;
        while j + 1 < n && all[j + 1].0 == all[i].0 {
            j += 1;
        }
        let t = (j - i + 1) as f64;
        let mean_rank = (i + j) as f64 / 2.0 + 1.0;
        rank_sum_a += mean_rank * all[i..=j].iter().filter(|(_, s)| *s == 0).count() as f64;
        tie_term += t * t * t - t;
        i = j + 1;
    }
    let (f1, f2) = (n1 as f64, n2 as f64);
    let u1 = rank_sum_a - f1 * (f1 + 1.0) / 2.0;
    let mean_u = f1 * f2 / 2.0;
    if tie_term == 0.0 && n1 <= EXACT_MAX_N && n2 <= EXACT_MAX_N {
        return Some(MannWhitney {
            u1,
            p_value: exact_p(n1, n2, u1),
            method: Method::Exact,
        });
    }
    let nf = f1 + f2;
    let variance = f1 * f2 / 12.0 * ((nf + 1.0) - tie_term / (nf * (nf - 1.0)));
    let p_value = if variance <= 0.0 {
        // Every figure is the same: no evidence of any difference.
        1.0
    } else {
        let z = ((u1 - mean_u).abs() - 0.5).max(0.0) / variance.sqrt();
        (2.0 * normal_sf(z)).min(1.0)
    };
    Some(MannWhitney {
        u1,
        p_value,
        method: Method::NormalApproximation,
    })
}

/// Exact two-sided p-value of U (no ties): counts, for every U, the rank assignments of `n1`
/// runs among `n1 + n2` that give it, then sums the tail on U's side, doubled.
fn exact_p(n1: usize, n2: usize, u1: f64) -> f64 {
    // counts[k][u]: ways of choosing k of the first m ranks such that U = u (DP over m).
    let max_u = n1 * n2;
    let mut counts = vec![vec![0f64; max_u + 1]; n1 + 1];
    counts[0][0] = 1.0;
    for m in 1..=(n1 + n2) {
        // Rank m taken by the first set adds (m - k) pairs it beats, where k is its position
        // among the first set: U counts, for each of its runs, the other set's runs below.
        for k in (1..=n1.min(m)).rev() {
            let others_below = m - k;
            if others_below > n2 {
                continue;
            }
            for u in (others_below..=max_u).rev() {
                counts[k][u] += counts[k - 1][u - others_below];
            }
        }
    }
    let dist = &counts[n1];
    let total: f64 = dist.iter().sum();
    let u = u1.round() as usize;
    let mean = max_u as f64 / 2.0;
    let tail: f64 = if (u as f64) <= mean {
        dist[..=u].iter().sum()
    } else {
        dist[u..].iter().sum()
    };
    (2.0 * tail / total).min(1.0)
}

/// P(Z > z) for a standard normal Z (Abramowitz and Stegun 7.1.26 on erfc: absolute error
/// below 1.5e-7).
fn normal_sf(z: f64) -> f64 {
    0.5 * erfc(z / std::f64::consts::SQRT_2)
}

fn erfc(x: f64) -> f64 {
    if x < 0.0 {
        return 2.0 - erfc(-x);
    }
    let t = 1.0 / (1.0 + 0.327_591_1 * x);
    let poly = t
        * (0.254_829_592
            + t * (-0.284_496_736
                + t * (1.421_413_741 + t * (-1.453_152_027 + t * 1.061_405_429))));
    poly * (-x * x).exp()
}

/// The median of finite figures (`None` for none).
pub fn median(values: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    #[test]
    fn exact_p_values_match_the_tables() {
        // Complete separation of 5 and 5: U = 0, p = 2 / C(10,5) = 2/252.
        let r = mann_whitney(&[1.0, 2.0, 3.0, 4.0, 5.0], &[6.0, 7.0, 8.0, 9.0, 10.0]).unwrap();
        assert_eq!(r.method, Method::Exact);
        assert_eq!(r.u1, 0.0);
        assert!(close(r.p_value, 2.0 / 252.0, 1e-12), "{}", r.p_value);
        // 3 vs 3 fully separated: 2 / C(6,3) = 0.1 (never significant at 0.05).
        let r = mann_whitney(&[4.0, 5.0, 6.0], &[1.0, 2.0, 3.0]).unwrap();
        assert_eq!(r.u1, 9.0);
        assert!(close(r.p_value, 0.1, 1e-12));
        // Interleaved: a = {1,3,5,7}, b = {2,4,6,8}: U1 = 0+1+2+3 = 6 of 16; P(U <= 6) for
        // n = 4, 4 is 24/70 (counted over all 70 splits), two-sided 0.6857.
        let r = mann_whitney(&[1.0, 3.0, 5.0, 7.0], &[2.0, 4.0, 6.0, 8.0]).unwrap();
        assert_eq!(r.u1, 6.0);
        assert!(close(r.p_value, 48.0 / 70.0, 1e-12), "{}", r.p_value);
    }

    #[test]
    fn the_distribution_is_symmetric_and_sums_to_one() {
        for (n1, n2) in [(1, 1), (2, 5), (7, 3), (20, 20)] {
            let lo = exact_p(n1, n2, 0.0);
            let hi = exact_p(n1, n2, (n1 * n2) as f64);
            assert!(close(lo, hi, 1e-12), "{n1} {n2}");
            assert!(close(exact_p(n1, n2, (n1 * n2) as f64 / 2.0), 1.0, 1e-12) || n1 * n2 % 2 == 1);
        }
    }

    #[test]
    fn ties_use_the_corrected_normal_approximation() {
        // a = {1,2,2,3,3,3}, b = {3,4,4,5,5,6}: U1 = 1.5 (mean ranks), ties of 2, 4, 2, 2
        // give sum(t^3 - t) = 78, variance 36/12 x (13 - 78/132) = 37.227, z = (16.5 - 0.5)
        // / 6.101 = 2.622, p = erfc(z / sqrt 2) = 0.00873 (checked by hand and with Python's
        // math.erfc).
        let a = [1.0, 2.0, 2.0, 3.0, 3.0, 3.0];
        let b = [3.0, 4.0, 4.0, 5.0, 5.0, 6.0];
        let r = mann_whitney(&a, &b).unwrap();
        assert_eq!(r.method, Method::NormalApproximation);
        assert_eq!(r.u1, 1.5);
        assert!(close(r.p_value, 0.008_732_77, 1e-6), "{}", r.p_value);
        // All equal: no difference at all.
        let r = mann_whitney(&[5.0; 4], &[5.0; 6]).unwrap();
        assert_eq!(r.p_value, 1.0);
    }

    #[test]
    fn large_sets_use_the_normal_approximation() {
        let a: Vec<f64> = (0..60).map(f64::from).collect();
        let b: Vec<f64> = (0..60).map(|x| f64::from(x) + 0.5).collect();
        let r = mann_whitney(&a, &b).unwrap();
        assert_eq!(r.method, Method::NormalApproximation);
        assert!(r.p_value > 0.5);
    }

    #[test]
    fn the_normal_tail_is_accurate() {
        assert!(close(normal_sf(0.0), 0.5, 1e-7));
        assert!(close(normal_sf(1.959_964), 0.025, 1e-6));
        assert!(close(normal_sf(-1.0), 0.841_344_7, 1e-6));
    }

    #[test]
    fn empty_or_non_finite_sets_are_not_tested() {
        assert!(mann_whitney(&[], &[1.0]).is_none());
        assert!(mann_whitney(&[f64::NAN], &[1.0]).is_none());
    }

    #[test]
    fn medians() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&[]), None);
    }
}
