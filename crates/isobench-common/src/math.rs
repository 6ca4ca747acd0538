//! Arithmetic that must vectorise: loops over these functions compile to
//! SIMD, where the standard library's would be a libm call per element.
//! The CPU model's attention and SwiGLU, and the server's sampler (a
//! softmax over a 128k vocabulary per row), use them.

/// `e^x` from arithmetic and bit operations only, so that loops over it
/// vectorise (libm's `expf` is a call per element): `2^n * e^r` with `n =
/// round(x / ln 2)`, `|r| <= ln 2 / 2`, and Cephes' degree-5 polynomial for
/// `e^r`; within 2 ulp of `f32::exp` on `[-87, 88]`. Below -87 it returns 0
/// (e^x is then under 1.7e-38; `-inf` gives 0), above 88 it returns e^88.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    const ROUND: f32 = 12_582_912.0; // 1.5 * 2^23: adding it rounds to an integer
    let clamped = x.clamp(-87.0, 88.0);
    let shifted = clamped * std::f32::consts::LOG2_E + ROUND;
    let n = shifted - ROUND;
    // ln 2 in two parts, so that n * LN2_HI is exact.
    let r = clamped - n * 0.693_359_4 - n * -2.121_944_4e-4;
    let mut p = 1.987_569_1e-4;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 0.166_666_65;
    p = p * r + 0.5;
    let e_r = p * r * r + r + 1.0;
    // shifted's low bits hold n: 2^n is n + 127 in the exponent field.
    let exponent = shifted
        .to_bits()
        .wrapping_sub(ROUND.to_bits())
        .wrapping_add(127)
        << 23;
    let value = e_r * f32::from_bits(exponent);
    if x < -87.0 { 0.0 } else { value }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_is_within_two_ulp_of_libm_and_zero_far_below() {
        let mut worst = 0f32;
        for i in 0..=350_000 {
            let x = (-87.0 + i as f32 * (175.0 / 350_000.0)).min(88.0);
            let (ours, libm) = (exp(x), x.exp());
            worst = worst.max((ours - libm).abs() / libm);
        }
        assert!(worst < 2.5e-7, "relative error {worst:e}");
        assert_eq!(exp(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp(-1e4), 0.0);
        assert_eq!(exp(0.0), 1.0);
        assert!(exp(f32::NAN).is_nan());
    }
}
