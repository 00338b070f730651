//! Answers to remote askers made during one poll of a kind's task, written together.
//!
//! A kind's task runs its entities' handlers; with many asks in flight it handles a batch of
//! commands in one poll, and each handler answers through its [`ReplyTo`](super::ReplyTo).
//! Written one by one, every answer would be a write of its own to the asker's connection (a
//! system call each while the connection is idle). Instead, while the task is polled, the
//! answers it makes are gathered here: the task takes them at the end of each of its turns and
//! sends them with the turn's other messages (`take_gathered`), and whatever is left when the
//! poll ends (a handler that answered and then waited) is handed on together then, so that the
//! answers for one node leave in one write. An answer made anywhere else (an
//! entity's own spawned task, a test) is not gathered and is sent at once, as before.
//!
//! The gathering is a thread-local scope around each poll, like the decoding scope of
//! `resolve`: the handlers run synchronously inside the poll, on this thread.

use std::cell::RefCell;
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;

use bytes::Bytes;

use super::AnswerRoute;

/// One answer waiting for the end of the poll: its route (the asker's node, and the kind asked
/// for the logs and counters of a reply that cannot be sent), and the encoded reply frame.
pub(crate) struct GatheredAnswer {
    pub route: Arc<AnswerRoute>,
    pub frame: Bytes,
}

thread_local! {
    static GATHERING: RefCell<Option<Vec<GatheredAnswer>>> = const { RefCell::new(None) };
}

/// Keeps `answer` for the end of the current poll, if a task gathers answers on this thread;
/// otherwise hands it back, for the caller to send now.
pub(crate) fn gather(answer: GatheredAnswer) -> Result<(), GatheredAnswer> {
    GATHERING.with(|g| match g.borrow_mut().as_mut() {
        Some(answers) => {
            answers.push(answer);
            Ok(())
        }
        None => Err(answer),
    })
}

/// Moves the answers gathered so far in this poll to `into`, for a task that sends them now
/// with its own messages (a kind's task does at each turn, so that answers do not wait for the
/// end of a poll that goes on serving).
pub(crate) fn take_gathered(into: &mut Vec<GatheredAnswer>) {
    GATHERING.with(|g| {
        if let Some(answers) = g.borrow_mut().as_mut() {
            into.append(answers);
        }
    });
}

/// Runs `task`, gathering the answers made during each of its polls and handing them to
/// `send` when the poll ends (in the order they were made; `send` empties the list).
pub(crate) async fn gathering<F: Future>(
    task: F,
    mut send: impl FnMut(&mut Vec<GatheredAnswer>),
) -> F::Output {
    let mut task = pin!(task);
    // One list for the task's life: taken into the scope for a poll, given back after it.
    let mut kept = Vec::new();
    std::future::poll_fn(|cx| {
        let previous = GATHERING.with(|g| g.replace(Some(std::mem::take(&mut kept))));
        let scope = Scope {
            previous,
            kept: &mut kept,
            send: &mut send,
        };
        let out = task.as_mut().poll(cx);
        drop(scope);
        out
    })
    .await
}

/// Ends one poll's scope: the previous scope comes back and the gathered answers are sent,
/// also when the poll panicked (so that no later task on this thread gathers into a list no
/// one will send).
struct Scope<'a, S: FnMut(&mut Vec<GatheredAnswer>)> {
    previous: Option<Vec<GatheredAnswer>>,
    kept: &'a mut Vec<GatheredAnswer>,
    send: &'a mut S,
}

impl<S: FnMut(&mut Vec<GatheredAnswer>)> Drop for Scope<'_, S> {
    fn drop(&mut self) {
        let previous = self.previous.take();
        let mut gathered = GATHERING.with(|g| g.replace(previous)).unwrap_or_default();
        if !gathered.is_empty() {
            (self.send)(&mut gathered);
            gathered.clear();
        }
        *self.kept = gathered;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardik_core::membership::{Address, UniqueAddress};
    use std::sync::Weak;

    fn answer(port: u16, byte: u8) -> GatheredAnswer {
        let asker = UniqueAddress::new(Address::new("127.0.0.1", port), 1);
        GatheredAnswer {
            route: Arc::new(AnswerRoute::new(Arc::from("k"), asker, Weak::new())),
            frame: Bytes::from(vec![byte]),
        }
    }

    #[tokio::test]
    async fn answers_made_in_one_poll_are_sent_together_and_in_order() {
        let mut sent: Vec<Vec<u8>> = Vec::new();
        gathering(
            async {
                assert!(gather(answer(1, 1)).is_ok());
                assert!(gather(answer(1, 2)).is_ok());
                tokio::task::yield_now().await;
                assert!(gather(answer(2, 3)).is_ok());
            },
            |answers| sent.push(answers.drain(..).map(|a| a.frame[0]).collect()),
        )
        .await;
        assert_eq!(sent, vec![vec![1, 2], vec![3]]);
    }

    #[tokio::test]
    async fn answers_taken_during_the_poll_are_not_sent_again_at_its_end() {
        let mut sent = 0;
        let mut taken = Vec::new();
        gathering(
            async {
                let _ = gather(answer(1, 1));
                take_gathered(&mut taken);
                let _ = gather(answer(1, 2));
            },
            |answers| {
                sent += answers.len();
                answers.clear();
            },
        )
        .await;
        assert_eq!(taken.len(), 1);
        assert_eq!(sent, 1, "only the answer made after the take");
    }

    #[test]
    fn outside_a_gathering_task_an_answer_is_handed_back() {
        assert!(gather(answer(1, 1)).is_err());
    }

    #[tokio::test]
    async fn a_panicking_poll_still_sends_and_ends_its_scope() {
        let sent = std::sync::Mutex::new(0usize);
        let result = std::panic::AssertUnwindSafe(gathering(
            async {
                let _ = gather(answer(1, 1));
                panic!("handler bug");
            },
            |answers| {
                *sent.lock().unwrap() += answers.len();
                answers.clear();
            },
        ));
        let caught = futures_util::FutureExt::catch_unwind(result).await;
        assert!(caught.is_err());
        assert_eq!(*sent.lock().unwrap(), 1);
        assert!(
            gather(answer(1, 1)).is_err(),
            "the scope ended with the poll"
        );
    }
}
