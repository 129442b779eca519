//! Choosing the next token from the model's logits: greedy at temperature 0, otherwise seeded
//! sampling with `temperature` and `top_p`. The arithmetic is spelled out (f64, a fixed order,
//! SplitMix64) so that a reference loop in another language picks the same tokens for the same
//! seed (tests/openai_reference.py does, in Python).

/// SplitMix64: one 64-bit state, one draw per token.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// A seed from WASI's random source, for a call that gave none.
    pub fn unseeded() -> Rng {
        use std::hash::{BuildHasher, Hasher};
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u8(0);
        Rng(hasher.finish())
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1), 53 bits.
    fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// The index of the largest logit (the first of equals).
fn argmax(logits: &[f32]) -> usize {
    let mut best = 0;
    for (i, &v) in logits.iter().enumerate() {
        if v > logits[best] {
            best = i;
        }
    }
    best
}

/// The next token: greedy when `temperature` is 0, else a draw from the softmax of
/// `logits / temperature`, keeping the most likely tokens whose probabilities reach `top_p`.
pub fn pick(logits: &[f32], temperature: f64, top_p: f64, rng: &mut Rng) -> usize {
    if temperature <= 0.0 || logits.len() < 2 {
        return argmax(logits);
    }
    let scaled: Vec<f64> = logits.iter().map(|&v| f64::from(v) / temperature).collect();
    let max = scaled.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let exps: Vec<f64> = scaled.iter().map(|v| (v - max).exp()).collect();
    let total: f64 = exps.iter().sum();
    // Most likely first; equal probabilities by index.
    let mut order: Vec<usize> = (0..exps.len()).collect();
    order.sort_by(|&a, &b| exps[b].total_cmp(&exps[a]).then(a.cmp(&b)));
    let mut kept = 0;
    let mut mass = 0.0;
    for &i in &order {
        mass += exps[i] / total;
        kept += 1;
        if mass >= top_p {
            break;
        }
    }
    let kept = &order[..kept];
    let kept_total: f64 = kept.iter().map(|&i| exps[i]).sum();
    let u = rng.next_f64() * kept_total;
    let mut acc = 0.0;
    for &i in kept {
        acc += exps[i];
        if u < acc {
            return i;
        }
    }
    kept[kept.len() - 1]
}
