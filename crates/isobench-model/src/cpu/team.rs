//! The threads a CPU step runs on: one persistent team per process, the
//! caller plus one worker per further core, sharing each parallel section
//! through an atomic cursor over its work items.
//!
//! A step has a few parallel sections per layer (four projections and the
//! attention), each tens of microseconds long at small batch, so handing
//! each to a thread pool that has gone to sleep would cost more than the
//! section. Here a worker that finishes spins (with `pause`) for up to
//! [`SPIN`] waiting for the next section, and only then parks; while a step
//! runs, sections start with one atomic store.
//!
//! The machine may be shared, and a spinning wait on a thread the kernel
//! has descheduled can cost a whole time slice. So nothing ever waits for a
//! particular thread to *start*: every thread, the caller included, takes
//! chunks of items from the shared cursor until none are left, so a late
//! worker simply finds less (or no) work; the caller then waits only for
//! the chunks already taken, spinning briefly and then yielding its core.

use std::cell::UnsafeCell;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::thread::Thread;
use std::time::{Duration, Instant};

/// How long an idle worker spins before it parks.
const SPIN: Duration = Duration::from_micros(200);
/// How long the caller spins for taken chunks before it yields.
const WAIT_SPIN: Duration = Duration::from_micros(50);

/// The work of one section: `f` over chunks of `0..items`.
#[derive(Clone, Copy)]
struct Job {
    call: unsafe fn(*const (), Range<usize>),
    data: *const (),
    items: usize,
    chunk: usize,
}

struct Shared {
    /// Bumped (by 2) for every section; odd while a section is open.
    generation: AtomicUsize,
    job: UnsafeCell<Job>,
    cursor: AtomicUsize,
    /// Threads inside the open section's closure.
    active: AtomicUsize,
    panicked: AtomicBool,
    sleeping: Vec<AtomicBool>,
    threads: OnceLock<Vec<Thread>>,
}

// SAFETY: `job` is written only by the caller holding `Team::lock`, before
// the generation that publishes it (Release) and read by workers after they
// see that generation (Acquire) and joined `active`.
unsafe impl Sync for Shared {}

pub(crate) struct Team {
    shared: &'static Shared,
    workers: usize,
    /// One section at a time.
    lock: Mutex<()>,
}

/// The process's team.
fn team() -> &'static Team {
    static TEAM: OnceLock<Team> = OnceLock::new();
    TEAM.get_or_init(|| Team::new(candle_core::utils::get_num_threads().max(1) - 1))
}

/// How many threads a parallel section can run on (the caller included).
pub(crate) fn threads() -> usize {
    team().workers + 1
}

/// Runs `f` over chunks of `chunk` items covering `0..items`, on the team.
/// `f` is told the chunk's range; every item is in exactly one chunk.
pub(crate) fn for_chunks(items: usize, chunk: usize, f: impl Fn(Range<usize>) + Sync) {
    let chunk = chunk.max(1);
    if items <= chunk || team().workers == 0 {
        if items > 0 {
            f(0..items);
        }
        return;
    }
    team().run(items, chunk, &f);
}

/// Splits `0..n` into about four chunks per thread, multiples of `align`
/// (the last excepted), and runs `f` on each (see [`for_chunks`]).
pub(crate) fn split(n: usize, align: usize, f: impl Fn(Range<usize>) + Sync) {
    let units = n.div_ceil(align);
    let per_chunk = units.div_ceil(4 * threads()).max(1);
    let chunk = per_chunk * align;
    for_chunks(n, chunk, f);
}

/// Runs `f` once per thread of the team, with the thread's part index in
/// `0..threads()` (each index once, though not necessarily on distinct
/// threads: a late worker's part is taken by another).
pub(crate) fn per_part(f: impl Fn(usize) + Sync) {
    for_chunks(threads(), 1, |range| {
        for part in range {
            f(part);
        }
    });
}

unsafe fn call<F: Fn(Range<usize>) + Sync>(data: *const (), range: Range<usize>) {
    // SAFETY: `data` is the `&F` the caller of `run` keeps alive until every
    // thread has left the section.
    unsafe { (*data.cast::<F>())(range) }
}

impl Team {
    fn new(workers: usize) -> Self {
        let shared: &'static Shared = Box::leak(Box::new(Shared {
            generation: AtomicUsize::new(0),
            job: UnsafeCell::new(Job {
                call: call::<fn(Range<usize>)>,
                data: std::ptr::null(),
                items: 0,
                chunk: 1,
            }),
            cursor: AtomicUsize::new(0),
            active: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
            sleeping: (0..workers).map(|_| AtomicBool::new(false)).collect(),
            threads: OnceLock::new(),
        }));
        let threads = (0..workers)
            .map(|index| {
                std::thread::Builder::new()
                    .name(format!("isobench-cpu-{index}"))
                    .spawn(move || worker(shared, index))
                    .expect("cannot start a CPU worker thread")
                    .thread()
                    .clone()
            })
            .collect();
        let _ = shared.threads.set(threads);
        Self {
            shared,
            workers,
            lock: Mutex::new(()),
        }
    }

    fn run<F: Fn(Range<usize>) + Sync>(&self, items: usize, chunk: usize, f: &F) {
        let _section = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        let s = self.shared;
        // SAFETY: no section is open (the lock), so no worker reads `job`.
        unsafe {
            *s.job.get() = Job {
                call: call::<F>,
                data: (f as *const F).cast(),
                items,
                chunk,
            };
        }
        s.cursor.store(0, Ordering::Relaxed);
        let open = s.generation.load(Ordering::Relaxed) + 1;
        s.generation.store(open, Ordering::SeqCst);
        if let Some(threads) = s.threads.get() {
            for (thread, sleeping) in threads.iter().zip(&s.sleeping) {
                if sleeping.load(Ordering::SeqCst) {
                    thread.unpark();
                }
            }
        }
        take_chunks(
            s,
            &Job {
                call: call::<F>,
                data: (f as *const F).cast(),
                items,
                chunk,
            },
        );
        // Close the section, then wait for the chunks workers took.
        s.generation.store(open + 1, Ordering::SeqCst);
        let start = Instant::now();
        let mut spins = 0u32;
        let mut spinning = true;
        while s.active.load(Ordering::SeqCst) != 0 {
            spins += 1;
            // The clock is read every 64 spins only.
            if spinning && spins.is_multiple_of(64) {
                spinning = start.elapsed() < WAIT_SPIN;
            }
            if spinning {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        if s.panicked.swap(false, Ordering::SeqCst) {
            panic!("a CPU kernel panicked on a worker thread");
        }
    }
}

/// Takes chunks of the open section until none are left.
fn take_chunks(s: &Shared, job: &Job) {
    loop {
        let start = s.cursor.fetch_add(job.chunk, Ordering::Relaxed);
        if start >= job.items {
            return;
        }
        // SAFETY: the job's closure outlives the section (see `call`).
        unsafe { (job.call)(job.data, start..job.items.min(start + job.chunk)) };
    }
}

fn worker(s: &'static Shared, index: usize) {
    let mut seen = s.generation.load(Ordering::SeqCst);
    loop {
        let mut idle = Instant::now();
        let mut spins = 0u32;
        let open = loop {
            let generation = s.generation.load(Ordering::Acquire);
            if generation != seen && generation % 2 == 1 {
                break generation;
            }
            seen = generation;
            spins += 1;
            if !spins.is_multiple_of(64) || idle.elapsed() < SPIN {
                std::hint::spin_loop();
                continue;
            }
            s.sleeping[index].store(true, Ordering::SeqCst);
            if s.generation.load(Ordering::SeqCst) == seen {
                std::thread::park();
            }
            s.sleeping[index].store(false, Ordering::SeqCst);
            idle = Instant::now();
        };
        seen = open;
        // Join, then check the section is still open: the caller closes it
        // before it waits for `active`, so either it sees us or we see it
        // closed.
        s.active.fetch_add(1, Ordering::SeqCst);
        if s.generation.load(Ordering::SeqCst) == open {
            // SAFETY: the section is open and we are counted in `active`,
            // so the caller keeps the job and its closure alive.
            let job = unsafe { *s.job.get() };
            let result =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| take_chunks(s, &job)));
            if result.is_err() {
                s.panicked.store(true, Ordering::SeqCst);
            }
        }
        s.active.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_item_runs_exactly_once_whatever_the_chunking() {
        for items in [0, 1, 2, 7, 64, 1000] {
            for chunk in [1, 3, 64] {
                let counts: Vec<AtomicUsize> = (0..items).map(|_| AtomicUsize::new(0)).collect();
                for_chunks(items, chunk, |range| {
                    assert!(range.len() <= chunk.max(1));
                    for i in range {
                        counts[i].fetch_add(1, Ordering::Relaxed);
                    }
                });
                assert!(counts.iter().all(|c| c.load(Ordering::Relaxed) == 1));
            }
        }
    }

    #[test]
    fn split_cuts_at_aligned_offsets_and_parts_run_once_each() {
        let cuts = Mutex::new(Vec::new());
        split(1000, 32, |range| cuts.lock().unwrap().push(range));
        let mut cuts = cuts.into_inner().unwrap();
        cuts.sort_by_key(|r| r.start);
        assert_eq!(cuts[0].start, 0);
        assert_eq!(cuts.last().unwrap().end, 1000);
        for pair in cuts.windows(2) {
            assert_eq!(pair[0].end, pair[1].start);
            assert_eq!(pair[0].end % 32, 0);
        }
        let parts: Vec<AtomicUsize> = (0..threads()).map(|_| AtomicUsize::new(0)).collect();
        per_part(|part| {
            parts[part].fetch_add(1, Ordering::Relaxed);
        });
        assert!(parts.iter().all(|p| p.load(Ordering::Relaxed) == 1));
    }

    #[test]
    fn sections_from_many_threads_do_not_mix() {
        let handles: Vec<_> = (0..4)
            .map(|t| {
                std::thread::spawn(move || {
                    for round in 0..50 {
                        let sum = AtomicUsize::new(0);
                        for_chunks(100 + t, 7, |range| {
                            sum.fetch_add(range.map(|i| i + round).sum(), Ordering::Relaxed);
                        });
                        let n = 100 + t;
                        assert_eq!(sum.into_inner(), n * (n - 1) / 2 + n * round);
                    }
                })
            })
            .collect();
        for handle in handles {
            handle.join().unwrap();
        }
    }
}
