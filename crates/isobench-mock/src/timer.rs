//! A timer precise to a few microseconds, for the injected delays.
//!
//! tokio's timer rounds every sleep up to the next millisecond, which would
//! distort an injected 2 ms inter-token latency by up to 50%. Sleeps here
//! are registered with one timer thread per server, which keeps them in a
//! heap ordered by deadline, parks until [`SPIN_WINDOW`] before the earliest
//! one (with the kernel's timer slack cut to 1 ns, a parked thread wakes
//! some tens of microseconds late in a virtual machine), then spins until
//! the deadline and wakes the sleeping task.
//! Every deadline is absolute, so an event stream's delays do not
//! accumulate error.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::thread::Thread;
use std::time::{Duration, Instant};

/// How long before a deadline the timer thread stops parking and spins.
const SPIN_WINDOW: Duration = Duration::from_micros(25);

/// The longest the idle timer thread parks before checking whether the
/// server is gone.
const IDLE_PARK: Duration = Duration::from_millis(100);

/// A handle on the timer thread; clones share it. The thread ends once
/// every handle and sleep is dropped.
#[derive(Clone)]
pub(crate) struct PreciseTimer {
    shared: Arc<Shared>,
}

struct Shared {
    sleepers: Mutex<BinaryHeap<Reverse<Sleeper>>>,
    thread: Thread,
}

struct Sleeper {
    deadline: Instant,
    waker: Waker,
}

impl PartialEq for Sleeper {
    fn eq(&self, other: &Self) -> bool {
        self.deadline == other.deadline
    }
}

impl Eq for Sleeper {}

impl PartialOrd for Sleeper {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Sleeper {
    fn cmp(&self, other: &Self) -> Ordering {
        self.deadline.cmp(&other.deadline)
    }
}

impl PreciseTimer {
    /// Starts the timer thread.
    pub fn start() -> std::io::Result<Self> {
        let (sender, receiver) = std::sync::mpsc::channel::<Arc<Shared>>();
        let thread = std::thread::Builder::new()
            .name("isobench-mock-timer".into())
            .spawn(move || {
                tighten_timer_slack();
                if let Ok(shared) = receiver.recv() {
                    run(&shared);
                }
            })?;
        let shared = Arc::new(Shared {
            sleepers: Mutex::new(BinaryHeap::new()),
            thread: thread.thread().clone(),
        });
        // The thread is waiting for exactly this message.
        let _ = sender.send(Arc::clone(&shared));
        Ok(Self { shared })
    }

    /// A future that completes at `deadline`.
    pub fn sleep_until(&self, deadline: Instant) -> PreciseSleep {
        PreciseSleep {
            shared: Arc::clone(&self.shared),
            deadline,
            registered: None,
        }
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, BinaryHeap<Reverse<Sleeper>>> {
        // The heap holds no invariant a panic could break.
        self.sleepers.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The timer thread's loop.
fn run(shared: &Arc<Shared>) {
    let mut due = Vec::new();
    loop {
        let next = {
            let mut sleepers = shared.lock();
            let now = Instant::now();
            while sleepers.peek().is_some_and(|s| s.0.deadline <= now) {
                if let Some(Reverse(sleeper)) = sleepers.pop() {
                    due.push(sleeper.waker);
                }
            }
            sleepers.peek().map(|s| s.0.deadline)
        };
        for waker in due.drain(..) {
            waker.wake();
        }
        // Only this thread's own reference is left: the server is gone.
        if Arc::strong_count(shared) == 1 {
            return;
        }
        match next.map(|deadline| deadline.saturating_duration_since(Instant::now())) {
            None => std::thread::park_timeout(IDLE_PARK),
            Some(remaining) if remaining > SPIN_WINDOW => {
                std::thread::park_timeout((remaining - SPIN_WINDOW).min(IDLE_PARK));
            }
            Some(_) => std::hint::spin_loop(),
        }
    }
}

/// Asks the kernel to wake this thread when it asked to, instead of up to
/// 50 µs later (Linux's default timer slack). Elsewhere, the default stays.
fn tighten_timer_slack() {
    #[cfg(target_os = "linux")]
    let _ = rustix::thread::set_current_timer_slack(std::num::NonZeroU64::new(1));
}

/// Completes at its deadline; see [`PreciseTimer::sleep_until`].
pub(crate) struct PreciseSleep {
    shared: Arc<Shared>,
    deadline: Instant,
    /// The waker last handed to the timer thread.
    registered: Option<Waker>,
}

impl Future for PreciseSleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if Instant::now() >= self.deadline {
            return Poll::Ready(());
        }
        if self
            .registered
            .as_ref()
            .is_some_and(|waker| waker.will_wake(cx.waker()))
        {
            return Poll::Pending;
        }
        let waker = cx.waker().clone();
        self.registered = Some(waker.clone());
        let deadline = self.deadline;
        let earliest = {
            let mut sleepers = self.shared.lock();
            let earliest = sleepers.peek().is_none_or(|s| deadline < s.0.deadline);
            sleepers.push(Reverse(Sleeper { deadline, waker }));
            earliest
        };
        if earliest {
            self.shared.thread.unpark();
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn sleeps_end_at_their_deadline_not_a_millisecond_later() {
        let timer = PreciseTimer::start().unwrap();
        let mut lateness = Vec::new();
        for delay_us in [300u64, 1_500, 2_250].repeat(3) {
            let deadline = Instant::now() + Duration::from_micros(delay_us);
            timer.sleep_until(deadline).await;
            lateness.push(Instant::now().duration_since(deadline));
        }
        // The median, generously: the point is "not rounded up to the next
        // millisecond" (tokio's timer), on a possibly busy CI machine.
        lateness.sort();
        assert!(lateness[4] < Duration::from_micros(500), "{lateness:?}");
    }

    #[tokio::test]
    async fn many_sleepers_wake_in_deadline_order() {
        let timer = PreciseTimer::start().unwrap();
        let start = Instant::now();
        let order = Arc::new(Mutex::new(Vec::new()));
        let tasks: Vec<_> = [3u64, 1, 2]
            .into_iter()
            .map(|ms| {
                let (timer, order) = (timer.clone(), Arc::clone(&order));
                tokio::spawn(async move {
                    timer.sleep_until(start + Duration::from_millis(ms)).await;
                    order.lock().unwrap().push(ms);
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
        assert_eq!(*order.lock().unwrap(), [1, 2, 3]);
    }
}
