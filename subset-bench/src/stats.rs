//! Percentiles, medians and the random product pickers.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

/// The `q` quantile (0..=1) of `sorted`, nearest rank; `NaN` when empty.
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Sorts and returns the values.
pub fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_by(f64::total_cmp);
    v
}

/// Median, minimum and maximum of a few repeated measurements.
#[derive(Debug, Clone, Copy)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    pub fn of(values: &[f64]) -> Spread {
        let s = sorted(values.to_vec());
        Spread {
            median: quantile(&s, 0.5),
            min: s.first().copied().unwrap_or(f64::NAN),
            max: s.last().copied().unwrap_or(f64::NAN),
        }
    }
}

/// Latencies in milliseconds.
pub fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// How a benchmark picks the next product.
#[derive(Debug, Clone)]
pub enum Picker {
    Uniform(usize),
    /// Zipf-distributed ranks (cumulative weights), mapped through a random permutation so that
    /// the popular products are spread over the collection rather than all written first.
    Zipf {
        cdf: Vec<f64>,
        permutation: Vec<usize>,
    },
}

impl Picker {
    pub fn zipf(n: usize, s: f64, seed: u64) -> Picker {
        let mut total = 0.0;
        let cdf = (1..=n)
            .map(|k| {
                total += 1.0 / (k as f64).powf(s);
                total
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|c| c / total)
            .collect();
        let mut permutation: Vec<usize> = (0..n).collect();
        permutation.shuffle(&mut StdRng::seed_from_u64(seed));
        Picker::Zipf { cdf, permutation }
    }

    pub fn pick(&self, rng: &mut impl Rng) -> usize {
        match self {
            Picker::Uniform(n) => rng.random_range(0..*n),
            Picker::Zipf { cdf, permutation } => {
                let u: f64 = rng.random();
                let rank = cdf.partition_point(|&c| c < u).min(cdf.len() - 1);
                permutation[rank]
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_by_nearest_rank() {
        let s = sorted((1..=100).map(f64::from).collect());
        assert_eq!(quantile(&s, 0.5), 50.0);
        assert_eq!(quantile(&s, 0.99), 99.0);
        assert_eq!(quantile(&s, 1.0), 100.0);
        assert_eq!(quantile(&s, 0.0), 1.0);
        assert!(quantile(&[], 0.5).is_nan());
    }

    #[test]
    fn zipf_is_skewed_and_in_range() {
        let picker = Picker::zipf(1000, 0.99, 1);
        let mut rng = StdRng::seed_from_u64(2);
        let mut hits = vec![0usize; 1000];
        for _ in 0..100_000 {
            hits[picker.pick(&mut rng)] += 1;
        }
        hits.sort_unstable();
        let top10: usize = hits.iter().rev().take(10).sum();
        // With s = 0.99 over 1,000 items the 10 most popular get about 39% of the picks.
        assert!(top10 > 30_000, "{top10}");
    }
}
