//! How long one decode step takes, per batch size, against the floor that
//! memory bandwidth sets: the number that bounds what batching and CUDA
//! graphs can gain.
//!
//! ```text
//! cargo run --release --example step_bench -p isobench-model -- [FLAGS]
//!   --model DIR        model folder (default models/small-llama)
//!   --device SPEC      cpu, cuda or cuda:N (default cpu)
//!   --dtype D          f32, f16 or bf16 (default: the model's default for the device)
//!   --graphs MODE      on, off or both (default: both on CUDA; the CPU has
//!                      no graphs and takes only off)
//!   --batch LIST       batch sizes, e.g. 1,8,32,64,128 (default 1,8,32)
//!   --context N        tokens prefilled per sequence (default 128)
//!   --steps N          timed decode steps per batch and mode (default 16)
//!   --prompt-tokens LIST  also time steps that carry this many prompt
//!                      tokens, e.g. 512,2048 (default none; see below)
//!   --prompt-len N     tokens of each of those prompts (default 80)
//!   --vary-prompts     each of those steps one prompt token fewer than
//!                      the one before, so that no two share a shape
//!   --plain            candle's general ops (cuBLAS on a GPU) instead of
//!                      this crate's own kernels (the plain path, for
//!                      comparison)
//!   --check            correctness mode instead (see check.rs)
//! ```
//!
//! Each model first runs the warm-up steps a server runs at start
//! ([`isobench_model::warm_up`], timed on the model's line), so the first
//! measured prefill does not pay for loading the kernels. For each batch
//! size every sequence is prefilled with N pseudo-random tokens (one
//! sequence per step), then 3 warm-up and `--steps` timed
//! decode steps run over the whole batch, eagerly and then from CUDA
//! graphs, on the same cache. A step's time is its CUDA-event device time
//! on a GPU (host clock on the CPU); the median is reported. On a GPU the
//! floor is (weight bytes read + KV bytes read) / the device-to-device copy
//! bandwidth measured at the start of the run (a 1 GiB copy, counting the
//! bytes read and written). Prints a table and one JSON line per row. The
//! table's `launch ms` is the host's time to launch an eager step (until
//! `forward` returns, before waiting for the GPU; the JSON's `issue_ms`
//! has it for each mode): an eager step whose launches take less than its
//! GPU time keeps the GPU busy without graphs, so a graph can gain on it
//! only the difference.
//!
//! With `--prompt-tokens`, each batch size also times, per listed count,
//! steps that carry that many prompt tokens (fresh prompts of
//! `--prompt-len` tokens, the last one shorter, prefilled afresh in the
//! same blocks every step) beside the batch's decode rows, and the same
//! prompts alone: what a continuous-batching step with prompt chunks costs
//! over a decode step, per prompt token, against a prefill-only step such
//! as static or dynamic batching runs. Such steps replay a graph only
//! within the graph buckets (2,048 tokens). In a server nearly every such
//! step has a row count of its own; `--vary-prompts` makes the timed
//! steps so (a token fewer each step, the figures per token taken over
//! the steps' mean), where by default every step of a count has the same
//! shape, so the warm-up steps run it first.

mod check;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use isobench_model::{
    CausalLm, DType, Device, KvCache, ModelFolder, ModelOptions, SeqStep, StepBatch, Tensor,
    WeightCache, load_model_cached, parse_device,
};

const BLOCK_SIZE: usize = 16;
const WARM_UP_STEPS: usize = 3;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// Command-line flags, checked.
struct Args {
    model: PathBuf,
    device: String,
    dtype: Option<DType>,
    modes: Vec<bool>,
    batches: Vec<usize>,
    context: usize,
    steps: usize,
    check: bool,
    plain: bool,
    prompt_tokens: Vec<usize>,
    prompt_len: usize,
    vary_prompts: bool,
}

fn parse_args() -> Result<Args> {
    let mut args = Args {
        model: PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../models/small-llama"),
        device: "cpu".into(),
        dtype: None,
        modes: Vec::new(),
        batches: vec![1, 8, 32],
        context: 128,
        steps: 16,
        check: false,
        plain: false,
        prompt_tokens: Vec::new(),
        prompt_len: 80,
        vary_prompts: false,
    };
    let mut graphs = None;
    let mut prompt_len_given = false;
    let mut raw = std::env::args().skip(1);
    while let Some(flag) = raw.next() {
        if flag == "--check" {
            args.check = true;
            continue;
        }
        if flag == "--plain" {
            args.plain = true;
            continue;
        }
        if flag == "--vary-prompts" {
            args.vary_prompts = true;
            continue;
        }
        let value = raw
            .next()
            .ok_or_else(|| format!("{flag} needs a value (see --help in the source header)"))?;
        let number = |what: &str, text: &str| -> Result<usize> {
            match text.parse::<usize>() {
                Ok(n) if n > 0 => Ok(n),
                _ => Err(format!("{what}: `{text}` is not a positive integer").into()),
            }
        };
        match flag.as_str() {
            "--model" => args.model = PathBuf::from(value),
            "--device" => args.device = value,
            "--dtype" => {
                args.dtype = Some(match value.as_str() {
                    "f32" => DType::F32,
                    "f16" => DType::F16,
                    "bf16" => DType::BF16,
                    _ => return Err(format!("--dtype `{value}`: accepted: f32, f16, bf16").into()),
                })
            }
            "--graphs" => {
                graphs = Some(match value.as_str() {
                    "on" => vec![true],
                    "off" => vec![false],
                    "both" => vec![false, true],
                    _ => return Err(format!("--graphs `{value}`: accepted: on, off, both").into()),
                })
            }
            "--batch" => {
                args.batches = value
                    .split(',')
                    .map(|b| number("--batch", b.trim()))
                    .collect::<Result<_>>()?
            }
            "--prompt-tokens" => {
                args.prompt_tokens = value
                    .split(',')
                    .map(|t| number("--prompt-tokens", t.trim()))
                    .collect::<Result<_>>()?
            }
            "--prompt-len" => {
                args.prompt_len = number("--prompt-len", &value)?;
                prompt_len_given = true;
            }
            "--context" => args.context = number("--context", &value)?,
            "--steps" => args.steps = number("--steps", &value)?,
            _ => {
                return Err(format!(
                    "unknown flag `{flag}`; accepted: --model, --device, --dtype, --graphs, --batch, --context, --steps, \
                     --prompt-tokens, --prompt-len, --vary-prompts, --plain, --check"
                )
                .into());
            }
        }
    }
    if args.prompt_tokens.is_empty() && (prompt_len_given || args.vary_prompts) {
        return Err(
            "--prompt-len and --vary-prompts shape the steps of --prompt-tokens; \
                    give --prompt-tokens too"
                .into(),
        );
    }
    if args.check && !args.prompt_tokens.is_empty() {
        return Err(
            "--check runs its own steps; --prompt-tokens times steps, without --check".into(),
        );
    }
    let cuda = !args.device.trim().eq_ignore_ascii_case("cpu");
    if !cuda && graphs.as_ref().is_some_and(|modes| modes.contains(&true)) {
        // The CPU runs every step eagerly: a graphs column would time the
        // same steps again under another name.
        return Err("--graphs: the CPU has no CUDA graphs; accepted with --device cpu: off".into());
    }
    args.modes = graphs.unwrap_or(if cuda { vec![false, true] } else { vec![false] });
    Ok(args)
}

/// A batch of sequences in one cache, with contiguous blocks per sequence.
struct Batch {
    contexts: Vec<usize>,
    blocks_per_seq: usize,
    /// Token ids are drawn from 5..vocab (the model's vocabulary).
    vocab: u32,
}

impl Batch {
    /// A step in which each `(seq, new)` brings `new` tokens.
    fn step(&self, parts: &[(usize, usize)], token: u32) -> StepBatch {
        let mut batch = StepBatch::default();
        for &(seq, new) in parts {
            let cached = self.contexts[seq];
            let first_block = seq * self.blocks_per_seq;
            let table: Vec<u32> = (0..(cached + new).div_ceil(BLOCK_SIZE))
                .map(|b| (first_block + b) as u32)
                .collect();
            for position in cached..cached + new {
                batch
                    .token_ids
                    .push(token.wrapping_add(position as u32 * 7919) % (self.vocab - 5) + 5);
                batch.positions.push(position as u32);
                batch
                    .slot_mapping
                    .push((first_block * BLOCK_SIZE + position) as u32);
            }
            batch.seqs.push(SeqStep {
                num_new_tokens: new as u32,
                context_len: (cached + new) as u32,
                block_table: table,
            });
        }
        batch
    }
}

/// Medians over the timed steps of one model.
struct Timed {
    device: Duration,
    host: Duration,
    /// Host time until `forward` returned, before waiting for the GPU:
    /// what launching (or replaying) the step costs the host.
    issue: Duration,
    /// Whether every timed step replayed a CUDA graph.
    replayed: bool,
}

/// Median decode step of each model (eager first, then graphs) on one
/// prefilled cache, the mean context during the timed steps, and the
/// steps with prompt tokens of `--prompt-tokens`.
struct Measured {
    decode: Vec<Timed>,
    mean_context: f64,
    prefill_tokens_per_s: f64,
    prompts: Vec<PromptSteps>,
}

/// Steps that carry `tokens` prompt tokens: beside the batch's decode rows
/// (`mixed`) and alone, per model.
struct PromptSteps {
    tokens: usize,
    /// The timed steps' mean prompt tokens (`tokens` unless
    /// `--vary-prompts`).
    mean_tokens: f64,
    mixed: Vec<Timed>,
    alone: Vec<Timed>,
}

/// Runs `WARM_UP_STEPS` and `steps` timed steps of `model`, the input of
/// step `i` from `input(i)`.
fn time_steps(
    model: &mut dyn CausalLm,
    cache: &mut KvCache,
    steps: usize,
    mut input: impl FnMut(usize) -> StepBatch,
) -> Result<Timed> {
    let mut device_times = Vec::with_capacity(steps);
    let mut host_times = Vec::with_capacity(steps);
    let mut issue_times = Vec::with_capacity(steps);
    let mut replayed = true;
    for step in 0..WARM_UP_STEPS + steps {
        let input = input(step);
        let start = Instant::now();
        let logits = model.forward(&input, cache)?;
        let issued = start.elapsed();
        sync(&logits)?;
        let host = start.elapsed();
        let stats = model.last_step();
        if step >= WARM_UP_STEPS {
            device_times.push(stats.device_time.unwrap_or(host));
            host_times.push(host);
            issue_times.push(issued);
            replayed &= stats.graph_replayed;
        }
    }
    Ok(Timed {
        device: median(device_times),
        host: median(host_times),
        issue: median(issue_times),
        replayed,
    })
}

/// Fresh prompts of `len` tokens (the last one shorter) that make up
/// `tokens`, as `(seq, tokens)` parts from sequence `first` on.
fn prompt_parts(first: usize, tokens: usize, len: usize) -> Vec<(usize, usize)> {
    (0..tokens.div_ceil(len))
        .map(|k| (first + k, len.min(tokens - k * len)))
        .collect()
}

fn measure(models: &mut [Box<dyn CausalLm>], batch_size: usize, args: &Args) -> Result<Measured> {
    // Every timed or warm-up step advances the decode rows by a token; a
    // prompt needs room for its tokens.
    let step_kinds = 1 + args.prompt_tokens.len();
    let total_steps = models.len() * (WARM_UP_STEPS + args.steps) * step_kinds;
    let prompt_room = if args.prompt_tokens.is_empty() {
        0
    } else {
        args.prompt_len
    };
    let blocks_per_seq = (args.context + total_steps)
        .max(prompt_room)
        .div_ceil(BLOCK_SIZE);
    // The prompts of a step with prompt tokens: sequences after the
    // batch's, whose context stays empty, so that each step prefills
    // them afresh in the same blocks.
    let max_prompts = args
        .prompt_tokens
        .iter()
        .map(|t| t.div_ceil(args.prompt_len))
        .max()
        .unwrap_or(0);
    let first = &models[0];
    let mut cache = KvCache::new(
        first.config(),
        (batch_size + max_prompts) * blocks_per_seq,
        BLOCK_SIZE,
        first.device(),
        first.dtype(),
    )?;
    let mut batch = Batch {
        contexts: vec![0; batch_size + max_prompts],
        blocks_per_seq,
        vocab: first.config().vocab_size.max(6) as u32,
    };
    let prefill_start = Instant::now();
    for seq in 0..batch_size {
        let logits =
            models[0].forward(&batch.step(&[(seq, args.context)], seq as u32), &mut cache)?;
        sync(&logits)?;
        batch.contexts[seq] = args.context;
    }
    let prefill_tokens_per_s =
        (batch_size * args.context) as f64 / prefill_start.elapsed().as_secs_f64();
    let decode: Vec<(usize, usize)> = (0..batch_size).map(|seq| (seq, 1)).collect();
    let mut result = Measured {
        decode: Vec::new(),
        mean_context: 0.0,
        prefill_tokens_per_s,
        prompts: Vec::new(),
    };
    let mut context_sum = 0.0;
    // The timed steps are marked for a profiler started with profiling off
    // (`ncu --profile-from-start off`, `nsys profile -c cudaProfilerApi`),
    // which then skips the load and the prefills; without one attached,
    // starting and stopping (on drop) do nothing.
    #[cfg(feature = "cuda")]
    let _profiled = cudarc::driver::Profiler::new()?;
    for model in models.iter_mut() {
        let timed = time_steps(model.as_mut(), &mut cache, args.steps, |step| {
            let input = batch.step(&decode, step as u32);
            if step >= WARM_UP_STEPS {
                context_sum += batch.contexts[..batch_size].iter().sum::<usize>() as f64
                    / batch_size as f64
                    + 1.0;
            }
            batch.contexts[..batch_size]
                .iter_mut()
                .for_each(|c| *c += 1);
            input
        })?;
        result.decode.push(timed);
    }
    result.mean_context = context_sum / (models.len() * args.steps) as f64;
    for &tokens in &args.prompt_tokens {
        // The prompt tokens of step `i` (warm-up steps included).
        let tokens_of = |step: usize| {
            if args.vary_prompts {
                tokens - step % tokens
            } else {
                tokens
            }
        };
        let timed = WARM_UP_STEPS..WARM_UP_STEPS + args.steps;
        let mean_tokens = timed.clone().map(tokens_of).sum::<usize>() as f64 / args.steps as f64;
        let prompts = |step: usize| prompt_parts(batch_size, tokens_of(step), args.prompt_len);
        let mut measured = PromptSteps {
            tokens,
            mean_tokens,
            mixed: Vec::new(),
            alone: Vec::new(),
        };
        for model in models.iter_mut() {
            let mixed = time_steps(model.as_mut(), &mut cache, args.steps, |step| {
                let parts: Vec<(usize, usize)> =
                    decode.iter().copied().chain(prompts(step)).collect();
                let input = batch.step(&parts, step as u32);
                batch.contexts[..batch_size]
                    .iter_mut()
                    .for_each(|c| *c += 1);
                input
            })?;
            let alone = time_steps(model.as_mut(), &mut cache, args.steps, |step| {
                batch.step(&prompts(step), step as u32)
            })?;
            measured.mixed.push(mixed);
            measured.alone.push(alone);
        }
        result.prompts.push(measured);
    }
    Ok(result)
}

/// Waits for a step by bringing its greedy tokens to the host, as the
/// server does.
fn sync(logits: &Tensor) -> Result<()> {
    isobench_model::greedy_tokens(logits)?;
    Ok(())
}

fn median(mut values: Vec<Duration>) -> Duration {
    values.sort();
    values[values.len() / 2]
}

/// Device-to-device copy bandwidth in bytes/s (read + write): 10 copies
/// of 1 GiB between two preallocated buffers (`cuMemcpyDtoDAsync`, what
/// PyTorch's `copy_` does), timed with CUDA events; `None` on the CPU.
#[cfg(feature = "cuda")]
fn copy_bandwidth(device: &Device) -> Result<Option<f64>> {
    use cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT;

    let Device::Cuda(cuda) = device else {
        return Ok(None);
    };
    let stream = cuda.cuda_stream();
    let bytes = 1usize << 30;
    let copies = 10;
    let source = stream.alloc_zeros::<u8>(bytes)?;
    let mut target = stream.alloc_zeros::<u8>(bytes)?;
    stream.memcpy_dtod(&source, &mut target)?;
    let start = stream.record_event(Some(CU_EVENT_DEFAULT))?;
    for _ in 0..copies {
        stream.memcpy_dtod(&source, &mut target)?;
    }
    let end = stream.record_event(Some(CU_EVENT_DEFAULT))?;
    let seconds = f64::from(start.elapsed_ms(&end)?) / 1e3;
    Ok(Some(2.0 * (bytes * copies) as f64 / seconds))
}

#[cfg(not(feature = "cuda"))]
fn copy_bandwidth(_device: &Device) -> Result<Option<f64>> {
    Ok(None)
}

/// Bytes a decode step reads from weights: every parameter except the
/// embedding table (only a row per token is read), whose tied copy is read
/// as the LM head.
fn weight_bytes_read(model: &dyn CausalLm) -> f64 {
    let cfg = model.config();
    let embedding = if cfg.tie_word_embeddings {
        0
    } else {
        cfg.vocab_size * cfg.hidden_size
    };
    ((cfg.num_parameters() - embedding) * model.dtype().size_in_bytes()) as f64
}

/// The model with graphs on or off; the models of one run share their
/// tensors through `cache` (the 8B shape's seeded weights take half a
/// minute to generate and upload).
fn load(
    folder: &ModelFolder,
    device: &Device,
    args: &Args,
    graphs: bool,
    cache: &WeightCache,
) -> Result<Box<dyn CausalLm>> {
    let options = ModelOptions {
        dtype: args.dtype,
        cuda_graphs: graphs,
        own_kernels: !args.plain,
        ..ModelOptions::default()
    };
    let start = Instant::now();
    let mut model = load_model_cached(folder, device, &options, cache)?;
    device.synchronize()?;
    let loaded = start.elapsed();
    // The process's first steps load the kernels (on a GPU whose driver
    // cache is empty, compiling candle's PTX takes seconds): out of the
    // measured prefill.
    let mut pool = KvCache::new(model.config(), 2, BLOCK_SIZE, device, model.dtype())?;
    let warm_up = isobench_model::warm_up(model.as_mut(), &mut pool)?.unwrap_or_default();
    let kernels = match (device.is_cpu(), args.plain) {
        (_, true) => "candle (plain)".to_string(),
        (true, false) => format!("own, {}", isobench_model::cpu_kernels()),
        (false, false) => "own for single-token steps, candle for the rest".to_string(),
    };
    println!(
        "{}: {:.1} M parameters, {:?} on {:?}, graphs {}, kernels {kernels}, loaded in {:.1} s, \
         warm-up steps {:.2} s",
        folder.name(),
        folder.config().num_parameters() as f64 / 1e6,
        model.dtype(),
        device.location(),
        if graphs { "on" } else { "off" },
        loaded.as_secs_f64(),
        warm_up.as_secs_f64()
    );
    Ok(model)
}

fn bench(args: &Args) -> Result<()> {
    let device = parse_device(&args.device)?;
    let folder = ModelFolder::open(&args.model)?;
    let bandwidth = copy_bandwidth(&device)?;
    if let Some(bandwidth) = bandwidth {
        println!(
            "device-to-device copy bandwidth: {:.2} TB/s (read + write)",
            bandwidth / 1e12
        );
    }
    let cache = WeightCache::new();
    let mut models = args
        .modes
        .iter()
        .map(|&graphs| load(&folder, &device, args, graphs, &cache))
        .collect::<Result<Vec<_>>>()?;
    let cfg = folder.config().clone();
    let weights = weight_bytes_read(models[0].as_ref());
    let kv_per_token = KvCache::bytes_per_block(&cfg, 1, models[0].dtype()) as f64;
    let column = |graphs: bool| args.modes.iter().position(|&m| m == graphs);
    println!(
        "context {} tokens, median of {} steps; step times from {}",
        args.context,
        args.steps,
        if device.is_cpu() {
            "the host clock"
        } else {
            "CUDA events"
        }
    );
    println!(
        "batch  eager ms  launch ms  graph ms  floor ms  % of floor  decode tok/s  prefill tok/s"
    );
    for &batch_size in &args.batches {
        let measured = measure(&mut models, batch_size, args)?;
        let ms = |graphs: bool| column(graphs).map(|i| millis(measured.decode[i].device));
        let (eager, graph) = (ms(false), ms(true));
        let launch = column(false).map(|i| millis(measured.decode[i].issue));
        let best = graph.or(eager).unwrap_or(f64::NAN);
        let kv_bytes = kv_per_token * measured.mean_context * batch_size as f64;
        let floor = bandwidth.map(|b| (weights + kv_bytes) / b * 1e3);
        let tokens_per_s = batch_size as f64 * 1e3 / best;
        let show = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.3}"));
        println!(
            "{batch_size:>5}  {:>8}  {:>9}  {:>8}  {:>8}  {:>10}  {tokens_per_s:>12.0}  {:>13.0}",
            show(eager),
            show(launch),
            show(graph),
            show(floor),
            floor.map_or("-".into(), |f| format!("{:.0}%", f / best * 100.0)),
            measured.prefill_tokens_per_s
        );
        let json = serde_json::json!({
            "bench": "step_bench",
            "model": folder.name(),
            "device": args.device,
            "dtype": format!("{:?}", models[0].dtype()).to_lowercase(),
            "batch": batch_size,
            "context": args.context,
            "mean_context": measured.mean_context,
            "eager_ms": eager,
            "graph_ms": graph,
            "graph_replayed": column(true).map(|i| measured.decode[i].replayed),
            "host_ms": measured.decode.iter().map(|t| millis(t.host)).collect::<Vec<_>>(),
            "issue_ms": measured.decode.iter().map(|t| millis(t.issue)).collect::<Vec<_>>(),
            "launch_ms": launch,
            "floor_ms": floor,
            "weight_bytes": weights,
            "kv_bytes": kv_bytes,
            "copy_bandwidth_bytes_per_s": bandwidth,
            "percent_of_floor": floor.map(|f| f / best * 100.0),
            "decode_tokens_per_s": tokens_per_s,
            "prefill_tokens_per_s": measured.prefill_tokens_per_s,
        });
        println!("JSON {json}");
        for prompts in &measured.prompts {
            print_prompt_steps(&folder, args, batch_size, &measured, prompts);
        }
    }
    Ok(())
}

fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// One line per model (eager, graphs) and its JSON for steps with prompt
/// tokens: the mixed step's time over the decode step's, per prompt token,
/// against the prompts alone.
fn print_prompt_steps(
    folder: &ModelFolder,
    args: &Args,
    batch_size: usize,
    measured: &Measured,
    prompts: &PromptSteps,
) {
    let count = prompts.tokens.div_ceil(args.prompt_len);
    for (i, &graphs) in args.modes.iter().enumerate() {
        let decode = millis(measured.decode[i].device);
        let (mixed, alone) = (&prompts.mixed[i], &prompts.alone[i]);
        let added = millis(mixed.device) - decode;
        let per_token = |ms: f64| ms * 1e3 / prompts.mean_tokens;
        let replays = |t: &Timed| if t.replayed { ", replayed" } else { "" };
        let varied = if args.vary_prompts {
            format!(", a token fewer each step, mean {:.1}", prompts.mean_tokens)
        } else {
            String::new()
        };
        println!(
            "{batch_size:>5}  + {} prompt tokens ({count} prompt{} of up to {}{varied}), {}: \
             mixed {:.3} ms{} ({added:+.3} over the decode step: {:.2} us a prompt token), \
             alone {:.3} ms{} ({:.2} us a token)",
            prompts.tokens,
            if count == 1 { "" } else { "s" },
            args.prompt_len,
            if graphs { "graphs" } else { "eager" },
            millis(mixed.device),
            replays(mixed),
            per_token(added),
            millis(alone.device),
            replays(alone),
            per_token(millis(alone.device)),
        );
        let json = serde_json::json!({
            "bench": "step_bench_prompts",
            "model": folder.name(),
            "device": args.device,
            "batch": batch_size,
            "context": args.context,
            "graphs": graphs,
            "prompt_tokens": prompts.tokens,
            "prompt_len": args.prompt_len,
            "vary_prompts": args.vary_prompts,
            "mean_prompt_tokens": prompts.mean_tokens,
            "decode_ms": decode,
            "mixed_ms": millis(mixed.device),
            "mixed_replayed": mixed.replayed,
            "mixed_issue_ms": millis(mixed.issue),
            "alone_ms": millis(alone.device),
            "alone_replayed": alone.replayed,
            "alone_issue_ms": millis(alone.issue),
            "us_per_prompt_token_mixed": per_token(added),
            "us_per_prompt_token_alone": per_token(millis(alone.device)),
        });
        println!("JSON {json}");
    }
}

fn main() {
    let outcome = parse_args().and_then(|args| {
        if args.check {
            check::run(&args).map(|passed| if passed { 0 } else { 1 })
        } else {
            bench(&args).map(|()| 0)
        }
    });
    match outcome {
        Ok(code) => std::process::exit(code),
        Err(err) => {
            eprintln!("step_bench: {err}");
            std::process::exit(2);
        }
    }
}
