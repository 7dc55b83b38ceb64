//! Latency figures: nearest-rank quantiles and the mean of a set of durations, in milliseconds.

use std::time::Duration;

/// The `p` quantile (0..=1) of `sorted` in milliseconds, nearest rank; NaN when empty.
pub fn quantile_ms(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (p * sorted.len() as f64).ceil() as usize;
    let i = rank.clamp(1, sorted.len()) - 1;
    sorted[i].as_secs_f64() * 1e3
}

/// p50, p99 and mean of one set of durations, in milliseconds.
#[derive(Debug, Clone, Copy)]
pub struct Figures {
    /// The median.
    pub p50: f64,
    /// The 99th percentile.
    pub p99: f64,
    /// The mean.
    pub mean: f64,
    /// How many durations.
    pub count: usize,
}

/// The figures of `durations` (sorted here).
pub fn figures(mut durations: Vec<Duration>) -> Figures {
    durations.sort();
    let count = durations.len();
    let mean = durations.iter().map(Duration::as_secs_f64).sum::<f64>() / count.max(1) as f64 * 1e3;
    Figures {
        p50: quantile_ms(&durations, 0.50),
        p99: quantile_ms(&durations, 0.99),
        mean,
        count,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_quantiles() {
        let v: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(quantile_ms(&v, 0.50), 50.0);
        assert_eq!(quantile_ms(&v, 0.99), 99.0);
        assert_eq!(quantile_ms(&v[..1], 0.99), 1.0);
        assert!(quantile_ms(&[], 0.5).is_nan());
        let f = figures(vec![Duration::from_millis(3), Duration::from_millis(1)]);
        assert_eq!((f.p50, f.count), (1.0, 2));
    }
}
