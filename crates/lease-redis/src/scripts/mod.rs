//! The Lua scripts, one step each, atomic on the server; their text lives
//! in `scripts/*.lua`.

use std::sync::LazyLock;

use ::redis::Script;

use super::key;
use idutil_lease::{LeaseConfig, LeaseError};

/// Takes the first free shard of `ARGV[2]..=ARGV[3]` (skipping `ARGV[6..]`)
/// and returns it with its record's key type and fields, read as they are
/// (the caller checks them), the server's `TIME` (seconds, microseconds),
/// so that the holder knows Redis's clock from its first raise on, and 1 if
/// the record is stamped with the server's run ID (else 0).
const ACQUIRE_LUA: &str = include_str!("acquire.lua");

/// Shared by the scripts that read or write the record's stamp, the run ID
/// of the server under which a holder last found the record covering every
/// ID of the shard: `run_id()`, from `INFO server` (new at every start of
/// Redis, and different on every other server), and `stamp(key)`, which
/// writes it if it changed.
const RUN_LUA: &str = include_str!("run.lua");

/// Shared by the scripts that run while a shard is held: `check(key,
/// layout)` is 3 if the record is gone, 4 to 7 if its `high_water`, `seen`,
/// `last` or `layout` is not of the form this crate writes (so that the
/// arithmetic below never runs on garbage), else false. Ranges were checked
/// when the shard was leased; a field rewritten since to another number
/// cannot be told from one this crate wrote.
const CHECK_LUA: &str = include_str!("check.lua");

/// Renews the lease (1), stamping the record when its `high_water` is at
/// least `ARGV[3]`, the highest this holder raised it to. If it expired,
/// takes it again (2) only if the record's `high_water` is exactly the last
/// one this holder wrote, so nobody reserved since, and the record is
/// stamped with this server's run ID, so no restart since can have lost
/// another holder's raise (else 9); else 0 (another holder). 3 to 7: the
/// record is gone or garbled, and the lease is left alone. The answer comes
/// first in an array, followed by the record's `high_water` and the
/// server's `TIME` (seconds, microseconds).
const RENEW_LUA: &str = include_str!("renew.lua");

/// Raises the high-water second (and `seen`) while the lease is held, and
/// stamps the record; never lowers either, never creates the record; keeps
/// in `lead` the largest lead cap (`ARGV[6]`, whole seconds) a holder
/// raised under. 1: done, 0: the lease is not held, 3 to 7: the record is
/// gone or garbled, 8: its `high_water` is below `ARGV[5]`, the highest
/// this holder raised it to.
const RAISE_LUA: &str = include_str!("raise.lua");

/// Clean close while the lease is held: records the exact last ID (raising
/// `high_water` to its second if it were ever below, never lowering it),
/// stamps the record and deletes the lease. 1: done (also when the lease is gone but the record
/// holds this very last ID: the close ran before, and its reply was lost),
/// 0: the lease is not held; 3 or more: the record is gone or garbled, so
/// nothing is written and the lease is deleted.
const FINISH_LUA: &str = include_str!("finish.lua");

/// Keeps a lease whose shard has no record yet: 1 if it is still this
/// holder's (and renewed), 2 if a record appeared meanwhile, 0 if the lease
/// is not held.
const HOLD_LUA: &str = include_str!("hold.lua");

/// Ends the wait of a shard whose history is unknown (no record, or one not
/// stamped with this server's run ID), if the lease is still this holder's
/// (renewing it; else 0): the record's `high_water` becomes at least the
/// floor, Redis's clock (`TIME`) plus the larger of this holder's lead cap
/// (`ARGV[5]`) and the record's `lead`, plus `ARGV[7]` (the skew limit and
/// a second), at least `ARGV[3]` (the generator's clock) and at most
/// `ARGV[6]` (the layout's last second); the exact last ID is dropped, and
/// the record stamped. A record that is gone is created (1, with `seen`
/// `ARGV[3]` and layout `ARGV[4]`); one that is there is raised (2); each
/// answer comes first in an array, then the record as it now stands
/// (`high_water`, `seen`, `layout`), read in the same step. One that is
/// garbled or of another layout is left alone (4 to 7).
const SETTLE_LUA: &str = include_str!("settle.lua");

/// Raises the record `KEYS[1]` to `high_water` `ARGV[1]` and `seen`
/// `ARGV[2]` whoever holds the shard, never lowering either and dropping
/// `last` when `high_water` rises; re-creates a record that is gone. Never
/// stamps it: it holds this holder's mark, not necessarily every other's
/// (a re-created record is taken for one of unknown history). 1: done, 0:
/// the key holds another layout's record or no hash, and is left alone.
const RESTORE_LUA: &str = include_str!("restore.lua");

/// Deletes the lease if it is still this holder's.
const RELEASE_LUA: &str = include_str!("release.lua");

/// Each script is hashed once; `invoke` loads it into a server that does
/// not know it (after a restart, say).
pub(super) static ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(&[RUN_LUA, ACQUIRE_LUA].concat()));
pub(super) static RENEW: LazyLock<Script> =
    LazyLock::new(|| Script::new(&[CHECK_LUA, RUN_LUA, RENEW_LUA].concat()));
pub(super) static RAISE: LazyLock<Script> =
    LazyLock::new(|| Script::new(&[CHECK_LUA, RUN_LUA, RAISE_LUA].concat()));
pub(super) static FINISH: LazyLock<Script> =
    LazyLock::new(|| Script::new(&[CHECK_LUA, RUN_LUA, FINISH_LUA].concat()));
pub(super) static HOLD: LazyLock<Script> = LazyLock::new(|| Script::new(HOLD_LUA));
pub(super) static SETTLE: LazyLock<Script> =
    LazyLock::new(|| Script::new(&[CHECK_LUA, RUN_LUA, SETTLE_LUA].concat()));
pub(super) static RESTORE: LazyLock<Script> = LazyLock::new(|| Script::new(RESTORE_LUA));
pub(super) static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(RELEASE_LUA));

/// What a script that runs while a shard is held found wrong with the
/// record, from its answer (3 to 9).
pub(crate) fn record_trouble(config: &LeaseConfig, shard: u32, answer: i64) -> LeaseError {
    let key = key(config, "mark", shard);
    let field = match answer {
        3 => return LeaseError::record_lost(shard, key),
        8 => return LeaseError::mark_lowered(shard, &key),
        9 => {
            return LeaseError::lost(
                shard,
                format!(
                    "its lease lapsed in Redis, and Redis has started again since {key} was last \
                     confirmed (a restart, a restore, a promoted replica), so it cannot tell \
                     whether another holder's raise was lost meanwhile: the lease is not taken \
                     back"
                ),
            )
        }
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
            LeaseError::RecordLost { shard: 2, ref key, .. } if key == "idutil:mark:2"
        ));
        for (answer, field) in [(4, "high_water"), (5, "seen"), (6, "last"), (7, "layout")] {
            match record_trouble(&c, 2, answer) {
                LeaseError::InvalidRecord { field: f, .. } => assert_eq!(f, field),
                other => panic!("{answer}: {other:?}"),
            }
        }
        let text = record_trouble(&c, 2, 9).to_string();
        assert!(
            matches!(record_trouble(&c, 2, 9), LeaseError::Lost { shard: 2, .. })
                && text.contains("started again")
                && text.contains("not taken back"),
            "{text}"
        );
        let text = record_trouble(&c, 2, 3).to_string();
        assert!(
            text.starts_with("the lease's store lost the record of shard 2"),
            "{text}"
        );
    }
}
