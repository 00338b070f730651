//! The ways to reach entities: [`EntityRegion`], a node's region (or proxy) of one kind, and
//! [`EntityRef`], the address of one entity, which may travel inside messages.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use shardik_core::sharding::{ShardId, shard_number_for};
use tokio::sync::{mpsc, oneshot};

use super::api::{AskError, Codec, Entity, ShardExtractor, ShardingError, TellError};
use super::local_queue;
use super::messages::{AskHandle, Control, LocalMsg, RefIds, RegionState};
use super::pending::{AnswerRoute, ReplyEndpoint};
use super::reply_to::ReplyTo;
use super::resolve;

/// Shard ids for entity ids: the fixed hash (with the decimal ids pre-rendered, so routing
/// does not allocate) or a custom extractor.
#[derive(Clone)]
pub(super) struct ShardIds {
    number_of_shards: std::num::NonZeroU32,
    rendered: Arc<[ShardId]>,
    extractor: Option<ShardExtractor>,
}

impl ShardIds {
    pub(super) fn new(number_of_shards: u32, extractor: Option<ShardExtractor>) -> Self {
        let n = std::num::NonZeroU32::new(number_of_shards).unwrap_or(std::num::NonZeroU32::MIN);
        // Pre-render up to 65 536 ids; beyond that, render per message.
        let rendered: Arc<[ShardId]> = if extractor.is_none() && n.get() <= 65_536 {
            (0..n.get()).map(|i| ShardId::from(i.to_string())).collect()
        } else {
            Arc::from(Vec::new())
        };
        ShardIds {
            number_of_shards: n,
            rendered,
            extractor,
        }
    }

    fn shard_of(&self, entity: &str) -> ShardId {
        if let Some(x) = &self.extractor {
            return x(entity);
        }
        let i = shard_number_for(entity, self.number_of_shards) as usize;
        match self.rendered.get(i) {
            Some(s) => s.clone(),
            None => ShardId::from(i.to_string()),
        }
    }
}

/// A node's region (or proxy) for one entity kind: the way to reach its entities.
pub struct EntityRegion<E: Entity> {
    pub(super) name: Arc<str>,
    pub(super) local: local_queue::Sender<LocalMsg<E>>,
    pub(super) control: mpsc::Sender<Control>,
    pub(super) shards: ShardIds,
    /// The node's asks and answers, for `ask`.
    pub(super) replies: Arc<ReplyEndpoint>,
    /// Where answers to this region's asks go (shared by their `ReplyTo`s).
    pub(super) answers: Arc<AnswerRoute>,
}

impl<E: Entity> Clone for EntityRegion<E> {
    fn clone(&self) -> Self {
        EntityRegion {
            name: self.name.clone(),
            local: self.local.clone(),
            control: self.control.clone(),
            shards: self.shards.clone(),
            replies: Arc::clone(&self.replies),
            answers: Arc::clone(&self.answers),
        }
    }
}

impl<E: Entity> std::fmt::Debug for EntityRegion<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EntityRegion")
            .field("kind", &self.name)
            .finish_non_exhaustive()
    }
}

impl<E: Entity> EntityRegion<E> {
    /// The kind's name.
    pub fn kind(&self) -> &str {
        &self.name
    }

    /// A reference to the entity `id` (cheap; nothing is created until a message arrives).
    pub fn entity_ref(&self, id: &str) -> EntityRef<E> {
        EntityRef {
            region: self.clone(),
            ids: Arc::new(RefIds::new(self.shards.shard_of(id), id.into())),
        }
    }

    /// The shard of entity `id`.
    pub fn shard_of(&self, id: &str) -> ShardId {
        self.shards.shard_of(id)
    }

    /// Sends `cmd` to entity `id`, waiting while the region's queue is full.
    pub async fn tell(&self, id: &str, cmd: E::Command) -> Result<(), TellError> {
        self.entity_ref(id).tell(cmd).await
    }

    /// Sends `cmd` to entity `id`, failing at once when the region's queue is full.
    pub fn try_tell(&self, id: &str, cmd: E::Command) -> Result<(), TellError> {
        self.entity_ref(id).try_tell(cmd)
    }

    /// This node's region state: hosted shards and their entity ids.
    pub async fn state(&self, timeout: Duration) -> Option<RegionState> {
        let (tx, rx) = oneshot::channel();
        self.control.send(Control::State(tx)).await.ok()?;
        tokio::time::timeout(timeout, rx).await.ok()?.ok()
    }
}

/// The address of one entity.
///
/// An `EntityRef` may travel inside a command or a reply, to an entity or an asker on any
/// node: it is encoded as its kind's name and the entity's id, and decoded into a reference
/// through the receiving node's region (or proxy) of that kind, so it is usable there at once
/// (`tell`, `ask`). The receiving node must have registered the kind with the same entity type;
/// otherwise, or when decoded outside a node's sharding (by hand, say), decoding fails with a
/// codec error, and the message is dropped as undecodable.
pub struct EntityRef<E: Entity> {
    region: EntityRegion<E>,
    ids: Arc<RefIds>,
}

impl<E: Entity> Clone for EntityRef<E> {
    fn clone(&self) -> Self {
        EntityRef {
            region: self.region.clone(),
            ids: Arc::clone(&self.ids),
        }
    }
}

impl<E: Entity> std::fmt::Debug for EntityRef<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EntityRef")
            .field("kind", &self.region.name)
            .field("id", &self.ids.id)
            .finish()
    }
}

impl<E: Entity> serde::Serialize for EntityRef<E> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        (&*self.region.name, &*self.ids.id).serialize(serializer)
    }
}

impl<'de, E: Entity> serde::Deserialize<'de> for EntityRef<E> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let (kind, id): (String, String) = serde::Deserialize::deserialize(deserializer)?;
        resolve::resolve(&kind, |region| {
            region
                .downcast_ref::<EntityRegion<E>>()
                .map(|r| r.entity_ref(&id))
        })
        .map_err(|e| match e {
            resolve::ResolveError::NoSharding => D::Error::custom(format!(
                "EntityRef to {kind:?}/{id:?}: an EntityRef can only be decoded by a node's sharding"
            )),
            resolve::ResolveError::UnknownKind => D::Error::custom(format!(
                "EntityRef to {kind:?}/{id:?}: {}",
                ShardingError::NotInitialized(kind.clone())
            )),
            resolve::ResolveError::WrongType => D::Error::custom(format!(
                "EntityRef to {kind:?}/{id:?}: entity kind {kind:?} is registered here with another entity type"
            )),
        })
    }
}

impl<E: Entity> EntityRef<E> {
    /// The entity's kind.
    pub fn kind(&self) -> &str {
        &self.region.name
    }

    /// The entity's id (the same name as [`EntityContext::entity_id`](super::EntityContext::entity_id)
    /// on the entity's side).
    pub fn entity_id(&self) -> &str {
        &self.ids.id
    }

    fn msg(&self, cmd: E::Command, reply: AskHandle) -> LocalMsg<E> {
        LocalMsg {
            ids: Arc::clone(&self.ids),
            cmd,
            reply,
        }
    }

    /// Sends `cmd` without waiting for an answer. Fails at once with
    /// [`TellError::BufferFull`] when the region's queue is full.
    pub fn try_tell(&self, cmd: E::Command) -> Result<(), TellError> {
        self.region
            .local
            .try_send(self.msg(cmd, AskHandle::none()))
            .map_err(|e| match e {
                local_queue::TrySendError::Full(_) => TellError::BufferFull,
                local_queue::TrySendError::Closed(_) => TellError::RegionStopped,
            })
    }

    /// Sends `cmd` without waiting for an answer, but waiting while the region's queue is
    /// full: the back-pressure a steady sender wants. It fails only when the
    /// region has stopped.
    pub async fn tell(&self, cmd: E::Command) -> Result<(), TellError> {
        self.region
            .local
            .send(self.msg(cmd, AskHandle::none()))
            .await
            .map_err(|_| TellError::RegionStopped)
    }

    /// Sends the command `make` builds around a [`ReplyTo`] and waits at most `timeout` for
    /// the answer the entity sends through it (Akka's `ask(replyTo => Cmd(.., replyTo))`).
    /// Each command has the reply type its `ReplyTo` names.
    ///
    /// Fails with [`ShardingError::EntityFailed`] when the entity fails while handling the
    /// command (a panic, a durable write refused or lost) before answering, with the reason a
    /// dropped command was dropped for (its shard's node failed, the region stopped, ...), and
    /// with [`ShardingError::Timeout`] when no answer came in time: the entity may have handled
    /// the command without answering (it kept the `ReplyTo` to answer later, or dropped it).
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use serde::{Deserialize, Serialize};
    /// # use shardik_runtime::facade as shardik;
    /// # use shardik::{EntityContext, EntityRef, ReplyTo, SyncEntity};
    /// #[derive(Serialize, Deserialize)]
    /// enum AccountCmd {
    ///     Deposit(u64),
    ///     Balance(ReplyTo<u64>),
    ///     History(ReplyTo<Vec<u64>>),
    /// }
    /// # struct Account;
    /// # impl SyncEntity for Account {
    /// #     type Command = AccountCmd;
    /// #     fn handle(&mut self, cmd: AccountCmd, _: &mut EntityContext<Self>) {}
    /// # }
    /// # async fn example(account: EntityRef<Account>) -> Result<(), shardik::ShardingError> {
    /// let balance: u64 = account.ask(AccountCmd::Balance, Duration::from_secs(5)).await?;
    /// let history: Vec<u64> = account.ask(AccountCmd::History, Duration::from_secs(5)).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn ask<R, C>(
        &self,
        make: impl FnOnce(ReplyTo<R, C>) -> E::Command,
        timeout: Duration,
    ) -> Result<R, ShardingError>
    where
        R: serde::Serialize + serde::de::DeserializeOwned + Send + 'static,
        C: Codec + Default,
    {
        self.send_ask(make, timeout).await?.await
    }

    /// The first half of [`ask`](Self::ask): puts the command in the region's queue (waiting
    /// for room, within `timeout`), and returns what waits for the answer. A sender that
    /// sends one ask after the other this way has them queued in its order, whenever their
    /// answers come (the reliable producer relies on it).
    pub(crate) async fn send_ask<R, C>(
        &self,
        make: impl FnOnce(ReplyTo<R, C>) -> E::Command,
        timeout: Duration,
    ) -> Result<impl Future<Output = Result<R, ShardingError>> + Send + 'static, ShardingError>
    where
        R: serde::Serialize + serde::de::DeserializeOwned + Send + 'static,
        C: Codec + Default,
    {
        if timeout.is_zero() {
            return Err(ShardingError::InvalidTimeout);
        }
        let deadline = tokio::time::Instant::now() + timeout;
        // The ask enters the node's table of waiting asks only if the command leaves for
        // another node (by the kind's task, as it sends it, under an id it gives then): the
        // answer, or that node's report of a failure, then comes back encoded, by that id. It
        // leaves the table with its answer or failure; one that timed out stays until entries
        // past their deadline are swept.
        let (reply_to, slot, answer_rx) = ReplyTo::<R, C>::for_ask(&self.region.answers, deadline);
        // The host fails the ask through the same slot if the command is not handled.
        let handle = AskHandle::new(slot);
        let msg = self.msg(make(reply_to), handle);
        match self.send_for_ask(msg, deadline).await {
            Ok(()) => Ok(async move {
                match tokio::time::timeout_at(deadline, answer_rx).await {
                    Ok(Ok(answer)) => answer,
                    // No answer in time (the slot also closes when the expired entry is swept).
                    Ok(Err(_)) | Err(_) => Err(ShardingError::Timeout(timeout)),
                }
            }),
            Err(e) => Err(e.unwrap_or(ShardingError::Timeout(timeout))),
        }
    }

    /// Puts an ask's message in the region's queue, waiting for room until `deadline`
    /// (`Err(None)`: not in time).
    async fn send_for_ask(
        &self,
        msg: LocalMsg<E>,
        deadline: tokio::time::Instant,
    ) -> Result<(), Option<ShardingError>> {
        // Usually the region's queue has room: no timer is needed to wait for it.
        match self.region.local.try_send(msg) {
            Ok(()) => Ok(()),
            Err(local_queue::TrySendError::Closed(_)) => Err(Some(ShardingError::RegionStopped)),
            Err(local_queue::TrySendError::Full(msg)) => {
                match tokio::time::timeout_at(deadline, self.region.local.send(msg)).await {
                    Ok(Ok(())) => Ok(()),
                    Ok(Err(_)) => Err(Some(ShardingError::RegionStopped)),
                    Err(_) => Err(None),
                }
            }
        }
    }

    /// As [`ask`](Self::ask), for a command answered with `Result<T, Err>` (Akka's
    /// `askWithStatus`, with the entity's own error type): a success gives its value, a
    /// refusal is [`AskError::Refused`] with the entity's error, and a command that was not
    /// answered is [`AskError::Sharding`].
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use serde::{Deserialize, Serialize};
    /// # use shardik_runtime::facade as shardik;
    /// use shardik::{AskError, EntityContext, EntityRef, ReplyTo, SyncEntity};
    ///
    /// #[derive(Debug, Serialize, Deserialize)]
    /// enum AccountError {
    ///     Insufficient { balance: u64 },
    /// }
    ///
    /// #[derive(Serialize, Deserialize)]
    /// enum AccountCmd {
    ///     Withdraw(u64, ReplyTo<Result<u64, AccountError>>),
    /// }
    /// # struct Account(u64);
    /// # impl SyncEntity for Account {
    /// #     type Command = AccountCmd;
    /// #     fn handle(&mut self, AccountCmd::Withdraw(n, reply_to): AccountCmd, _: &mut EntityContext<Self>) {
    /// #         if n > self.0 {
    /// #             return reply_to.send(Err(AccountError::Insufficient { balance: self.0 }));
    /// #         }
    /// #         self.0 -= n;
    /// #         reply_to.send(Ok(self.0))
    /// #     }
    /// # }
    /// # async fn run(account: EntityRef<Account>) {
    /// let withdraw = |reply_to| AccountCmd::Withdraw(25, reply_to);
    /// match account.ask_result(withdraw, Duration::from_secs(5)).await {
    ///     Ok(balance) => println!("left: {balance}"),
    ///     Err(AskError::Refused(AccountError::Insufficient { balance })) => {
    ///         println!("only {balance} there")
    ///     }
    ///     Err(e) => println!("not answered: {e:?}"),
    /// }
    /// # }
    /// ```
    pub async fn ask_result<T, Err, C>(
        &self,
        make: impl FnOnce(ReplyTo<Result<T, Err>, C>) -> E::Command,
        timeout: Duration,
    ) -> Result<T, AskError<Err>>
    where
        T: serde::Serialize + serde::de::DeserializeOwned + Send + 'static,
        Err: serde::Serialize + serde::de::DeserializeOwned + Send + 'static,
        C: Codec + Default,
    {
        self.ask(make, timeout).await?.map_err(AskError::Refused)
    }
}

#[cfg(test)]
mod not_initialized_tests {
    use std::sync::Arc;

    use super::resolve::{RegionResolver, Resolver, decoding_with};
    use super::*;
    use crate::sharding::EntityContext;

    /// A node on which no kind was ever initialised.
    struct NoKinds;

    impl RegionResolver for NoKinds {
        fn with_region(
            &self,
            _kind: &str,
            f: &mut dyn FnMut(Option<&(dyn std::any::Any + Send + Sync)>),
        ) {
            f(None)
        }

        fn reply_endpoint(&self) -> Arc<ReplyEndpoint> {
            unreachable!("decoding an EntityRef never answers an ask")
        }
    }

    struct Ponger;

    impl Entity for Ponger {
        type Command = u32;
        async fn handle(&mut self, _: u32, _: &mut EntityContext<Self>) {}
    }

    #[test]
    fn an_entity_ref_to_a_kind_never_initialised_here_says_to_call_init() {
        let node: Arc<dyn RegionResolver> = Arc::new(NoKinds);
        let resolver: Resolver = Arc::downgrade(&node);
        let err = decoding_with(&resolver, || {
            serde_json::from_str::<EntityRef<Ponger>>(r#"["ponger","p-1"]"#)
        })
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("EntityRef to \"ponger\"/\"p-1\"")
                && err.contains("never initialised on this node")
                && err.contains("sharding().init(EntityKind::new(\"ponger\""),
            "{err}"
        );
    }
}
