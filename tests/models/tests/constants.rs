//! The models' numbers and copied lines are the code's: public constants
//! are imported (and checked here to be the values the models were built
//! around); private ones, and the lines `idutil_models::hot` copies, are
//! looked up in the source. A failure here means the code changed under
//! a model: update the model (`tests/models/src/`) with it.

use std::time::Duration;

use idutil::lease::{LeaseConfig, DEFAULT_MAX_LEAD, DEFAULT_MAX_SKEW, DEFAULT_TTL};
use idutil_models::lease::{Timing, MODEL_TTL, TICK};

/// `text` with every run of whitespace made one space, so that a check
/// survives reformatting.
fn flat(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn has(file: &str, text: &str, line: &str) {
    assert!(
        flat(text).contains(&flat(line)),
        "{file} no longer has `{line}`, which a model follows: update the model"
    );
}

#[test]
fn the_lease_model_runs_on_the_code_s_timing() {
    let t = Timing::code();
    // The model runs at a 10 s TTL, not the default (see `MODEL_TTL`);
    // the rules are the same fractions of either.
    assert_eq!(DEFAULT_TTL, Duration::from_secs(60));
    assert_eq!(MODEL_TTL, Duration::from_secs(10));
    assert_eq!(DEFAULT_MAX_SKEW, Duration::from_secs(5));
    assert_eq!(DEFAULT_MAX_LEAD, Duration::from_secs(30));
    for ttl in [MODEL_TTL, DEFAULT_TTL] {
        let config = LeaseConfig::new("postgres://model@localhost/model").ttl(ttl);
        assert_eq!(config.renew_every(), ttl / 3);
        assert_eq!(config.fence_after(), ttl - ttl / 4);
    }
    assert_eq!(
        (
            t.ttl,
            t.renew_every,
            t.fence_after,
            t.max_skew,
            t.max_lead,
            t.window
        ),
        (10_000, 3_333, 7_500, 5_000, 30, 5)
    );
    // The model's time step divides the TTL, the fence and the skew limit.
    assert_eq!(t.ttl % TICK, 0);
    assert_eq!(t.fence_after % TICK, 0);
    assert_eq!(t.max_skew % TICK, 0);
}

#[test]
fn the_lease_model_s_rules_are_the_code_s() {
    let config = include_str!("../../../crates/lease/src/config.rs");
    has("lease/config.rs", config, "self.ttl / 3");
    has("lease/config.rs", config, "self.ttl - self.margin()");
    has("lease/config.rs", config, "self.ttl / 4");
    let sql = include_str!("../../../crates/lease-postgres/src/sql/mod.rs");
    has(
        "postgres/sql/mod.rs",
        sql,
        "epoch = t.epoch + (t.epoch < {EPOCH_MAX})::int",
    );
    has(
        "postgres/sql/mod.rs",
        sql,
        "AND expires_at <= clock_timestamp()",
    );
    has(
        "postgres/sql/mod.rs",
        sql,
        "\"space = {} AND shard = {} AND epoch = {} AND holder = {}\"",
    );
    has(
        "postgres/sql/mod.rs",
        sql,
        "WHERE {} AND COALESCE(high_water, 0) >= {known}",
    );
    let history = include_str!("../../../crates/lease-postgres/src/sql/history.rs");
    has(
        "postgres/sql/history.rs",
        history,
        "LEAST(floor(GREATEST({now}, 0))::numeric + {reach} + 2 * {skew} + 1, {BIGINT_MAX})::bigint",
    );
    // `Floor::Code`'s reach in force: the holder that last took the row
    // (its shard's reach, recorded when it took the row, whether it holds
    // the row still or gave it back), at least the leaser's.
    has(
        "postgres/sql/history.rs",
        history,
        "GREATEST({max_lead}, CASE",
    );
    has(
        "postgres/sql/history.rs",
        history,
        "ELSE COALESCE(h.max_lead, r.was_cap) END)",
    );
    has(
        "postgres/sql/history.rs",
        history,
        "AND (l.holder IS NOT NULL OR l.high_water IS NOT NULL)) \\",
    );
    has(
        "postgres/sql/history.rs",
        history,
        "let mark = past(\"clock\", \"reach\", skew);",
    );
    has(
        "postgres/sql/mod.rs",
        sql,
        "ON CONFLICT (space, shard) DO UPDATE SET max_lead = EXCLUDED.max_lead)",
    );
    let caps = include_str!("../../../crates/lease-postgres/src/history.rs");
    has(
        "postgres/history.rs",
        caps,
        "let reach = whole_seconds(config.get_max_lead()).saturating_add(whole_seconds(config.fence_after()));",
    );
    let renewal = include_str!("../../../crates/lease/src/renewal.rs");
    has(
        "lease/renewal.rs",
        renewal,
        "if renewed.mark.unwrap_or(0) < known {",
    );
    let skew = include_str!("../../../crates/lease/src/skew.rs");
    has(
        "lease/skew.rs",
        skew,
        "ahead.abs() > config.max_skew.as_secs_f64()",
    );
    has(
        "lease/renewal.rs",
        renewal,
        "check_skew(&self.config, Some(self.shard), host_time(), server)",
    );
    let acquire = include_str!("../../../crates/lease-postgres/src/acquire.rs");
    has("postgres/acquire.rs", acquire, "history::check_space(");
    // The history is checked where a shard is leased, and nowhere else
    // (what the lease model's holders do).
    let held = include_str!("../../../crates/lease-postgres/src/held.rs");
    assert!(
        !held.contains("history::"),
        "held.rs checks the history now: update the model"
    );
}

#[test]
fn the_hot_path_model_copies_the_code_s_lines() {
    let hot = include_str!("../../../src/generator/inner/hot.rs");
    has(
        "inner/hot.rs",
        hot,
        "let mut cur = self.cursor.0.load(Relaxed);",
    );
    has(
        "inner/hot.rs",
        hot,
        "if last >= self.hot.limit.load(Acquire) {",
    );
    has(
        "inner/hot.rs",
        hot,
        ".compare_exchange_weak(cur, cur + n, Relaxed, Relaxed)",
    );
    has(
        "inner/hot.rs",
        hot,
        "cold.block = (block.start, block.end); self.jump_to(&mut cold, block.start); \
         self.publish_limit(&cold, 0); return Ok(());",
    );
    has(
        "inner/hot.rs",
        hot,
        "if last >= cold.block.1 || self.cursor.0.load(Relaxed) & !FLAGS < cold.block.0 {",
    );
    let reserve = include_str!("../../../src/generator/inner/reserve.rs");
    has(
        "inner/reserve.rs",
        reserve,
        "let limit = self.hot.layout.counter_at(limit + 1).min(cold.block.1); \
         self.hot.limit.store(limit, Release);",
    );
    has(
        "inner/reserve.rs",
        reserve,
        "let mut limit = soft.max(floor.min(cold.reserved));",
    );
    let inner = include_str!("../../../src/generator/inner/mod.rs");
    has("inner/mod.rs", inner, "const CLOSED: u64 = 1 << 63;");
    has(
        "inner/mod.rs",
        inner,
        "const FLAGS: u64 = CLOSED | PAUSED | CLOCK_OUT;",
    );
    has(
        "inner/mod.rs",
        inner,
        "let before = self.cursor.0.fetch_max(to, Relaxed);",
    );
    assert_eq!(idutil_models::hot::CLOSED, 1 << 63);
}

#[test]
fn the_shared_shard_model_s_rules_are_the_code_s() {
    let shared = include_str!("../../../src/durable/shared.rs");
    has(
        "durable/shared.rs",
        shared,
        "reserved = reserved.max(disk_mark(store, ask.clock_id)?);",
    );
    has(
        "durable/shared.rs",
        shared,
        "let next = claims.next.unwrap_or(limit);",
    );
    has(
        "durable/shared.rs",
        shared,
        "let start = next.max(ask.from);",
    );
    has(
        "durable/shared.rs",
        shared,
        "if claims.next == Some(block.1) && block.0 < block.1 {",
    );
    has(
        "durable/shared.rs",
        shared,
        "let trusted = noted == Some(next) && claims.reserved == Some((prev.clock_id, mark)) \
         && prev.last.is_none()",
    );
    has(
        "durable/shared.rs",
        shared,
        "Ok([from_claim, noted] .into_iter() .flatten() .filter(|&next| next <= limit) .max())",
    );
    let open = include_str!("../../../src/generator/open.rs");
    has(
        "generator/open.rs",
        open,
        "start = next.max(layout.counter_at(now_unix)).min(start);",
    );
    has("generator/open.rs", open, "start = start.max(floor);");
    let store = include_str!("../../../src/state/store.rs");
    has(
        "state/store.rs",
        store,
        "let wrote = Some(self.wrote.load(Relaxed)).filter(|&w| w > next);",
    );
    has(
        "state/store.rs",
        store,
        "Ok(noted) => match noted.filter(|&n| n > next).max(wrote) {",
    );
    // `Rules::CHECKED.keep_note_without_next`: the code writes a claim
    // without a `next` first and leaves the note as it is.
    has("state/store.rs", store, "if claims.next.is_none() {");
    let claim = include_str!("../../../src/state/claim.rs");
    has(
        "state/claim.rs",
        claim,
        "if same_boot { claims } else { Claims::default() }",
    );
    let lock_file = include_str!("../../../src/state/lock_file.rs");
    assert!(
        flat(lock_file).contains("high_water"),
        "state/lock_file.rs keeps no mark: update the model"
    );
    // The model's window is the code's, scaled to its one-second range.
    assert_eq!(idutil::DEFAULT_WINDOW, Duration::from_secs(5));
    assert_eq!(idutil_models::shared::WINDOW, 1);
}
