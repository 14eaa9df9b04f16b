//! `lease check` for PostgreSQL: the server's setup read and judged, line
//! by line, without leasing anything.

use std::time::Duration;

use super::conn::{literal, number, off_runtime, Answer, Conn, Failure};
use super::replication::{Setup, PROBE};
use super::server_time;
use super::target::TABLE;
use super::target::{quote, Target};
use crate::layout::Layout;
use idutil_lease::LeaseConfig;
use idutil_lease::LeaseResult as Result;
use idutil_lease::{Finding, Verdict};

use Verdict::{Fail, Ok as Fine, Warn};

/// An expiry this far ahead is a row no holder renews: it is never freed.
const STUCK_AFTER: Duration = Duration::from_secs(24 * 3600);

/// Audits the server `config` names; see [`idutil::lease::check`](https://docs.rs/idutil/latest/idutil/lease/fn.check.html).
pub(crate) fn audit(config: &LeaseConfig, layout: &Layout) -> Result<Vec<Finding>> {
    off_runtime(|| audit_here(config, layout))
}

/// One connection, each query in a transaction of its own.
struct Audit<'a> {
    conn: Conn,
    target: &'a Target,
    config: &'a LeaseConfig,
    timeout: Duration,
    found: Vec<Finding>,
}

impl Audit<'_> {
    fn say(&mut self, verdict: Verdict, topic: &'static str, text: impl Into<String>) {
        self.found.push(Finding::new(verdict, topic, text));
    }

    /// The rows of one query.
    fn rows(&mut self, sql: String) -> std::result::Result<Vec<Vec<Option<String>>>, Failure> {
        let answers: Vec<Answer> = self.conn.write(self.target, self.timeout, &[sql])?;
        Ok(answers
            .into_iter()
            .next()
            .map(|a| a.rows)
            .unwrap_or_default())
    }

    /// The first row of one query, its cells as text ("" for NULL): at
    /// least `columns` of them, or a failure.
    fn row(&mut self, sql: String, columns: usize) -> std::result::Result<Vec<String>, Failure> {
        let rows = self.rows(sql)?;
        let row: Vec<String> = rows
            .into_iter()
            .next()
            .unwrap_or_default()
            .into_iter()
            .map(Option::unwrap_or_default)
            .collect();
        if row.len() < columns {
            return Err(Failure::Answer(format!(
                "{} columns answered where {columns} were asked for",
                row.len()
            )));
        }
        Ok(row)
    }

    fn failed(&mut self, topic: &'static str, f: Failure) {
        let e = f.into_error("audit", self.config);
        self.say(Fail, topic, e.to_string());
    }
}

fn audit_here(config: &LeaseConfig, layout: &Layout) -> Result<Vec<Finding>> {
    let range = config.range(layout, None)?;
    let target = Target::parse(config)?;
    let mut a = Audit {
        conn: Conn::open(config)?,
        target: &target,
        config,
        timeout: config.op_timeout().max(Duration::from_secs(2)),
        found: Vec::new(),
    };
    // The connection itself, a pooler that runs no transaction block, and
    // the server's own settings.
    if let Err(f) = a.conn.transaction_block(&target, a.timeout) {
        a.failed("connection", f);
        return Ok(a.found);
    }
    let settings = a.row(
        "SELECT current_setting('fsync'), current_setting('full_page_writes'), \
         current_setting('synchronous_commit'), pg_backend_pid(), \
         current_setting('server_version')"
            .to_string(),
        5,
    );
    let settings = match settings {
        Ok(row) => row,
        Err(f) => {
            a.failed("connection", f);
            return Ok(a.found);
        }
    };
    a.say(
        Fine,
        "connection",
        format!("{} (PostgreSQL {})", config.url_redacted(), settings[4]),
    );
    durability(&mut a, &settings);
    session(&mut a);
    replication(&mut a);
    pooler(&mut a, &settings[3]);
    let table_ok = schema(&mut a);
    clock(&mut a);
    if table_ok {
        rows(&mut a, layout, &range);
    }
    Ok(a.found)
}

fn durability(a: &mut Audit<'_>, s: &[String]) {
    let (fsync, fpw, commit) = (&s[0], &s[1], &s[2]);
    if fsync == "on" {
        a.say(Fine, "durability", "fsync = on");
    } else {
        a.say(
            Fail,
            "durability",
            format!(
                "fsync = {fsync}: a crash of the machine can lose committed marks; set fsync = on"
            ),
        );
    }
    if fpw == "on" {
        a.say(Fine, "durability", "full_page_writes = on");
    } else {
        a.say(
            Warn,
            "durability",
            format!(
                "full_page_writes = {fpw}: a crash mid-write can tear the table's pages; set \
                 full_page_writes = on unless the file system rules torn pages out"
            ),
        );
    }
    a.say(
        Fine,
        "durability",
        format!(
            "synchronous_commit = {commit} for the database; the lease's own transactions \
             commit with at least `on`"
        ),
    );
}

fn replication(a: &mut Audit<'_>) {
    let setup = match a.rows(PROBE.to_string()) {
        Ok(rows) => rows.first().and_then(|r| Setup::read(r)),
        Err(f) => return a.failed("replication", f),
    };
    let Some(setup) = setup else {
        return a.say(
            Warn,
            "replication",
            "the replication setup could not be read",
        );
    };
    match setup.risk() {
        None => a.say(Fine, "replication", setup.to_string()),
        Some(risk) if a.target.strict() => a.say(
            Fail,
            "replication",
            format!("{risk} (refused: replication=strict)"),
        ),
        Some(risk) => a.say(Warn, "replication", risk),
    }
}

/// A pooler in transaction mode hands each transaction any idle server
/// connection: two client connections open at once then share a backend,
/// or one connection's transactions run on several. A port the server
/// listens on that the URL does not name is a pooler or proxy in front.
fn pooler(a: &mut Audit<'_>, first_pid: &str) {
    let mut other = match Conn::open(a.config) {
        Ok(conn) => conn,
        Err(e) => return a.say(Fail, "pooler", e.to_string()),
    };
    let pid = "SELECT pg_backend_pid(), COALESCE(inet_server_port(), 0)".to_string();
    let (mut mine, mut theirs) = (vec![first_pid.to_string()], Vec::new());
    let mut port = String::new();
    for _ in 0..3 {
        match a.row(pid.clone(), 2) {
            Ok(row) => {
                mine.push(row[0].clone());
                port.clone_from(&row[1]);
            }
            Err(f) => return a.failed("pooler", f),
        }
        match other.write(a.target, a.timeout, std::slice::from_ref(&pid)) {
            Ok(answers) => theirs.extend(
                answers
                    .into_iter()
                    .flat_map(|a| a.rows)
                    .filter_map(|r| r.into_iter().next().flatten()),
            ),
            Err(f) => return a.failed("pooler", f),
        }
    }
    mine.sort();
    mine.dedup();
    let shared = theirs.iter().any(|p| mine.contains(p));
    let ports = a.target.ports();
    let behind = port
        .parse::<u16>()
        .ok()
        .filter(|p| *p != 0 && !ports.is_empty() && !ports.contains(p));
    let text = if shared || mine.len() > 1 {
        "two connections' transactions ran on shared server backends: a pooler in transaction \
         mode, which the lease works through (no prepared statement, no session setting)"
            .to_string()
    } else if let Some(server) = behind {
        format!(
            "the server listens on port {server}, which the URL does not name: a pooler in \
             session mode or a proxy sits in front; each holder keeps one server connection, \
             so size its pool to the fleet"
        )
    } else {
        "no pooler found in front of the server (each holder keeps one connection)".to_string()
    };
    a.say(Fine, "pooler", text);
}

/// The schema, the table in it, others of the same name, and the
/// privileges the lease needs. `true` if the table is there to read.
fn schema(a: &mut Audit<'_>) -> bool {
    let schema = a.target.schema().to_string();
    let table = a.target.table();
    let found = a.row(
        format!(
            "SELECT n.oid IS NOT NULL, to_regclass({table_lit}) IS NOT NULL, \
             COALESCE((SELECT s.nspname FROM pg_class c JOIN pg_namespace s \
                       ON s.oid = c.relnamespace WHERE c.oid = to_regclass({bare})), ''), \
             current_setting('search_path'), \
             (SELECT string_agg(s.nspname, ', ' ORDER BY s.nspname) \
              FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace \
              WHERE c.relname = {bare} AND c.relkind IN ('r', 'p')), \
             to_regclass({history_lit}) IS NOT NULL \
         FROM (SELECT 1) AS one LEFT JOIN pg_namespace n ON n.nspname = {schema_lit}",
            table_lit = literal(&table),
            bare = literal(TABLE),
            schema_lit = literal(&schema),
            history_lit = literal(&a.target.history_table()),
        ),
        6,
    );
    let row = match found {
        Ok(row) => row,
        Err(f) => {
            a.failed("schema", f);
            return false;
        }
    };
    if row[0] != "t" {
        a.say(
            Fail,
            "schema",
            format!(
                "the schema {schema:?} does not exist; create it, or name another with schema="
            ),
        );
        return false;
    }
    let exists = row[1] == "t";
    a.say(
        Fine,
        "schema",
        if exists {
            format!("the lease table is {table}, named with its schema in every statement")
        } else {
            format!("the lease table {table} does not exist yet; the first holder creates it")
        },
    );
    let others: Vec<&str> = row[4]
        .split(", ")
        .filter(|s| !s.is_empty() && *s != schema)
        .collect();
    if !row[2].is_empty() && row[2] != schema {
        a.say(
            Warn,
            "schema",
            format!(
                "this role's search_path ({}) finds {}.{TABLE} first: a tool or an older \
                 idutil that names the table without its schema would use another table than \
                 the lease",
                row[3],
                quote(&row[2])
            ),
        );
    } else if !others.is_empty() {
        a.say(
            Warn,
            "schema",
            format!(
                "other idutil_lease tables exist in schema(s) {}: only {table} is the lease's",
                others.join(", ")
            ),
        );
    }
    let history = a.target.history_table();
    privileges(a, &schema, &[(&table, exists), (&history, row[5] == "t")]);
    exists
}

/// What the lease needs on each of `tables` (name, whether it exists):
/// `SELECT, INSERT, UPDATE` on a table there, `CREATE` on the schema for
/// one the first holder creates.
fn privileges(a: &mut Audit<'_>, schema: &str, tables: &[(&str, bool)]) {
    const ON_TABLE: [&str; 3] = ["SELECT", "INSERT", "UPDATE"];
    const ON_SCHEMA: [&str; 1] = ["CREATE on the schema"];
    let mut columns = Vec::new();
    for (table, exists) in tables {
        if *exists {
            let t = literal(table);
            columns.extend(ON_TABLE.map(|p| format!("has_table_privilege({t}, '{p}')")));
        } else {
            columns.push(format!(
                "has_schema_privilege({}, 'CREATE')",
                literal(schema)
            ));
        }
    }
    let row = match a.row(format!("SELECT {}", columns.join(", ")), columns.len()) {
        Ok(row) => row,
        Err(f) => return a.failed("privileges", f),
    };
    let (mut has, mut lacks) = (Vec::new(), Vec::new());
    let mut answers = row.iter();
    for (table, exists) in tables {
        let names = if *exists {
            &ON_TABLE[..]
        } else {
            &ON_SCHEMA[..]
        };
        let missing: Vec<&str> = names
            .iter()
            .zip(answers.by_ref())
            .filter(|(_, granted)| *granted != "t")
            .map(|(name, _)| *name)
            .collect();
        if missing.is_empty() {
            has.push(format!("{} (for {table})", names.join(", ")));
        } else {
            lacks.push(format!("{} (for {table})", missing.join(", ")));
        }
    }
    if lacks.is_empty() {
        a.say(
            Fine,
            "privileges",
            format!("this role has {}", has.join("; ")),
        );
    } else {
        a.say(
            Fail,
            "privileges",
            format!("this role lacks {}", lacks.join("; ")),
        );
    }
}

/// The role's session defaults that a transaction of the lease meets:
/// those it overrides for itself are named, so that an operator who set
/// them knows the lease does not follow them; a statement timeout shorter
/// than a round trip's deadline is warned of. (A role that may not write,
/// `default_transaction_read_only`, is refused by the connection itself:
/// "database does not allow writes".)
fn session(a: &mut Audit<'_>) {
    let sql = "SELECT current_setting('default_transaction_isolation'), \
               current_setting('idle_in_transaction_session_timeout'), \
               current_setting('statement_timeout')"
        .to_string();
    let row = match a.row(sql, 3) {
        Ok(row) => row,
        Err(f) => return a.failed("session", f),
    };
    let (isolation, idle, statement) = (&row[0], &row[1], &row[2]);
    if isolation == "read committed" {
        a.say(
            Fine,
            "session",
            "default_transaction_isolation = read committed",
        );
    } else {
        a.say(
            Fine,
            "session",
            format!(
                "default_transaction_isolation = {isolation}: the lease runs its own \
                 transactions at read committed"
            ),
        );
    }
    if idle != "0" {
        a.say(
            Fine,
            "session",
            format!(
                "idle_in_transaction_session_timeout = {idle}: the lease's transactions are \
                 sent in one round trip each, and never wait idle"
            ),
        );
    }
    // The server cancels a statement past its own timeout: one shorter
    // than a round trip's deadline fails a call that would have finished.
    let deadline = a.timeout;
    match parse_duration_setting(statement) {
        Some(limit) if !limit.is_zero() && limit < deadline => a.say(
            Warn,
            "session",
            format!(
                "statement_timeout = {statement}, shorter than the lease's {deadline:?} for a \
                 round trip: a busy server fails calls that would have finished; raise it or \
                 set it to 0 for the lease's role"
            ),
        ),
        _ => {}
    }
}

/// A duration setting as `current_setting` shows it (`0`, `250ms`, `5s`,
/// `2min`, `1h`, `1d`).
fn parse_duration_setting(text: &str) -> Option<Duration> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let n: u64 = digits.parse().ok()?;
    let ms = match unit {
        "" | "ms" => n,
        "s" => n.checked_mul(1000)?,
        "min" => n.checked_mul(60_000)?,
        "h" => n.checked_mul(3_600_000)?,
        "d" => n.checked_mul(86_400_000)?,
        _ => return None,
    };
    Some(Duration::from_millis(ms))
}

fn clock(a: &mut Audit<'_>) {
    let clock_sql = "SELECT extract(epoch FROM clock_timestamp())::float8".to_string();
    let row = match a.row(clock_sql, 1) {
        Ok(row) => row,
        Err(f) => return a.failed("clock", f),
    };
    let server = row[0]
        .parse::<f64>()
        .ok()
        .and_then(|s| server_time(Some(s)));
    match server {
        Some(server) => a.found.push(Finding::clock(a.config, server)),
        None => a.say(Warn, "clock", "the server's clock could not be read"),
    }
}

/// Rows that never expire, rows of another layout, and free shards.
fn rows(a: &mut Audit<'_>, layout: &Layout, range: &std::ops::RangeInclusive<u32>) {
    let sql = format!(
        "SELECT count(*), \
             count(*) FILTER (WHERE expires_at <= clock_timestamp()), \
             string_agg(shard::text, ', ' ORDER BY shard) FILTER (WHERE expires_at > \
                 clock_timestamp() + make_interval(secs => {stuck}) \
                 AND NOT COALESCE(holder LIKE {database}, false)), \
             string_agg(DISTINCT layout, ', ') FILTER (WHERE layout <> {layout}), \
             string_agg(shard::text || E'\\t' || holder, E'\\n' ORDER BY shard) \
                 FILTER (WHERE holder LIKE {database}) \
         FROM {table} WHERE space = {space} AND shard BETWEEN {first} AND {last}",
        stuck = STUCK_AFTER.as_secs(),
        database = literal(&format!("{}%", super::sql::HOLDER_PREFIX)),
        layout = literal(&layout.fingerprint()),
        table = a.target.table(),
        space = literal(a.config.get_prefix()),
        first = range.start(),
        last = range.end(),
    );
    let row = match a.rows(sql) {
        Ok(rows) => rows.into_iter().next().unwrap_or_default(),
        Err(f) => return a.failed("rows", f),
    };
    let cell = |i: usize| row.get(i).cloned().flatten();
    let int = |i: usize| {
        number::<u64>(&cell(i), "a count")
            .ok()
            .flatten()
            .unwrap_or(0)
    };
    let (present, expired) = (int(0), int(1));
    if let Some(stuck) = cell(2) {
        a.say(
            Fail,
            "rows",
            format!(
                "shard(s) {stuck} of ID space {:?} expire more than a day ahead (or never, \
                 'infinity'): no holder renews that far, so they never come free by \
                 themselves; free each with `idutil lease release --shard N`, which keeps its \
                 mark",
                a.config.get_prefix()
            ),
        );
    } else {
        a.say(Fine, "rows", "no row is leased beyond any holder's TTL");
    }
    for line in cell(4).unwrap_or_default().lines() {
        let (shard, holder) = line.split_once('\t').unwrap_or((line, ""));
        database_shard(a, layout, shard, holder);
    }
    if let Some(other) = cell(3) {
        a.say(
            Fail,
            "rows",
            format!(
                "ID space {:?} was used with layout {other}, not {}: a generator with this \
                 layout is refused",
                a.config.get_prefix(),
                layout.fingerprint()
            ),
        );
    }
    let total = u64::from(range.end() - range.start()) + 1;
    let free = expired + total.saturating_sub(present);
    let text = format!(
        "{free} of {total} shards ({}..={}) of ID space {:?} are free",
        range.start(),
        range.end(),
        a.config.get_prefix()
    );
    let verdict = if free == 0 {
        Fail
    } else if free * 10 < total {
        Warn
    } else {
        Fine
    };
    a.say(verdict, "shards", text);
}

/// A shard the database holds ([`DatabaseHolder`](super::DatabaseHolder)):
/// fine while its counter is there; stuck for good when the functions
/// were dropped by hand, without the uninstall script.
fn database_shard(a: &mut Audit<'_>, layout: &Layout, shard: &str, holder: &str) {
    let function = holder.trim_start_matches(super::sql::HOLDER_PREFIX);
    let counter = function
        .strip_suffix("_next_id()")
        .map(|f| format!("{f}_counter"));
    let found = counter.and_then(|counter| {
        let (schema, name) = counter.split_once('.')?;
        let qualified = format!("{}.{}", quote(schema), name);
        let rows = a
            .rows(format!(
                "SELECT to_regclass({}) IS NOT NULL",
                literal(&qualified)
            ))
            .ok()?;
        Some(rows.first()?.first()?.as_deref() == Some("t"))
    });
    match found {
        Some(true) => {
            a.say(
                Fine,
                "database",
                format!(
                    "shard {shard} of ID space {:?} is held by the {holder} (idutil lease \
                     sql): no generator leases it while that is installed",
                    a.config.get_prefix()
                ),
            );
            database_counter(a, function, layout);
        }
        _ => a.say(
            Fail,
            "database",
            format!(
                "shard {shard} of ID space {:?} is held by the {holder}, but its counter is \
                 gone (dropped without the uninstall script): the shard never comes free; \
                 once its lead cap has passed since the drop, install it again (idutil lease sql \
                 --shard {shard} --apply), then uninstall \
                 it (--uninstall --apply)",
                a.config.get_prefix()
            ),
        ),
    }
}

/// The database's counter against the server's clock (how far ahead, and
/// whether a session holds its lock while idle: every catch-up waits for
/// it), for `function` (`SCHEMA.NAME_next_id()`).
fn database_counter(a: &mut Audit<'_>, function: &str, layout: &Layout) {
    let Some((schema, name)) = function
        .strip_suffix("_next_id()")
        .and_then(|f| f.split_once('.'))
    else {
        return;
    };
    let counter = literal(&format!("{}.{name}_counter", quote(schema)));
    let (class, key) = super::sql::database::lock_keys(schema, name);
    let sql = format!(
        "SELECT (pg_sequence_last_value({counter}::regclass) >> {bits}) + {epoch} \
             - floor(extract(epoch FROM clock_timestamp()))::bigint, \
         (SELECT string_agg(l.pid::text, ', ') FROM pg_locks AS l \
             JOIN pg_stat_activity AS s ON s.pid = l.pid \
             WHERE l.locktype = 'advisory' AND l.classid = {class}::oid \
               AND l.objid = {key}::oid AND l.objsubid = 2 AND l.granted \
               AND s.state LIKE 'idle%')",
        bits = layout.sequence_bits(),
        epoch = layout.epoch(),
    );
    let Ok(rows) = a.rows(sql) else {
        return a.say(Warn, "database", "the database's counter could not be read");
    };
    let cell = |i: usize| rows.first().and_then(|r| r.get(i).cloned().flatten());
    let lead = number::<i64>(&cell(0), "the lead")
        .ok()
        .flatten()
        .unwrap_or(0);
    let cap = a.config.get_max_lead().as_secs() as i64;
    if lead > cap {
        a.say(
            Warn,
            "database",
            format!(
                "the {function} counter is {lead} s ahead of the server's clock (lead cap \
                 {cap} s): its calls wait, or are refused, until the clock catches up"
            ),
        );
    }
    if let Some(pids) = cell(1) {
        a.say(
            Fail,
            "database",
            format!(
                "session(s) {pids} hold the {function} counter's lock while idle: every \
                 catch-up (each new second) waits for them; end them \
                 (pg_terminate_backend)"
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duration_settings_read_as_postgres_shows_them() {
        let ms = Duration::from_millis;
        assert_eq!(parse_duration_setting("0"), Some(ms(0)));
        assert_eq!(parse_duration_setting("250ms"), Some(ms(250)));
        assert_eq!(parse_duration_setting("5s"), Some(ms(5000)));
        assert_eq!(parse_duration_setting("2min"), Some(ms(120_000)));
        assert_eq!(parse_duration_setting("1h"), Some(ms(3_600_000)));
        assert_eq!(parse_duration_setting("1d"), Some(ms(86_400_000)));
        assert_eq!(parse_duration_setting("5 s"), None);
        assert_eq!(parse_duration_setting("s"), None);
        assert_eq!(parse_duration_setting("99999999999999999999d"), None);
    }
}
