//! Quantiles for reports: one definition (nearest rank) for every tool.

/// The `q` quantile (0 to 1) of sorted values by nearest rank: the smallest value with at least
/// `q` of the values at or below it. `None` when there are none.
pub fn quantile(sorted: &[u64], q: f64) -> Option<u64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (sorted.len() as f64 * q.clamp(0.0, 1.0)).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// [`quantile`] of nanosecond values, in microseconds (0 when there are none).
pub fn quantile_us(sorted_ns: &[u64], q: f64) -> f64 {
    quantile(sorted_ns, q).map_or(0.0, |v| v as f64 / 1_000.0)
}

/// The median of the finite values (mean of the middle two for an even count); NaN when there
/// are none.
pub fn median(mut v: Vec<f64>) -> f64 {
    v.retain(|x| x.is_finite());
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_quantiles() {
        let v: Vec<u64> = (1..=10).collect();
        assert_eq!(quantile(&v, 0.5), Some(5));
        assert_eq!(quantile(&v, 0.9), Some(9));
        assert_eq!(quantile(&v, 0.91), Some(10));
        assert_eq!(quantile(&v, 0.0), Some(1));
        assert_eq!(quantile(&v, 1.0), Some(10));
        assert_eq!(quantile(&[], 0.5), None);
        assert_eq!(quantile_us(&[1500, 2500], 0.5), 1.5);
    }

    #[test]
    fn medians_skip_what_was_not_measured() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, f64::NAN, 2.0, 3.0]), 2.5);
        assert!(median(vec![f64::NAN]).is_nan());
    }
}
