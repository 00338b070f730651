//! Version 2 of the demo's command and reply: each gained `note`, with a default, so that
//! version 1's messages still read.

use serde::{Deserialize, Serialize};
use shardik_runtime::sharding::{Cbor, EntityContext, ReplyTo, SyncEntity};

use super::version::{SetRequest, Version};

#[derive(Debug, Serialize, Deserialize)]
pub enum Command {
    Set {
        name: String,
        value: u64,
        reply_to: ReplyTo<Seen, Cbor>,
        #[serde(default)]
        note: Option<String>,
    },
}

/// What the entity read, and where it ran.
#[derive(Debug, Serialize, Deserialize)]
pub struct Seen {
    pub host: String,
    pub version: String,
    pub name: String,
    pub value: u64,
    #[serde(default)]
    pub note: Option<String>,
}

pub struct Evolving;

impl SyncEntity for Evolving {
    type Command = Command;

    fn handle(&mut self, cmd: Command, ctx: &mut EntityContext<Self>) {
        let Command::Set {
            name,
            value,
            reply_to,
            note,
        } = cmd;
        reply_to.send(Seen {
            host: ctx.node().address.to_string(),
            version: Self::NAME.into(),
            name,
            value,
            note,
        });
    }
}

impl Version for Evolving {
    const NAME: &'static str = "v2";

    type Seen = Seen;

    fn command(request: SetRequest, reply_to: ReplyTo<Seen, Cbor>) -> Command {
        Command::Set {
            name: request.name,
            value: request.value,
            reply_to,
            note: request.note,
        }
    }

    fn create(_id: &str) -> Self {
        Evolving
    }
}
