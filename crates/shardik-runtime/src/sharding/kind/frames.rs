//! What leaves the kind's task for other nodes and for askers: protocol frames, forwarded
//! envelopes (batched per destination), replies and their errors, and the drops that fail an
//! ask.

use super::*;

impl<E: Entity, C: Codec> KindTask<E, C> {
    pub(super) fn send_protocol(&mut self, st: &mut State<E>, to: UniqueAddress, msg: Protocol) {
        let frame = ShardingFrame {
            kind: self.name.clone(),
            body: ShardingBody::Protocol(msg),
        };
        st.outgoing.frame(&to, encode_sharding(&frame));
    }

    /// A command from another node that the kind's codec could not read: counted, and its
    /// asker, if any, told why.
    pub(super) fn undecodable(
        &mut self,
        st: &mut State<E>,
        entity: &EntityId,
        reply_to: Option<(UniqueAddress, NonZeroU64)>,
        e: CodecError,
    ) {
        self.count_drop("decode-failed");
        warn!(kind = %self.name, entity = %entity, error = %e, "command could not be decoded: dropped");
        if let Some((node, ask_id)) = reply_to {
            self.send_reply_error(
                st,
                node,
                ask_id,
                ReplyErrorKind::DecodeFailed,
                e.to_string(),
            );
        }
    }

    pub(super) fn forward(
        &mut self,
        st: &mut State<E>,
        to: &UniqueAddress,
        env: Envelope<Payload<E>>,
    ) {
        match env.msg {
            Payload::Remote { bytes, reply_to } => {
                // Passing through (the home moved while the message was on its way). The next
                // hop answers us, so an ask gets a relay entry here that sends the answer on to
                // the original asker.
                let relay_id = reply_to.map(|(node, ask_id)| {
                    let sender = self.sender.clone();
                    let kind = self.name.clone();
                    let deadline = TokioInstant::now() + self.settings.region.handoff_timeout;
                    self.pending.register(deadline, move |result| {
                        let result = result.map_err(|e| ReplyError {
                            kind: reply_error_kind(&e),
                            message: e.to_string(),
                        });
                        let frame = ShardingFrame {
                            kind,
                            body: ShardingBody::Reply(WireReply {
                                ask_id: ask_id.get(),
                                result,
                            }),
                        };
                        crate::task::spawn(async move {
                            sender.send(&node.address, encode_sharding(&frame)).await;
                        });
                    })
                });
                let len = batch_item_len(&env.entity, &env.shard, bytes.len(), relay_id);
                st.outgoing.envelope(to, len, |buf| {
                    encode_batch_item(&env.entity, &env.shard, &bytes, relay_id, buf)
                });
            }
            Payload::Local { cmd, reply } => {
                // Encoded into a buffer kept for the task's life, and from there into the
                // batch frame: no allocation per command.
                st.payload.clear();
                // An ask takes its id as its command leaves the node.
                let pending = &self.pending;
                let ask_id = reply.ask_id(&|| pending.next_id());
                let encoded = crate::sharding::resolve::encoding_envelope(ask_id, || {
                    self.codec.encode_into(&cmd, &mut st.payload)
                });
                if let Err(e) = encoded {
                    {
                        self.count_drop("encode-failed");
                        warn!(kind = %self.name, entity = %env.entity, error = %e, "command could not be encoded: dropped");
                        reply.fail(ShardingError::Codec(e));
                        return;
                    }
                }
                // The ask's id, which the command's ReplyTo answers by: its slot enters the
                // table of waiting asks under it, where the answer finds it, and so does a
                // failure the node that handles the command reports. Passed on, the command is
                // no longer this node's to report on.
                if let (Some(slot), Some(ask_id)) = (reply.pass_on(), ask_id)
                    && let Some(deadline) = slot.deadline()
                {
                    self.pending.register_slot(ask_id, deadline, slot);
                }
                let payload = &st.payload;
                let len = batch_item_len(&env.entity, &env.shard, payload.len(), ask_id);
                st.outgoing.envelope(to, len, |buf| {
                    encode_batch_item(&env.entity, &env.shard, payload, ask_id, buf)
                });
            }
        }
    }

    pub(super) fn reply(&mut self, st: &mut State<E>, to: Asker, result: Result<(), String>) {
        match to {
            Asker::None => {}
            Asker::Local(handle) => match result {
                Ok(()) => handle.handled(),
                Err(why) => handle.fail(ShardingError::EntityFailed(why)),
            },
            // Handled: the answer, if any, goes through the command's ReplyTo.
            Asker::Remote(_, _) if result.is_ok() => {}
            Asker::Remote(route, ask_id) => {
                let why = result.err().unwrap_or_default();
                let node = route.asker().clone();
                self.send_reply_error(st, node, ask_id, ReplyErrorKind::EntityFailed, why)
            }
        }
    }

    pub(super) fn send_reply_error(
        &mut self,
        st: &mut State<E>,
        node: UniqueAddress,
        ask_id: NonZeroU64,
        kind: ReplyErrorKind,
        message: String,
    ) {
        let frame = ShardingFrame {
            kind: self.name.clone(),
            body: ShardingBody::Reply(WireReply {
                ask_id: ask_id.get(),
                result: Err(ReplyError { kind, message }),
            }),
        };
        st.outgoing.frame(&node, encode_sharding(&frame));
    }

    pub(super) fn dropped(
        &mut self,
        st: &mut State<E>,
        env: Envelope<Payload<E>>,
        reason: DropReason,
    ) {
        self.count_drop(reason.as_str());
        warn!(kind = %self.name, entity = %env.entity, shard = %env.shard, reason = reason.as_str(), "message dropped");
        match env.msg {
            Payload::Local { reply, .. } if reply.is_ask() => {
                reply.fail(match reason {
                    DropReason::BufferFull => ShardingError::BufferFull,
                    DropReason::RegionStopped => ShardingError::RegionStopped,
                    DropReason::LeaseUnavailable => ShardingError::LeaseUnavailable,
                    other => ShardingError::Dropped(other.as_str()),
                });
            }
            Payload::Remote {
                reply_to: Some((node, ask_id)),
                ..
            } => {
                let kind = match reason {
                    DropReason::BufferFull => ReplyErrorKind::BufferFull,
                    DropReason::RegionStopped => ReplyErrorKind::RegionStopped,
                    _ => ReplyErrorKind::ShardUnavailable,
                };
                self.send_reply_error(
                    st,
                    node,
                    ask_id,
                    kind,
                    format!("dropped: {}", reason.as_str()),
                );
            }
            _ => {}
        }
    }

    pub(super) async fn flush(&mut self, st: &mut State<E>) {
        // The answers this turn's handlers made go out with the turn's other messages.
        crate::sharding::pending::take_gathered(&mut st.answers);
        for answer in st.answers.drain(..) {
            st.outgoing.frame(answer.route.asker(), answer.frame);
        }
        if st.outgoing.is_empty() {
            return;
        }
        // Consecutive messages to the same node (the usual case for a proxy or a busy
        // forwarder) go out together: their envelopes batched, the run written at once.
        for (to, run) in st.outgoing.take_runs() {
            let failed = self.sender.send_all(&to.address, run).await;
            if failed > 0 {
                metrics::counter!(m::SHARDING_DROPPED_TOTAL, "kind" => self.name.to_string(), "reason" => "send-failed")
                    .increment(failed as u64);
                warn!(kind = %self.name, %to, messages = failed, "sharding messages not sent (peer limit or writer gone)");
            }
        }
    }
}

/// The wire error kind that carries `e` back to a remote asker.
pub(super) fn reply_error_kind(e: &ShardingError) -> ReplyErrorKind {
    match e {
        ShardingError::BufferFull => ReplyErrorKind::BufferFull,
        ShardingError::RegionStopped => ReplyErrorKind::RegionStopped,
        ShardingError::EntityFailed(_) => ReplyErrorKind::EntityFailed,
        ShardingError::Codec(_) => ReplyErrorKind::DecodeFailed,
        ShardingError::UnknownKind(_) => ReplyErrorKind::UnknownKind,
        _ => ReplyErrorKind::ShardUnavailable,
    }
}
