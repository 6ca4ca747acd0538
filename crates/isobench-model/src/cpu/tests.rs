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

/// A random paged-attention step: per sequence (context, new tokens), a
/// shuffled block table over a shared cache, random queries and cache.
struct AttentionCase {
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    block_size: usize,
    /// (context, new tokens) per sequence.
    seqs: Vec<(usize, usize)>,
}

impl AttentionCase {
    /// Our kernel's output and the plain op's (as f32), for a cache of
    /// `dtype`, and the seconds each took.
    fn run(&self, isa: Isa, dtype: DType, seed: u32) -> (Vec<f32>, Vec<f32>, [f64; 2]) {
        use std::sync::Mutex;

        use super::attention;
        use crate::paged_attention::cpu::Geometry;
        use crate::paged_attention::{Metadata, attend};

        let dev = &Device::Cpu;
        let d = self.head_dim;
        let blocks_per_seq: Vec<usize> = self
            .seqs
            .iter()
            .map(|&(context, _)| context.div_ceil(self.block_size))
            .collect();
        let width = blocks_per_seq.iter().copied().max().unwrap_or(1);
        let num_blocks: usize = blocks_per_seq.iter().sum::<usize>() + 1;
        // Blocks handed out in a scrambled order (7 is coprime with most
        // counts; a plain rotation otherwise).
        let step = if num_blocks.is_multiple_of(7) { 1 } else { 7 };
        let mut next = (0..num_blocks).map(|i| (i * step + 3) % num_blocks);
        let mut tables = vec![0u32; self.seqs.len() * width];
        for (seq, &blocks) in blocks_per_seq.iter().enumerate() {
            for b in 0..blocks {
                tables[seq * width + b] = next.next().unwrap() as u32;
            }
        }
        let context_lens: Vec<u32> = self.seqs.iter().map(|&(c, _)| c as u32).collect();
        let mut query_starts = vec![0u32];
        for &(_, new) in &self.seqs {
            query_starts.push(query_starts.last().unwrap() + new as u32);
        }
        let tokens = *query_starts.last().unwrap() as usize;
        let kv_shape = (num_blocks, self.block_size, self.kv_heads, d);
        let cache = |s| {
            Tensor::from_vec(
                random_values(num_blocks * self.block_size * self.kv_heads * d, s),
                kv_shape,
                dev,
            )
            .unwrap()
            .to_dtype(dtype)
            .unwrap()
        };
        let (keys, values) = (cache(seed), cache(seed + 1));
        let q = Tensor::from_vec(
            random_values(tokens * self.heads * d, seed + 2),
            (1, tokens, self.heads, d),
            dev,
        )
        .unwrap()
        .to_dtype(dtype)
        .unwrap();
        let u32s = |v: &[u32], shape: &[usize]| Tensor::from_slice(v, shape, dev).unwrap();
        let metadata = Metadata {
            block_tables: u32s(&tables, &[self.seqs.len(), width]),
            context_lens: u32s(&context_lens, &[self.seqs.len()]),
            query_starts: u32s(&query_starts, &[self.seqs.len() + 1]),
        };
        let start = std::time::Instant::now();
        let theirs = attend(&q, &keys, &values, metadata, self.heads).unwrap();
        let plain_seconds = start.elapsed().as_secs_f64();
        let theirs = theirs
            .to_dtype(DType::F32)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();

        let g = Geometry {
            block_tables: &tables,
            table_width: width,
            context_lens: &context_lens,
            query_starts: &query_starts,
            num_heads: self.heads,
            num_kv_heads: self.kv_heads,
            head_dim: d,
            block_size: self.block_size,
        };
        let mut work = Vec::new();
        attention::plan(&g, &mut work);
        // Queries in rows of a wider buffer, as the step's qkv rows are.
        let stride = self.heads * d + 5;
        let q32 = q.to_dtype(DType::F32).unwrap().flatten_all().unwrap();
        let q32 = q32.to_vec1::<f32>().unwrap();
        let mut rows = vec![f32::NAN; tokens * stride];
        for t in 0..tokens {
            rows[t * stride..t * stride + self.heads * d]
                .copy_from_slice(&q32[t * self.heads * d..(t + 1) * self.heads * d]);
        }
        let scratch: Vec<Mutex<attention::Scratch>> = (0..super::team::threads())
            .map(|_| Default::default())
            .collect();
        let mut ours = vec![f32::NAN; tokens * self.heads * d];
        let (k, _) = keys.storage_and_layout();
        let (v, _) = values.storage_and_layout();
        let (candle_core::Storage::Cpu(k), candle_core::Storage::Cpu(v)) = (&*k, &*v) else {
            unreachable!("CPU tensors")
        };
        let queries = attention::Queries {
            rows: &rows,
            stride,
        };
        let start = std::time::Instant::now();
        attention::attend(isa, &g, &work, queries, (k, v), &mut ours, &scratch).unwrap();
        (ours, theirs, [start.elapsed().as_secs_f64(), plain_seconds])
    }
}

#[test]
fn tiled_attention_matches_the_plain_kernel_on_odd_shapes_and_chunked_prefills() {
    // (context, new): whole prefills of odd lengths, chunks that continue a
    // cached context, decodes, and short runs under the transposed tile.
    let mixed = vec![
        (1, 1),
        (7, 7),
        (40, 17),
        (100, 1),
        (33, 33),
        (50, 3),
        (70, 16),
        (5, 2),
    ];
    // Steps of one span, whose KV heads are split among the team.
    let steps = [mixed, vec![(100, 1)], vec![(37, 37)], vec![(1, 1), (9, 1)]];
    let shapes = [
        (4, 4, 64, 16),
        (4, 2, 18, 5),
        (6, 1, 72, 16),
        (8, 4, 130, 3),
    ];
    for isa in Isa::available() {
        for (i, &(heads, kv_heads, head_dim, block_size)) in shapes.iter().enumerate() {
            let dtypes = [(DType::F32, 1e-5), (DType::F16, 2e-3), (DType::BF16, 1e-2)];
            for ((dtype, tolerance), seqs) in dtypes
                .into_iter()
                .flat_map(|d| steps.iter().map(move |s| (d, s)))
            {
                let case = AttentionCase {
                    heads,
                    kv_heads,
                    head_dim,
                    block_size,
                    seqs: seqs.clone(),
                };
                let (ours, theirs, _) = case.run(isa, dtype, 100 + i as u32);
                let error = relative_error(&ours, &theirs);
                assert!(
                    error < tolerance,
                    "{} {dtype:?} heads {heads}/{kv_heads} d {head_dim} block {block_size} {seqs:?}: {error:e}",
                    isa.name()
                );
            }
        }
    }
    // One long prefill whose scores span many blocks and a wide range.
    let case = AttentionCase {
        heads: 2,
        kv_heads: 1,
        head_dim: 64,
        block_size: 16,
        seqs: vec![(600, 600), (900, 300)],
    };
    let (ours, theirs, _) = case.run(Isa::detect(), DType::F32, 7);
    assert!(relative_error(&ours, &theirs) < 1e-5);
}

/// Not a test: ms per layer of the tiled attention against the plain
/// kernel, for prefills and for decode steps at a 1,024-token context
/// (`cargo test --release -p isobench-model --lib -- --ignored --nocapture attention_speed`).
#[test]
#[ignore]
fn attention_speed() {
    let cases = [
        vec![(512, 512)],
        vec![(2048, 512)],
        vec![(2048, 2048)],
        vec![(1024, 1)],
        vec![(1024, 1); 8],
        vec![(1024, 1); 32],
    ];
    for seqs in cases {
        let label = format!("{} x {:?}", seqs.len(), seqs[0]);
        let case = AttentionCase {
            heads: 8,
            kv_heads: 8,
            head_dim: 64,
            block_size: 16,
            seqs,
        };
        let mut best = [f64::MAX; 2];
        for _ in 0..3 {
            let (_, _, seconds) = case.run(Isa::detect(), DType::F32, 1);
            best = [best[0].min(seconds[0]), best[1].min(seconds[1])];
        }
        println!(
            "{label} (context, new tokens), 8 heads of 64: tiled {:.2} ms, plain kernel {:.2} ms",
            best[0] * 1e3,
            best[1] * 1e3
        );
    }
}
