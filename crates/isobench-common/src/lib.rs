//! isobench-common: the small pieces that several isobench crates use (the
//! workload planner, the load generator, the mock endpoint, the model and
//! the server), so that each has one home.
//!
//! - [`Distribution`]: a distribution of non-negative values (latencies in
//!   ms, token counts) in the compact form of the command line
//!   (`normal:50,5`), drawn with any seeded [`rand::Rng`]. Workload files,
//!   `isobench run` flags and `isobench mock` flags all parse it.
//! - [`precise`]: how a thread waits for an instant to within microseconds
//!   (tight timer slack, a sleep, then a short spin): the load generator's
//!   pacer and the mock's timer thread both wait this way.
//! - [`math`]: an `exp` that vectorises, for the CPU model's softmax and
//!   SwiGLU and the server's sampler.
//!
//! It depends on nothing of isobench's, and on nothing heavy (no TOML, no
//! tokenizer, no HTTP), so that the mock does not pull in the workload
//! crate to read a latency flag.

mod distribution;
pub mod math;
pub mod precise;

pub use distribution::{DISTRIBUTION_FORMS, Distribution, DistributionError};
