//! The Lua scripts, one step each, atomic on the server; their text lives
//! in `scripts/*.lua`.

use std::sync::LazyLock;

use ::redis::Script;

use super::key;
use crate::lease::{LeaseConfig, LeaseError};

/// Takes the first free shard of `ARGV[2]..=ARGV[3]` (skipping `ARGV[6..]`)
/// and returns it with its record's key type and fields, read as they are
/// (the caller checks them), and the server's `TIME` (seconds,
/// microseconds), so that the holder knows Redis's clock from its first
/// raise on.
const ACQUIRE_LUA: &str = include_str!("acquire.lua");

/// Shared by the scripts that run while a shard is held: `check(key,
/// layout)` is 3 if the record is gone, 4 to 7 if its `high_water`, `seen`,
/// `last` or `layout` is not of the form this crate writes (so that the
/// arithmetic below never runs on garbage), else false. Ranges were checked
/// when the shard was leased; a field rewritten since to another number
/// cannot be told from one this crate wrote.
const CHECK_LUA: &str = include_str!("check.lua");

/// Renews the lease (1). If it expired, takes it again (2) only if the
/// record's `high_water` is exactly the last one this holder wrote, so
/// nobody reserved since; else 0 (another holder). 3 or more: the record is
/// gone or garbled, and the lease is left alone. The answer comes first in
/// an array, followed by the record's `high_water` and the server's `TIME`
/// (seconds, microseconds).
const RENEW_LUA: &str = include_str!("renew.lua");

/// Raises the high-water second (and `seen`) while the lease is held; never
/// lowers either, never creates the record. 1: done, 0: the lease is not
/// held, 3 to 7: the record is gone or garbled, 8: its `high_water` is below
/// `ARGV[5]`, the highest this holder raised it to.
const RAISE_LUA: &str = include_str!("raise.lua");

/// Clean close while the lease is held: records the exact last ID (raising
/// `high_water` to its second if it were ever below, never lowering it) and
/// deletes the lease. 1: done (also when the lease is gone but the record
/// holds this very last ID: the close ran before, and its reply was lost),
/// 0: the lease is not held; 3 or more: the record is gone or garbled, so
/// nothing is written and the lease is deleted.
const FINISH_LUA: &str = include_str!("finish.lua");

/// Keeps a lease whose shard has no record yet: 1 if it is still this
/// holder's (and renewed), 2 if a record appeared meanwhile, 0 if the lease
/// is not held.
const HOLD_LUA: &str = include_str!("hold.lua");

/// Creates the record of a shard that had none, if the lease is still this
/// holder's (renewing it) and the record is still absent. Same answers as
/// `HOLD`.
const CREATE_LUA: &str = include_str!("create.lua");

/// Raises the record `KEYS[1]` to `high_water` `ARGV[1]` and `seen`
/// `ARGV[2]` whoever holds the shard, never lowering either and dropping
/// `last` when `high_water` rises; re-creates a record that is gone. 1:
/// done, 0: the key holds another layout's record or no hash, and is left
/// alone.
const RESTORE_LUA: &str = include_str!("restore.lua");

/// Deletes the lease if it is still this holder's.
const RELEASE_LUA: &str = include_str!("release.lua");

/// Each script is hashed once; `invoke` loads it into a server that does
/// not know it (after a restart, say).
pub(super) static ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(ACQUIRE_LUA));
pub(super) static RENEW: LazyLock<Script> =
    LazyLock::new(|| Script::new(&[CHECK_LUA, RENEW_LUA].concat()));
pub(super) static RAISE: LazyLock<Script> =
    LazyLock::new(|| Script::new(&[CHECK_LUA, RAISE_LUA].concat()));
pub(super) static FINISH: LazyLock<Script> =
    LazyLock::new(|| Script::new(&[CHECK_LUA, FINISH_LUA].concat()));
pub(super) static HOLD: LazyLock<Script> = LazyLock::new(|| Script::new(HOLD_LUA));
pub(super) static CREATE: LazyLock<Script> = LazyLock::new(|| Script::new(CREATE_LUA));
pub(super) static RESTORE: LazyLock<Script> = LazyLock::new(|| Script::new(RESTORE_LUA));
pub(super) static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(RELEASE_LUA));

/// What a script that runs while a shard is held found wrong with the
/// record, from its answer (3 to 8).
pub(crate) fn record_trouble(config: &LeaseConfig, shard: u32, answer: i64) -> LeaseError {
    let key = key(config, "mark", shard);
    let field = match answer {
        3 => return LeaseError::RecordLost { shard, key },
        8 => return LeaseError::mark_lowered(shard, &key),
        5 => "seen",
        6 => "last",
        7 => "layout",
        _ => "high_water",
    };
    LeaseError::invalid_record(
        shard,
        key,
        field,
        "was changed in Redis to a value this crate does not write (or the key to another \
         type) while this generator held the shard",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn script_answers_name_the_trouble() {
        let c = LeaseConfig::new("redis://127.0.0.1/");
        assert!(matches!(
            record_trouble(&c, 2, 3),
            LeaseError::RecordLost { shard: 2, ref key } if key == "idutil:mark:2"
        ));
        for (answer, field) in [(4, "high_water"), (5, "seen"), (6, "last"), (7, "layout")] {
            match record_trouble(&c, 2, answer) {
                LeaseError::InvalidRecord { field: f, .. } => assert_eq!(f, field),
                other => panic!("{answer}: {other:?}"),
            }
        }
        let text = record_trouble(&c, 2, 3).to_string();
        assert!(
            text.starts_with("the lease's store lost the record of shard 2"),
            "{text}"
        );
    }
}
