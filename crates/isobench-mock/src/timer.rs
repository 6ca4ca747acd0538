//! A timer precise to a few microseconds, for the injected delays.
//!
//! tokio's timer rounds every sleep up to the next millisecond, which would
//! distort an injected 2 ms inter-token latency by up to 50%. Sleeps here
//! are registered with one timer thread per server, which keeps them in a
//! heap ordered by deadline and waits for the earliest one as
//! [`isobench_common::precise`] says (timer slack cut to 1 ns, a park until
//! just before the deadline, then a short spin), then wakes the sleeping
//! task. Every deadline is absolute, so an event stream's delays do not
//! accumulate error.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::thread::Thread;
use std::time::{Duration, Instant};

use isobench_common::precise;

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
                precise::tighten_timer_slack();
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
        let wait = match next {
            None => Some(IDLE_PARK),
            Some(deadline) => precise::next_wait(
                deadline.saturating_duration_since(Instant::now()),
                IDLE_PARK,
            ),
        };
        match wait {
            Some(park) => std::thread::park_timeout(park),
            None => std::hint::spin_loop(),
        }
    }
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

    /// How late the sleeps end is the loadgen benchmark's to measure
    /// (docs/performance.md, the `(mock)` rows): a shared test machine
    /// cannot bound it. What must hold anywhere: never early.
    #[tokio::test]
    async fn sleeps_never_end_before_their_deadline() {
        let timer = PreciseTimer::start().unwrap();
        for delay_us in [0u64, 30, 300, 1_500, 2_250] {
            let deadline = Instant::now() + Duration::from_micros(delay_us);
            timer.sleep_until(deadline).await;
            assert!(
                Instant::now() >= deadline,
                "woke before a {delay_us} µs deadline"
            );
        }
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
