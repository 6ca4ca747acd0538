//! The CPU kernels against candle's plain ops on random shapes, odd sizes
//! and tails included, for every ISA this CPU runs and every weight type.

use candle_core::{DType, Device, Tensor};

use super::matmul::{Matrix, Packed, ROW_CHUNK, matmul};
use super::ops::random_values;
use super::{Isa, Projection, Weight};

/// `max |ours - theirs| / max(1, max |theirs|)` over all elements.
fn relative_error(ours: &[f32], theirs: &[f32]) -> f32 {
    assert_eq!(ours.len(), theirs.len());
    let scale = theirs.iter().fold(1f32, |m, v| m.max(v.abs()));
    let diff = ours
        .iter()
        .zip(theirs)
        .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    diff / scale
}

fn weight_tensor(n: usize, k: usize, dtype: DType, seed: u32) -> Tensor {
    Tensor::from_vec(random_values(n * k, seed), (n, k), &Device::Cpu)
        .unwrap()
        .to_dtype(dtype)
        .unwrap()
}

/// candle's `x W^T` in f32, from the same (rounded) weights.
fn reference(x: &[f32], rows: usize, w: &Tensor) -> Vec<f32> {
    let (_, k) = w.dims2().unwrap();
    let xs = Tensor::from_slice(x, (rows, k), &Device::Cpu).unwrap();
    let wf = w.to_dtype(DType::F32).unwrap();
    xs.matmul(&wf.t().unwrap())
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap()
}

#[test]
fn matmul_matches_candle_on_odd_shapes_for_every_isa_and_weight_type() {
    let rows_cases = [1, 2, 3, 4, 5, 7, 8, 12, 13, 16, 25, ROW_CHUNK + 3];
    let nk_cases = [
        (1, 1),
        (7, 5),
        (8, 16),
        (9, 17),
        (33, 31),
        (100, 64),
        (21, 130),
    ];
    let mut cases = 0;
    for isa in Isa::available() {
        for dtype in [DType::F32, DType::F16, DType::BF16] {
            for (seed, &rows) in rows_cases.iter().enumerate() {
                for &(n, k) in &nk_cases {
                    let w = weight_tensor(n, k, dtype, seed as u32 * 31 + n as u32);
                    let x = random_values(rows * k, 7 + seed as u32);
                    let matrix = Packed::new(&Matrix::from_tensor(&w).unwrap());
                    let mut out = vec![f32::NAN; rows * n];
                    matmul(isa, &x, rows, &matrix, &mut out, n);
                    let error = relative_error(&out, &reference(&x, rows, &w));
                    assert!(
                        error < 1e-5,
                        "{} {dtype:?} rows {rows} n {n} k {k}: relative error {error:e}",
                        isa.name()
                    );
                    cases += 1;
                }
            }
        }
    }
    assert!(cases >= 3 * rows_cases.len() * nk_cases.len());
}

#[test]
fn matmul_writes_only_its_band_of_a_wider_output() {
    for isa in Isa::available() {
        let (rows, n, k, stride, column) = (5, 11, 19, 30, 7);
        let w = weight_tensor(n, k, DType::F32, 3);
        let x = random_values(rows * k, 4);
        let mut out = vec![-1f32; rows * stride];
        matmul(
            isa,
            &x,
            rows,
            &Packed::new(&Matrix::from_tensor(&w).unwrap()),
            &mut out[column..],
            stride,
        );
        let expected = reference(&x, rows, &w);
        for t in 0..rows {
            for j in 0..stride {
                let got = out[t * stride + j];
                if (column..column + n).contains(&j) {
                    let want = expected[t * n + j - column];
                    assert!((got - want).abs() < 1e-5, "{}: ({t}, {j})", isa.name());
                } else {
                    assert_eq!(got, -1.0, "{}: ({t}, {j}) outside the band", isa.name());
                }
            }
        }
    }
}

#[test]
fn fused_projection_with_bias_matches_separate_candle_products() {
    let (rows, k) = (6, 40);
    let sizes = [24, 8, 8];
    for dtype in [DType::F32, DType::BF16] {
        let tensors: Vec<Tensor> = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| weight_tensor(n, k, dtype, 50 + i as u32))
            .collect();
        let parts = tensors
            .iter()
            .map(|t| Weight::Dense(Matrix::from_tensor(t).unwrap()))
            .collect();
        let total: usize = sizes.iter().sum();
        let bias = random_values(total, 9);
        let projection = Projection::new(parts, Some(bias.clone())).unwrap();
        assert_eq!(projection.n(), total);
        let x = random_values(rows * k, 10);
        let mut out = vec![0f32; rows * total];
        projection.apply(Isa::detect(), &x, rows, &mut out).unwrap();
        let separate: Vec<Vec<f32>> = tensors.iter().map(|t| reference(&x, rows, t)).collect();
        let mut expected = Vec::new();
        for t in 0..rows {
            let mut column = 0;
            for (part, &n) in separate.iter().zip(&sizes) {
                for j in 0..n {
                    expected.push(part[t * n + j] + bias[column + j]);
                }
                column += n;
            }
        }
        let error = relative_error(&out, &expected);
        assert!(error < 1e-5, "{dtype:?}: {error:e}");
    }
}

/// Not a test: GFLOP/s of the projection kernel per row count, best of 20
/// (`cargo test --release -p isobench-model --lib -- --ignored --nocapture kernel_speed`).
#[test]
#[ignore]
fn kernel_speed() {
    let isa = Isa::detect();
    for (n, k) in [(1536, 512), (512, 1408), (2816, 512)] {
        let w = Packed::new(&Matrix::from_tensor(&weight_tensor(n, k, DType::F32, 1)).unwrap());
        for rows in [1, 8, 12, 32, 64, 128] {
            let x = random_values(rows * k, 2);
            let mut out = vec![0f32; rows * n];
            let mut best = f64::MAX;
            for _ in 0..20 {
                let start = std::time::Instant::now();
                matmul(isa, &x, rows, &w, &mut out, n);
                best = best.min(start.elapsed().as_secs_f64());
            }
            let flops = 2.0 * (rows * n * k) as f64;
            let bytes = (n * k * 4) as f64;
            println!(
                "{} n {n} k {k} rows {rows}: {:.1} us, {:.1} GFLOP/s, {:.1} GB/s of weights",
                isa.name(),
                best * 1e6,
                flops / best / 1e9,
                bytes / best / 1e9
            );
        }
    }
}

#[test]
fn quantized_matmul_matches_candles_qmatmul_on_odd_shapes() {
    use candle_core::Module;
    use candle_core::quantized::{GgmlDType, QMatMul, QTensor};

    use super::quantized::QuantMatrix;
    let cases = [
        (GgmlDType::Q8_0, 7, 96),
        (GgmlDType::Q8_0, 45, 64),
        (GgmlDType::Q4_0, 5, 64),
        (GgmlDType::Q4K, 9, 256),
        (GgmlDType::Q6K, 6, 512),
        (GgmlDType::Q5K, 13, 256),
    ];
    for (seed, &(dtype, n, k)) in cases.iter().enumerate() {
        let w = weight_tensor(n, k, DType::F32, 70 + seed as u32);
        let q = QTensor::quantize(&w, dtype).unwrap();
        let dequantized = q.dequantize(&Device::Cpu).unwrap();
        let theirs = QMatMul::from_qtensor(QTensor::quantize(&w, dtype).unwrap()).unwrap();
        for panels in [false, true] {
            let ours = QuantMatrix::with_panels(&q, panels).unwrap();
            // The Q8_0 panels multiply f32 activations with the weights'
            // exact values; the dot products quantize activations as
            // candle's QMatMul does.
            let exact = panels && dtype == GgmlDType::Q8_0 && Isa::detect() == Isa::Avx512;
            for rows in [1, 3, 7, 13] {
                let x = random_values(rows * k, 80 + rows as u32);
                let mut out = vec![f32::NAN; rows * n];
                ours.apply(&x, rows, &mut out, n);
                let expected = if exact {
                    reference(&x, rows, &dequantized)
                } else {
                    let xs = Tensor::from_slice(&x, (rows, k), &Device::Cpu).unwrap();
                    theirs
                        .forward(&xs)
                        .unwrap()
                        .flatten_all()
                        .unwrap()
                        .to_vec1()
                        .unwrap()
                };
                let error = relative_error(&out, &expected);
                assert!(
                    error < 1e-4,
                    "{dtype:?} panels {panels} rows {rows} n {n} k {k}: {error:e}"
                );
            }
        }
    }
}
