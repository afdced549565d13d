//! The one random generator of the local pipeline: a seeded xorshift64, so that a seed replays a
//! run's workload, faults and crash points. Not for anything that must be unpredictable.

use std::sync::Mutex;

/// Marsaglia's xorshift64: small, fast, repeatable.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed` (0, which xorshift cannot leave, is taken as 1).
    pub fn new(seed: u64) -> Self {
        Rng(seed.max(1))
    }

    /// The next number.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number below `n` (0 for `n` of 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }

    /// A number below 1,000: per-mille rates compare against it.
    pub fn per_mille(&mut self) -> u64 {
        self.next_u64() % 1000
    }
}

/// An [`Rng`] that tasks share.
#[derive(Debug)]
pub struct SharedRng(Mutex<Rng>);

impl SharedRng {
    /// A shared generator from `seed`.
    pub fn new(seed: u64) -> Self {
        SharedRng(Mutex::new(Rng::new(seed)))
    }

    /// Runs `f` on the generator.
    pub fn with<T>(&self, f: impl FnOnce(&mut Rng) -> T) -> T {
        f(&mut self.0.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// True `per_mille` times in a thousand.
    pub fn chance(&self, per_mille: u64) -> bool {
        self.with(|rng| rng.per_mille() < per_mille)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_replays_its_sequence() {
        let (mut a, mut b) = (Rng::new(42), Rng::new(42));
        let first: Vec<u64> = (0..5).map(|_| a.next_u64()).collect();
        assert_eq!(first, (0..5).map(|_| b.next_u64()).collect::<Vec<_>>());
        assert_ne!(Rng::new(0).next_u64(), 0, "a zero seed does not stick at zero");
        assert!((0..1000).all(|_| a.below(7) < 7));
    }
}
