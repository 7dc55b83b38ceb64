//! A seeded generator for a trial's inputs, so a trial is reproducible from the matrix's seed.
//! SplitMix64: tiny, well understood, and enough for picking amounts and delays.

/// SplitMix64.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator for trial `index` of the cell labelled `label`, under matrix seed `seed`.
    pub fn for_trial(seed: u64, label: &str, index: u32) -> Rng {
        // FNV-1a over the label, so that cells draw independent sequences.
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for byte in label.bytes() {
            hash = (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3);
        }
        Rng(seed ^ hash ^ u64::from(index).rotate_left(32))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A value in `low..=high`.
    pub fn between(&mut self, low: u64, high: u64) -> u64 {
        assert!(low <= high, "an empty range {low}..={high}");
        low + self.next_u64() % (high - low + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_draws_the_same_values_and_cells_differ() {
        let draw = |seed, label, index| {
            let mut rng = Rng::for_trial(seed, label, index);
            (0..4).map(|_| rng.between(100, 50_000)).collect::<Vec<_>>()
        };
        assert_eq!(draw(7, "a", 1), draw(7, "a", 1));
        assert_ne!(draw(7, "a", 1), draw(7, "b", 1));
        assert_ne!(draw(7, "a", 1), draw(7, "a", 2));
        assert_ne!(draw(7, "a", 1), draw(8, "a", 1));
        assert!(draw(1, "x", 0).iter().all(|v| (100..=50_000).contains(v)));
    }
}
