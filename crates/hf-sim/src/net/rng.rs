//! A seeded, deterministic random number generator for the simulator.
//!
//! # What it does
//!
//! [`Rng`] is xoshiro256** seeded through SplitMix64 (both public-domain algorithms, written here
//! from their published definitions). [`Rng::fork`] derives an independent stream for a component
//! from the *seed* of its parent and a label, never from how many numbers the parent has drawn, so
//! adding a component or drawing one more number somewhere does not shift every other stream.
//!
//! # What it does not do
//!
//! No OS entropy, no clock, no cryptographic strength. Not `rand`-compatible on purpose: the
//! streams must stay the same across dependency upgrades.

/// One SplitMix64 step: advances `state` and returns the next output.
pub fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    mix64(*state)
}

/// SplitMix64's finaliser: a bijective mix of one 64-bit word.
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// FNV-1a of a label: turns component names into fork keys.
pub fn label_hash(label: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in label.as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01B3);
    }
    h
}

/// A deterministic random stream (xoshiro256**).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rng {
    seed: u64,
    s: [u64; 4],
}

impl Rng {
    /// A stream from a seed. The same seed always gives the same stream.
    pub fn new(seed: u64) -> Rng {
        let mut sm = seed;
        let mut s = [0u64; 4];
        for w in &mut s {
            *w = splitmix64(&mut sm);
        }
        // xoshiro's state must not be all zero; SplitMix64 outputs never are all four zero, but
        // keep the guarantee explicit.
        if s == [0; 4] {
            s[0] = 1;
        }
        Rng { seed, s }
    }

    /// The seed this stream was created from.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// An independent stream for a component named `label`: a function of this stream's seed and
    /// the label only (not of the numbers drawn so far).
    pub fn fork(&self, label: &str) -> Rng {
        let mut k = self.seed ^ label_hash(label).rotate_left(17);
        Rng::new(splitmix64(&mut k))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let result = self.s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        result
    }

    /// The next 32 random bits.
    pub fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }

    /// A uniform number in `0..n` (0 when `n` is 0), without modulo bias (Lemire's method with
    /// rejection).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            return 0;
        }
        loop {
            let x = self.next_u64();
            let m = u128::from(x) * u128::from(n);
            let low = m as u64;
            if low >= n.wrapping_neg() % n {
                return (m >> 64) as u64;
            }
        }
    }

    /// True with probability `ppm` parts per million (0 never, ≥ 1,000,000 always).
    pub fn chance_ppm(&mut self, ppm: u32) -> bool {
        if ppm == 0 {
            return false;
        }
        self.below(1_000_000) < u64::from(ppm)
    }

    /// A uniform duration in `0..=max` at nanosecond resolution.
    pub fn duration_up_to(&mut self, max: std::time::Duration) -> std::time::Duration {
        let nanos = u64::try_from(max.as_nanos()).unwrap_or(u64::MAX);
        if nanos == 0 {
            return std::time::Duration::ZERO;
        }
        std::time::Duration::from_nanos(self.below(nanos.saturating_add(1)))
    }

    /// Fills `buf` with random bytes.
    pub fn fill_bytes(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let v = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }

    /// A random locally administered unicast MAC address.
    pub fn mac(&mut self) -> [u8; 6] {
        let mut m = [0u8; 6];
        self.fill_bytes(&mut m);
        m[0] = (m[0] & 0xfc) | 0x02;
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix_matches_the_published_reference_vector() {
        // Reference outputs of SplitMix64 seeded with 1234567 (from the algorithm's reference
        // implementation by Vigna, as quoted in many test suites).
        let mut s = 1_234_567u64;
        assert_eq!(splitmix64(&mut s), 6_457_827_717_110_365_317);
        assert_eq!(splitmix64(&mut s), 3_203_168_211_198_807_973);
        assert_eq!(splitmix64(&mut s), 9_817_491_932_198_370_423);
    }

    #[test]
    fn same_seed_same_stream_and_forks_are_independent_of_draws() {
        let mut a = Rng::new(7);
        let mut b = Rng::new(7);
        let xs: Vec<u64> = (0..16).map(|_| a.next_u64()).collect();
        let ys: Vec<u64> = (0..16).map(|_| b.next_u64()).collect();
        assert_eq!(xs, ys);
        let c = Rng::new(8).next_u64();
        assert_ne!(xs[0], c);
        // A fork does not depend on how much the parent drew.
        let fresh = Rng::new(7);
        assert_eq!(fresh.fork("link").next_u64(), a.fork("link").next_u64());
        assert_ne!(fresh.fork("link").next_u64(), fresh.fork("host").next_u64());
    }

    #[test]
    fn below_and_chance_stay_in_range() {
        let mut r = Rng::new(1);
        for n in [1u64, 2, 3, 10, 1000, u64::MAX] {
            for _ in 0..100 {
                assert!(r.below(n) < n);
            }
        }
        assert!(!r.chance_ppm(0));
        assert!(r.chance_ppm(1_000_000));
        let hits = (0..100_000).filter(|_| r.chance_ppm(10_000)).count();
        assert!((800..1200).contains(&hits), "1% of 100000 drew {hits}");
        let mac = r.mac();
        assert_eq!(mac[0] & 0x03, 0x02);
    }
}
