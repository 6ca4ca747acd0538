//! The running slots of `--max-running`: at most `limit` answers generate
//! at once, the others wait in a first-come, first-served queue.
//!
//! The free slots and the queue change under one lock, and a freed slot
//! passes straight to the oldest waiter, so a reading of [`RunSlots::counts`]
//! never shows a queue beside a free slot (as a semaphore plus a separate
//! waiting counter could, between a request counting itself and taking its
//! permit).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::oneshot;

/// Running and waiting answers, read together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotCounts {
    pub running: usize,
    pub waiting: usize,
}

/// The `--max-running` slots and their queue.
#[derive(Debug)]
pub struct RunSlots {
    limit: usize,
    inner: Mutex<Inner>,
}

#[derive(Debug)]
struct Inner {
    free: usize,
    /// Waiters by ticket, oldest first; a freed slot is sent to the front.
    queue: VecDeque<(u64, oneshot::Sender<()>)>,
    next_ticket: u64,
}

/// A held running slot; dropping it frees the slot for the next waiter.
#[derive(Debug)]
pub struct RunSlot(Arc<RunSlots>);

impl Drop for RunSlot {
    fn drop(&mut self) {
        self.0.release(&mut self.0.lock());
    }
}

/// A place in the queue; dropped before its slot came (the client went
/// away), it leaves the queue, or passes on a slot that came meanwhile.
struct Waiter<'a> {
    slots: &'a Arc<RunSlots>,
    ticket: u64,
    /// Kept alive until `drop` has looked at the queue, so a slot sent to
    /// this waiter is never lost.
    granted: oneshot::Receiver<()>,
    served: bool,
}

impl Drop for Waiter<'_> {
    fn drop(&mut self) {
        if self.served {
            return;
        }
        let mut inner = self.slots.lock();
        match inner.queue.iter().position(|(t, _)| *t == self.ticket) {
            Some(place) => {
                inner.queue.remove(place);
            }
            // Taken off the queue by a release: the slot was sent here.
            None => self.slots.release(&mut inner),
        }
    }
}

impl RunSlots {
    /// `limit` slots, all free; `limit` is at least 1 (the config checks it).
    pub fn new(limit: usize) -> Arc<Self> {
        Arc::new(Self {
            limit,
            inner: Mutex::new(Inner {
                free: limit,
                queue: VecDeque::new(),
                next_ticket: 0,
            }),
        })
    }

    /// Takes a free slot, or waits for one in turn. `on_queued` is called
    /// with the queue's length when this request joins it.
    pub async fn acquire(self: &Arc<Self>, on_queued: impl FnOnce(usize)) -> RunSlot {
        let (ticket, granted) = {
            let mut inner = self.lock();
            if inner.free > 0 {
                inner.free -= 1;
                return RunSlot(Arc::clone(self));
            }
            let (send, granted) = oneshot::channel();
            let ticket = inner.next_ticket;
            inner.next_ticket += 1;
            inner.queue.push_back((ticket, send));
            on_queued(inner.queue.len());
            (ticket, granted)
        };
        let mut waiter = Waiter {
            slots: self,
            ticket,
            granted,
            served: false,
        };
        // The sender is dropped only after sending: by `release`, or by this
        // waiter's own `drop`, which has not run.
        let _ = (&mut waiter.granted).await;
        waiter.served = true;
        RunSlot(Arc::clone(self))
    }

    /// The answers holding a slot and those queued for one.
    pub fn counts(&self) -> SlotCounts {
        let inner = self.lock();
        SlotCounts {
            running: self.limit - inner.free,
            waiting: inner.queue.len(),
        }
    }

    /// Hands a freed slot to the oldest live waiter, or marks it free.
    fn release(&self, inner: &mut Inner) {
        while let Some((_, send)) = inner.queue.pop_front() {
            if send.send(()).is_ok() {
                return;
            }
        }
        inner.free += 1;
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // The lock guards plain counters: a panic elsewhere leaves them whole.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures_util::FutureExt;

    use super::*;

    #[tokio::test]
    async fn a_freed_slot_goes_to_the_oldest_waiter() {
        let slots = RunSlots::new(1);
        let first = slots.acquire(|_| panic!("a free slot")).await;
        let second = tokio::spawn({
            let slots = Arc::clone(&slots);
            async move { slots.acquire(|len| assert_eq!(len, 1)).await }
        });
        while slots.counts().waiting < 1 {
            tokio::task::yield_now().await;
        }
        let third = tokio::spawn({
            let slots = Arc::clone(&slots);
            async move { slots.acquire(|len| assert_eq!(len, 2)).await }
        });
        while slots.counts().waiting < 2 {
            tokio::task::yield_now().await;
        }
        assert_eq!(
            slots.counts(),
            SlotCounts {
                running: 1,
                waiting: 2
            }
        );
        drop(first);
        // Handed over, not freed: still one running, one waiting.
        assert_eq!(
            slots.counts(),
            SlotCounts {
                running: 1,
                waiting: 1
            }
        );
        let second = second.await.unwrap();
        assert!(!third.is_finished());
        drop(second);
        drop(third.await.unwrap());
        assert_eq!(
            slots.counts(),
            SlotCounts {
                running: 0,
                waiting: 0
            }
        );
    }

    #[tokio::test]
    async fn a_waiter_that_goes_away_leaves_the_queue_and_loses_no_slot() {
        let slots = RunSlots::new(1);
        let held = slots.acquire(|_| {}).await;
        let gone = tokio::spawn({
            let slots = Arc::clone(&slots);
            async move { slots.acquire(|_| {}).await }
        });
        while slots.counts().waiting < 1 {
            tokio::task::yield_now().await;
        }
        gone.abort();
        assert!(gone.await.unwrap_err().is_cancelled());
        assert_eq!(slots.counts().waiting, 0);
        drop(held);
        // The one slot is free again: taken at once.
        let again = tokio::time::timeout(Duration::from_secs(5), slots.acquire(|_| {}))
            .await
            .expect("the slot came back");
        assert_eq!(slots.counts().running, 1);
        drop(again);
    }

    #[test]
    fn a_slot_sent_to_a_waiter_dropped_before_it_looked_is_passed_on() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        runtime.block_on(async {
            let slots = RunSlots::new(1);
            let held = slots.acquire(|_| {}).await;
            let mut waiting = Box::pin(slots.acquire(|_| {}));
            // Poll once: it joins the queue.
            assert!(waiting.as_mut().now_or_never().is_none());
            // The slot is sent to it; it goes away without having looked.
            drop(held);
            drop(waiting);
            assert_eq!(
                slots.counts(),
                SlotCounts {
                    running: 0,
                    waiting: 0
                }
            );
        });
    }
}
