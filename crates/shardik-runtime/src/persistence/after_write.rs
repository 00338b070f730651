//! What a durable command runs once its write is done ([`AfterWrite`]): shared by both kinds of
//! durable entity, and so kept below them.

/// What runs on the entity's state once what a command persisted is written, in order: replies
/// through the commands' `ReplyTo`s and side effects. Shared by both kinds of durable effect;
/// dropped unrun when the write fails, so that the asker hears of the failure instead.
pub(crate) struct AfterWrite<B>(Vec<Step<B>>);

/// One thing to run on the state once the write is done.
type Step<B> = Box<dyn FnOnce(&B) + Send>;

impl<B> AfterWrite<B> {
    pub(crate) fn new() -> Self {
        AfterWrite(Vec::new())
    }

    /// Answers what `answer` makes of the state through `reply_to`.
    pub(crate) fn reply<R, C>(
        &mut self,
        reply_to: crate::sharding::ReplyTo<R, C>,
        answer: impl FnOnce(&B) -> R + Send + 'static,
    ) where
        R: serde::Serialize + Send + 'static,
        C: crate::sharding::Codec + Default + 'static,
    {
        self.0
            .push(Box::new(move |state| reply_to.send(answer(state))));
    }

    /// Runs `f` on the state.
    pub(crate) fn run(&mut self, f: impl FnOnce(&B) + Send + 'static) {
        self.0.push(Box::new(f));
    }

    /// Runs everything, in the order added, on the state as written.
    pub(crate) fn on(self, state: &B) {
        for then in self.0 {
            then(state);
        }
    }
}
