//! How fast a workload's plan produces requests: prompt synthesis (exact
//! with a tokenizer, approximate without), lengths and offsets. The load
//! engine draws from the plan while it runs, so this bounds the request rate
//! a plan can feed.
//!
//! ```text
//! cargo run --release -p isobench-workload --example plan_throughput -- \
//!     WORKLOAD.toml [TOKENIZER.json] [REQUESTS]
//! ```

use std::path::PathBuf;
use std::time::Instant;

use isobench_workload::{Overrides, Workload};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: plan_throughput WORKLOAD.toml [TOKENIZER.json] [REQUESTS]";
    let workload_path = PathBuf::from(args.next().ok_or(usage)?);
    let tokenizer = args.next().map(PathBuf::from);
    let requests: u64 = args.next().map_or(Ok(2000), |n| n.parse())?;

    let mut workload = Workload::from_file(&workload_path)?;
    // Count-bounded and closed, so that timing covers content, not the schedule's horizon.
    workload.apply(&Overrides {
        max_requests: Some(requests),
        warmup: Some(0),
        ..Overrides::default()
    })?;
    let tokenizers = std::iter::once(None).chain(tokenizer.as_deref().map(Some));
    for tokenizer in tokenizers {
        let started = Instant::now();
        let plan = workload.plan(tokenizer)?;
        let setup = started.elapsed();
        let started = Instant::now();
        let (mut count, mut input_tokens) = (0u64, 0u64);
        for request in plan.requests {
            count += 1;
            input_tokens += u64::from(request.input_tokens);
        }
        let elapsed = started.elapsed().as_secs_f64();
        println!(
            "{} with {}: setup {:.1} ms, {count} requests in {:.3} s = {:.0} requests/s, \
             {:.1} us/request, mean prompt {:.0} tokens",
            workload.name(),
            tokenizer.map_or("no tokenizer".to_string(), |t| t.display().to_string()),
            setup.as_secs_f64() * 1e3,
            elapsed,
            count as f64 / elapsed,
            elapsed * 1e6 / count as f64,
            input_tokens as f64 / count as f64,
        );
    }
    Ok(())
}
