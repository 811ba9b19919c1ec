//! SplitMix64: tiny, fast and fully specified, so that every agent and the
//! coordinator draw the same values from a seed regardless of which version
//! of a random-number crate each was built with.

#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// An Exp(1) draw by inversion; the uniform is in (0, 1] so ln never sees 0.
    pub fn exp1(&mut self) -> f64 {
        let u = ((self.next_u64() >> 11) as f64 + 1.0) / (1u64 << 53) as f64;
        -u.ln()
    }
}
