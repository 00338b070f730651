//! The queue from a region's handles (and their entity references) to the kind's task:
//! bounded, any number of senders, one receiver that takes messages in batches.
//!
//! tokio's bounded `mpsc` did this job before, and took about a sixth of a proxy's samples:
//! every send wrote three atomics the receiver also reads or writes (the permit semaphore,
//! the block list's tail and ready bits, the receiver's waker state), so on two workers those
//! cache lines crossed cores on every message, and a sender waiting for room was woken as
//! soon as one batch had been taken, to push one batch and wait again.
//!
//! Here a send is one uncontended lock the receiver takes once per batch, plus a push; the
//! receiver is woken only when it waits for an empty queue. Senders that wait for room are
//! woken once a quarter of the queue (at most [`MAX_WAKE_ROOM`] messages) is free, so that
//! a steady sender and the kind's task hand the core to each other once per thousands of
//! messages, not once per batch; while they wait, that quarter is kept for them, so that
//! senders retrying `try_send` at once cannot starve them (tokio's channel gives freed places
//! to waiting senders first; this keeps that promise). The bound is what it was: `capacity`
//! messages.

use std::collections::VecDeque;
use std::future::poll_fn;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use tokio::sync::Notify;

/// Senders waiting for room are woken once at least this many places are free (or a quarter
/// of the queue, if that is less).
const MAX_WAKE_ROOM: usize = 4096;
/// An empty queue whose buffer grew beyond this many places gives the rest back: a burst
/// does not keep its memory for the life of the kind.
const KEEP_CAPACITY: usize = 4096;

/// Why [`Sender::try_send`] did not queue the message, which it gives back.
#[derive(Debug)]
pub(crate) enum TrySendError<T> {
    /// The queue holds `capacity` messages.
    Full(T),
    /// The receiver is gone (the kind's task has ended).
    Closed(T),
}

/// [`Sender::send`] failed: the receiver is gone. The message is given back.
#[derive(Debug)]
pub(crate) struct Closed<T>(pub T);

/// A bounded queue of `capacity` messages (at least one).
pub(crate) fn channel<T>(capacity: usize) -> (Sender<T>, Receiver<T>) {
    let capacity = capacity.max(1);
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            items: VecDeque::new(),
            receiver: None,
            closed: false,
        }),
        capacity,
        wake_room: (capacity / 4).clamp(1, MAX_WAKE_ROOM),
        senders: AtomicUsize::new(1),
        waiting: AtomicUsize::new(0),
        room: Notify::new(),
    });
    (
        Sender {
            shared: Arc::clone(&shared),
        },
        Receiver { shared },
    )
}

struct Shared<T> {
    state: Mutex<State<T>>,
    capacity: usize,
    /// Free places that make it worth waking the senders waiting for room.
    wake_room: usize,
    /// Live [`Sender`]s: when none is left and the queue is empty, the receiver is told.
    senders: AtomicUsize,
    /// Senders inside [`Sender::send`] waiting for room.
    waiting: AtomicUsize,
    room: Notify,
}

struct State<T> {
    items: VecDeque<T>,
    /// The receiver's waker, set while it waits for an empty queue to get a message.
    receiver: Option<Waker>,
    /// The receiver is gone: nothing is queued any more.
    closed: bool,
}

impl<T> Shared<T> {
    fn lock(&self) -> MutexGuard<'_, State<T>> {
        // Nothing panics while holding the lock, but a poisoned queue is still a queue.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The sending side; clones share the queue.
pub(crate) struct Sender<T> {
    shared: Arc<Shared<T>>,
}

impl<T> Clone for Sender<T> {
    fn clone(&self) -> Self {
        self.shared.senders.fetch_add(1, Ordering::Relaxed);
        Sender {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        if self.shared.senders.fetch_sub(1, Ordering::AcqRel) == 1 {
            // The last one: a receiver waiting on an empty queue learns that no more come.
            let waker = self.shared.lock().receiver.take();
            if let Some(w) = waker {
                w.wake();
            }
        }
    }
}

impl<T> Sender<T> {
    /// Queues `msg` if there is room, at once. While another sender waits for room in
    /// [`send`](Self::send), the last places of the queue are kept for it.
    pub fn try_send(&self, msg: T) -> Result<(), TrySendError<T>> {
        self.push(msg, false)
    }

    /// Queues `msg` if there is room; `waiter`: from [`send`](Self::send), which the last
    /// places are kept for. Without that reserve, senders that retry at once would take every
    /// place the kind frees, one at a time, and the room a waiting sender is woken for would
    /// never come.
    fn push(&self, msg: T, waiter: bool) -> Result<(), TrySendError<T>> {
        let mut state = self.shared.lock();
        if state.closed {
            return Err(TrySendError::Closed(msg));
        }
        let free = self.shared.capacity - state.items.len();
        let reserved = !waiter
            && free < self.shared.wake_room
            && self.shared.waiting.load(Ordering::Relaxed) > 0;
        if free == 0 || reserved {
            return Err(TrySendError::Full(msg));
        }
        state.items.push_back(msg);
        let receiver = state.receiver.take();
        drop(state);
        if let Some(w) = receiver {
            w.wake();
        }
        Ok(())
    }

    /// Queues `msg`, waiting while the queue is full. Dropping the future before it is done
    /// drops the message, unsent.
    pub async fn send(&self, msg: T) -> Result<(), Closed<T>> {
        let mut msg = match self.try_send(msg) {
            Ok(()) => return Ok(()),
            Err(TrySendError::Closed(m)) => return Err(Closed(m)),
            Err(TrySendError::Full(m)) => m,
        };
        let _waiting = Waiting::enter(&self.shared.waiting);
        loop {
            // Registered before the attempt: room made after a failed attempt wakes it. The
            // receiver reads `waiting` after it took messages under the lock this attempt also
            // takes, so it sees this sender whenever the attempt saw the queue full.
            let room = self.shared.room.notified();
            tokio::pin!(room);
            room.as_mut().enable();
            match self.push(msg, true) {
                Ok(()) => return Ok(()),
                Err(TrySendError::Closed(m)) => return Err(Closed(m)),
                Err(TrySendError::Full(m)) => msg = m,
            }
            room.await;
        }
    }
}

/// Counts a sender as waiting for room for as long as it lives.
struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    fn enter(count: &'a AtomicUsize) -> Self {
        count.fetch_add(1, Ordering::SeqCst);
        Waiting(count)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The receiving side (the kind's task).
pub(crate) struct Receiver<T> {
    shared: Arc<Shared<T>>,
}

impl<T> Receiver<T> {
    /// Waits for messages and moves up to `limit` of them (at least one) into `buf`, in the
    /// order they were sent; 0 once the queue is empty and every sender is gone. Takes part
    /// in tokio's cooperative budget, as tokio's own channels do, so that a queue that never
    /// runs dry does not keep its task from yielding.
    pub async fn recv_many(&mut self, buf: &mut Vec<T>, limit: usize) -> usize {
        poll_fn(|cx| self.poll_recv_many(cx, buf, limit)).await
    }

    fn poll_recv_many(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut Vec<T>,
        limit: usize,
    ) -> Poll<usize> {
        let coop = std::task::ready!(tokio::task::coop::poll_proceed(cx));
        let limit = limit.max(1);
        let mut state = self.shared.lock();
        if state.items.is_empty() {
            if self.shared.senders.load(Ordering::Acquire) == 0 {
                coop.made_progress();
                return Poll::Ready(0);
            }
            match &state.receiver {
                Some(w) if w.will_wake(cx.waker()) => {}
                _ => state.receiver = Some(cx.waker().clone()),
            }
            return Poll::Pending;
        }
        let n = self.take(state, buf, limit);
        coop.made_progress();
        Poll::Ready(n)
    }

    /// Moves up to `limit` of the messages queued now into `buf`, without waiting; 0 if none
    /// is queued. For a receiver that is about to act on what it took already and wants the
    /// messages that came meanwhile to join it (see the kind's task, which does this before it
    /// writes a batch of envelopes).
    pub fn try_recv_many(&mut self, buf: &mut Vec<T>, limit: usize) -> usize {
        let state = self.shared.lock();
        if state.items.is_empty() {
            return 0;
        }
        self.take(state, buf, limit.max(1))
    }

    /// Moves up to `limit` queued messages into `buf` and wakes the senders waiting for room
    /// if this made enough of it.
    fn take(&self, mut state: MutexGuard<'_, State<T>>, buf: &mut Vec<T>, limit: usize) -> usize {
        let before = state.items.len();
        let n = limit.min(before);
        buf.extend(state.items.drain(..n));
        let free = self.shared.capacity.saturating_sub(state.items.len());
        // Room for senders that were waiting only from this batch on, when enough is free.
        let worth_waking =
            free >= self.shared.wake_room && self.shared.capacity - before < self.shared.wake_room;
        if state.items.is_empty() && state.items.capacity() > KEEP_CAPACITY {
            state.items.shrink_to(KEEP_CAPACITY);
        }
        drop(state);
        if worth_waking && self.shared.waiting.load(Ordering::SeqCst) > 0 {
            self.shared.room.notify_waiters();
        }
        n
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        let items = {
            let mut state = self.shared.lock();
            state.closed = true;
            std::mem::take(&mut state.items)
        };
        // Dropped outside the lock: a message's drop may do anything (answer an asker).
        drop(items);
        self.shared.room.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A queue of 8 holding 0..8, and a sender of 8 waiting for room in `send` (one thread: it
    /// has run and found the queue full). Its task ends with whether the send went through.
    async fn full_with_a_waiting_sender()
    -> (Sender<i32>, Receiver<i32>, tokio::task::JoinHandle<bool>) {
        let (tx, rx) = channel(8);
        for i in 0..8 {
            tx.try_send(i).unwrap();
        }
        let waiting = tx.clone();
        let sender = crate::task::spawn(async move { waiting.send(8).await.is_ok() });
        tokio::task::yield_now().await;
        (tx, rx, sender)
    }

    #[tokio::test]
    async fn messages_come_out_in_order_in_batches_of_at_most_the_limit() {
        let (tx, mut rx) = channel(10);
        for i in 0..7 {
            tx.try_send(i).unwrap();
        }
        let mut buf = Vec::new();
        assert_eq!(rx.recv_many(&mut buf, 3).await, 3);
        assert_eq!(rx.recv_many(&mut buf, 100).await, 4);
        assert_eq!(buf, (0..7).collect::<Vec<_>>());
    }

    #[tokio::test]
    async fn taking_without_waiting_takes_what_is_queued_now_in_order() {
        let (tx, mut rx) = channel(10);
        let mut buf = Vec::new();
        assert_eq!(
            rx.try_recv_many(&mut buf, 8),
            0,
            "nothing queued: nothing taken"
        );
        for i in 0..5 {
            tx.try_send(i).unwrap();
        }
        assert_eq!(rx.try_recv_many(&mut buf, 3), 3);
        tx.try_send(5).unwrap();
        assert_eq!(rx.try_recv_many(&mut buf, 100), 3);
        assert_eq!(rx.try_recv_many(&mut buf, 100), 0);
        assert_eq!(buf, (0..6).collect::<Vec<_>>());
        // The receiver still waits for the next message as before.
        tx.try_send(6).unwrap();
        assert_eq!(rx.recv_many(&mut buf, 100).await, 1);
        assert_eq!(buf.last(), Some(&6));
    }

    #[tokio::test]
    async fn taking_without_waiting_wakes_a_sender_waiting_for_room() {
        let (_tx, mut rx, sender) = full_with_a_waiting_sender().await;
        let mut buf = Vec::new();
        assert_eq!(
            rx.try_recv_many(&mut buf, 2),
            2,
            "a quarter of the queue freed"
        );
        let sent = tokio::time::timeout(Duration::from_secs(5), sender)
            .await
            .expect("the sender was woken")
            .unwrap();
        assert!(sent);
        assert_eq!(rx.try_recv_many(&mut buf, 100), 7);
        assert_eq!(buf, (0..9).collect::<Vec<_>>());
    }

    #[tokio::test]
    async fn a_full_queue_refuses_and_gives_the_message_back() {
        let (tx, mut rx) = channel(2);
        tx.try_send(1).unwrap();
        tx.try_send(2).unwrap();
        assert!(matches!(tx.try_send(3), Err(TrySendError::Full(3))));
        let mut buf = Vec::new();
        rx.recv_many(&mut buf, 1).await;
        tx.try_send(3).unwrap();
        drop(rx);
        assert!(matches!(tx.try_send(4), Err(TrySendError::Closed(4))));
        assert!(matches!(tx.send(5).await, Err(Closed(5))));
    }

    #[tokio::test]
    async fn the_receiver_learns_when_every_sender_is_gone_after_the_last_message() {
        let (tx, mut rx) = channel(4);
        let tx2 = tx.clone();
        tx2.try_send(1).unwrap();
        let waiter = crate::task::spawn(async move {
            let mut buf = Vec::new();
            let mut counts = Vec::new();
            loop {
                let n = rx.recv_many(&mut buf, 8).await;
                counts.push(n);
                if n == 0 {
                    return (buf, counts);
                }
            }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(tx2);
        tx.try_send(2).unwrap();
        drop(tx);
        let (buf, counts) = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("the receiver ended")
            .unwrap();
        assert_eq!(buf, vec![1, 2]);
        assert_eq!(counts.last(), Some(&0));
    }

    #[tokio::test]
    async fn a_waiting_sender_goes_on_once_a_quarter_of_the_queue_is_free() {
        let (_tx, mut rx, mut sender) = full_with_a_waiting_sender().await;
        let mut buf = Vec::new();
        rx.recv_many(&mut buf, 1).await;
        // One place free of eight: under the quarter, the sender sleeps on.
        assert!(
            tokio::time::timeout(Duration::from_millis(50), &mut sender)
                .await
                .is_err()
        );
        rx.recv_many(&mut buf, 1).await;
        let sent = tokio::time::timeout(Duration::from_secs(5), sender)
            .await
            .expect("the sender was woken")
            .unwrap();
        assert!(sent);
        rx.recv_many(&mut buf, 100).await;
        assert_eq!(buf, (0..9).collect::<Vec<_>>());
    }

    #[tokio::test]
    async fn a_waiting_sender_is_not_starved_by_senders_that_retry_at_once() {
        let (tx, mut rx) = channel(8);
        for i in 0..8 {
            tx.try_send(i).unwrap();
        }
        let spinner_tx = tx.clone();
        let spinner = crate::task::spawn(async move {
            loop {
                match spinner_tx.try_send(0) {
                    Ok(()) => {}
                    Err(TrySendError::Full(_)) => tokio::task::yield_now().await,
                    Err(TrySendError::Closed(_)) => return,
                }
            }
        });
        let waiter_tx = tx.clone();
        let waiter = crate::task::spawn(async move { waiter_tx.send(1000).await.is_ok() });
        let mut buf = Vec::new();
        let mut drains = 0;
        while !waiter.is_finished() {
            assert!(drains < 100, "the waiting sender starved");
            rx.recv_many(&mut buf, 1).await;
            drains += 1;
            tokio::task::yield_now().await;
        }
        assert!(waiter.await.unwrap());
        drop(rx);
        spinner.await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn many_senders_lose_nothing_and_keep_each_senders_order() {
        const SENDERS: u64 = 4;
        const EACH: u64 = 50_000;
        let (tx, mut rx) = channel(64);
        let mut tasks = Vec::new();
        for s in 0..SENDERS {
            let tx = tx.clone();
            tasks.push(crate::task::spawn(async move {
                for i in 0..EACH {
                    if i % 2 == 0 {
                        tx.send((s, i)).await.unwrap();
                    } else {
                        let mut m = (s, i);
                        loop {
                            match tx.try_send(m) {
                                Ok(()) => break,
                                Err(TrySendError::Full(back)) => {
                                    m = back;
                                    tokio::task::yield_now().await;
                                }
                                Err(TrySendError::Closed(_)) => panic!("closed"),
                            }
                        }
                    }
                }
            }));
        }
        drop(tx);
        let mut next = [0u64; SENDERS as usize];
        let mut buf = Vec::new();
        loop {
            buf.clear();
            if rx.recv_many(&mut buf, 256).await == 0 {
                break;
            }
            for &(s, i) in &buf {
                assert_eq!(i, next[s as usize], "sender {s} out of order");
                next[s as usize] += 1;
            }
        }
        assert_eq!(next, [EACH; SENDERS as usize]);
        for t in tasks {
            t.await.unwrap();
        }
    }

    #[tokio::test]
    async fn queued_messages_are_dropped_with_the_receiver() {
        let (tx, rx) = channel(4);
        let token = Arc::new(());
        tx.try_send(Arc::clone(&token)).unwrap();
        assert_eq!(Arc::strong_count(&token), 2);
        drop(rx);
        assert_eq!(Arc::strong_count(&token), 1);
    }

    #[tokio::test]
    async fn an_empty_queue_gives_back_what_a_burst_made_it_grow_to() {
        let (tx, mut rx) = channel(100_000);
        for i in 0..50_000 {
            tx.try_send(i).unwrap();
        }
        let mut buf = Vec::new();
        while !rx.shared.lock().items.is_empty() {
            rx.recv_many(&mut buf, 256).await;
        }
        assert!(rx.shared.lock().items.capacity() <= KEEP_CAPACITY);
        assert_eq!(buf.len(), 50_000);
    }
}
