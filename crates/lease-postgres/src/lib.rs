//! The PostgreSQL engine (feature `postgres-lease`): shards leased from
//! the database the application already runs. The recommended engine.
//!
//! ```no_run
//! use idutil::{lease::LeaseConfig, Generator};
//!
//! let generator = Generator::builder()
//!     .lease(LeaseConfig::new("postgres://app@db.internal/app?sslmode=verify-full"))
//!     .open()?;
//! let id = generator.next_id()?;
//! # Ok::<(), idutil::Error>(())
//! ```
//!
//! Or without code: `IDUTIL_LEASE_URL=postgres://...`
//! ([`env::LEASE_URL`](idutil_core::env::LEASE_URL), which
//! [`idutil::IdUtil`](https://docs.rs/idutil/latest/idutil/struct.IdUtil.html) reads), `idutil --lease postgres://... next`.
//!
//! # The table
//!
//! One table, `idutil_lease`, created on first use (`CREATE TABLE IF NOT
//! EXISTS`) in the schema `public`, or the one named by the URL's
//! `schema=` option or [`LeaseConfig::schema`]. Every statement names the
//! table with its schema, whatever the session's `search_path`: services
//! whose roles have different search paths (a role `api` with a schema of
//! its own name comes first on its default path) share one table, and so
//! one ID space. One row per ID space ([`LeaseConfig::prefix`]) and shard:
//!
//! | column | meaning |
//! |---|---|
//! | `space`, `shard` | the key |
//! | `layout` | the layout's fingerprint: one ID space is one layout, and a generator with another is refused |
//! | `holder` | the holder's token (`host:pid:nanos:n`), while leased |
//! | `epoch` | the **fencing epoch**: raised by every acquisition; every write of a holder is conditioned on its own |
//! | `expires_at` | when the lease expires, by the **server's clock** |
//! | `high_water` | no ID on the shard has a later Unix second; only ever raised; `NULL`: never used |
//! | `last_second`, `last_sequence` | the exact last ID after a clean close, until the next holder reserves |
//! | `seen` | the highest wall-clock second a holder saw |
//! | `written_by` | the transaction that wrote the row, as every write of the lease records it (`txid_current()`): a row it does not match was not written by the lease, and is raised ([below](#restores-and-rewound-histories)) |
//!
//! The rows of an ID space are created together, the first time a holder
//! finds none in its range (under an advisory lock, so two layouts cannot
//! mix); a row is never deleted by the lease. Beside it, in the same
//! schema, a second table, `idutil_lease_history`, keeps what the rows were
//! written under (below,
//! [*Restores and rewound histories*](#restores-and-rewound-histories)).
//! A lease whose `expires_at` is more than a day ahead (`'infinity'`, as a
//! row edited by hand leaves it) never expires by itself: it is named in
//! [`LeaseError::NoFreeShard`](idutil_lease::LeaseError::NoFreeShard) and freed by
//! [`idutil::lease::release`](https://docs.rs/idutil/latest/idutil/lease/fn.release.html) (`idutil lease release --shard N`),
//! which keeps the mark. A row whose `high_water` is `NULL` is a
//! shard never used: with a database that keeps what it commits, there is
//! no first-use wait (Redis needs one). Acquiring a free shard is one
//! `UPDATE ... FOR UPDATE SKIP LOCKED` on an index of `(space,
//! expires_at)`, whatever the number of shards, which checks the shard's
//! history in the same statement.
//!
//! # What it promises, and on which deployment
//!
//! - **A raise is committed before an ID past it is issued**, with
//!   `synchronous_commit` at least `on` for each of the lease's
//!   transactions whatever the database's default. With a **synchronous
//!   standby** (`synchronous_standby_names`), a committed raise is on the
//!   standby too, so a failover to it loses no mark, and an old primary
//!   cut off from its standby cannot commit: its holders can neither renew
//!   nor raise, and fence themselves within three quarters of the TTL while
//!   the promoted standby grants the shard to a new holder that resumes
//!   after every mark. **No duplicate through failover or split brain.**
//! - **A commit counts only once the standby has it.** A commit whose wait
//!   for the synchronous standby was cancelled (an operator's
//!   `pg_cancel_backend` on a hung commit, a client cancel) comes back from
//!   PostgreSQL as a success with the warning "canceling wait for
//!   synchronous replication": the lease reads that warning and counts
//!   such a raise or renewal as failed, as it does a connection lost during
//!   the commit. The holder issues nothing past that mark; it writes again,
//!   and only a later commit the standby confirms (which covers the earlier
//!   one) lets it go on, or it fences itself.
//! - With an **asynchronous standby**, a failover can lose the last raises
//!   before it, as any asynchronous replica loses the last commits. The
//!   promoted standby's new timeline tells this apart: the first holder to
//!   lease there raises every row past what a holder can have issued (the
//!   lead cap, below), and a holder that followed to it and finds its mark
//!   lowered writes the mark back and stops. Nothing is issued twice, but
//!   such holders stop and must be reopened, and the bound rests on every
//!   holder's lead cap: a synchronous standby is still the deployment for
//!   a fleet that must ride out failover.
//! - A single server: a mark committed is a mark kept (with `fsync` on),
//!   through crashes and restarts.
//! - The **server's clock** decides expiry, and every renewal compares it
//!   with this host's: beyond [`LeaseConfig::max_skew`] the holder stops
//!   issuing (see [the lease's rules](idutil_lease)).
//!
//! # Restores and rewound histories
//!
//! A table restored from a backup holds the marks of the backup's time,
//! and holders may have issued past them since. So may a server recovered
//! to an earlier point in time, or a standby promoted before it had every
//! raise. The rows cannot tell, so the lease keeps, in
//! `idutil_lease_history`, what they were written under: for each ID space
//! the server's system identifier (`pg_control_system()`, where the role
//! may run it), its timeline, and the lease table's OID and file node;
//! and for each shard that ever had a mark, a row of its own. A dump
//! restores none of these into agreement: `pg_restore` or `psql` create the
//! table again (a new OID), `TRUNCATE` and a reload give it a new file
//! node, another cluster has another system identifier, a point-in-time
//! recovery or a promotion starts a new timeline, and a shard whose row
//! lost its mark still has its history row.
//!
//! A holder that finds any of these treats the history as unknown: it
//! raises every row of the ID space (or the one row) past every ID a
//! holder can have issued, or can still issue before it learns of the
//! change: to the server's clock plus the *reach* in force, plus twice
//! [`LeaseConfig::max_skew`] (a holder's clock against the server it
//! leased from, and that server's against this one: 10 s by default),
//! plus one second. A holder's reach is its lead cap (the smaller of
//! [`LeaseConfig::max_lead`], 30 s by default, and the generator's own,
//! [`idutil::Builder::max_lead`](https://docs.rs/idutil/latest/idutil/struct.Builder.html#method.max_lead) or the command's
//! `--max-lead`) plus its fence (three quarters of its TTL), each rounded
//! up to whole seconds: 75 s with the defaults (a 45 s fence; 38 s with
//! a TTL of 10 s). The reach in force is the
//! largest of the leasing holder's own and those the history recorded for
//! the holders that last took the rows: each shard's history row keeps
//! the reach of the holder that last took the shard, and every row with a
//! holder or a mark counts (a store that lost its last writes may have
//! lost a takeover by a holder on no record, for which the shard's last
//! recorded holder stands). The database's own row, and a row with no reach
//! recorded, count the largest reach the ID space ever recorded, as does
//! every row when the lease table is another one than the history
//! recorded (a dump restored, a rewrite), whose rows may be older than the
//! history. (An earlier idutil records no reach per shard: a row it takes
//! over from this one's holder still shows that holder's reach, so while
//! both run in one ID space, give them one cap.) It logs why, records the
//! new identity, and leases.
//!
//! The cost is a jump of that many seconds in the shard's IDs (86 s with
//! the defaults; 49 s with a TTL of 10 s) and a wait before the first ID until the clock is within
//! the holder's lead cap of it, never a re-issued ID. From a promotion (or
//! any of the changes above) to a new holder's first ID, at most (in
//! whole seconds, each term rounded up):
//!
//! ```text
//! reach in force + 2 × max_skew + 2 s − the holder's lead cap
//! = fence + 2 × max_skew + 2 s                (when every holder has one cap)
//! ```
//!
//! 57 s with the defaults (the 60 s TTL's fence is 45 s), 20 s with a TTL
//! of 10 s, with or without a lower cap. A holder that asks for the old
//! holder's shard also waits for its lease to expire on the promoted
//! server, a TTL, at the same time (BENCHMARKS.md, *Promotion to the
//! first ID*, after a split brain: 59.7 s with the defaults, 19.4 s with
//! a TTL of 10 s, for holders capped at 1 s as for the default caps). A holder capped lower
//! than the last recorded holder of some shard waits the difference too
//! (with a TTL of 10 s, capped at 1 s after a holder with the default caps
//! last held a shard: about 48 s, until a holder with the lower cap
//! leases that shard):
//! give every holder of an ID space the same cap in force. That is also
//! what covers a holder that leased after the point a store lost its last
//! writes (an asynchronous standby, a point-in-time recovery) with a cap
//! larger than any recorded: it is on no record.
//!
//! To shorten the wait, shorten the TTL (the fence is three quarters of
//! it) and the skew
//! limit: a TTL of 2 s and a skew limit of 1 s wait 6 s at most. A lower
//! lead cap shortens the jump, not the wait. A holder that must wait for
//! an old holder's lease to expire (the shard it asks for by number, or
//! every shard held) waits for that too, at the same time: up to one TTL.
//! A holder that finds the history unknown in the shard's row alone (the
//! row was deleted and created again) raises it past the largest reach the
//! ID space ever recorded. `VACUUM FULL` or `CLUSTER` of the lease table
//! gives it a new file node too, and costs the same once; so does the
//! first lease of an ID space that an earlier idutil used (marks, but no
//! history yet).
//!
//! Some restores keep all of that: the tables emptied with `DELETE` and
//! reloaded with `pg_restore --data-only` (the history with them, or
//! kept), or a dump restored into a fresh cluster, whose tables get the
//! OIDs and file nodes the first cluster gave (the same order of creation
//! after `initdb`), on timeline 1, for a role that may not run
//! `pg_control_system()`, as managed services grant. What they cannot keep
//! is who wrote the rows: every write of the lease records its
//! transaction's ID in the row (`written_by`), and a row whose version was
//! written by another transaction (its `xmin`), by one this server has not
//! reached, or together with rows that recorded another writer, was
//! written by a restore or by hand. The same check then raises every row
//! of the ID space the same way (a restore that wrote each row in a
//! transaction of its own, `pg_dump --inserts`, may by chance have given
//! one row the ID it recorded: the others give the restore away), and
//! records them as the lease's. `VACUUM FREEZE`, `VACUUM
//! FULL`, `CLUSTER`, `pg_upgrade` and a promoted standby keep who wrote a
//! row. A table of an earlier idutil gets the column from the first
//! holder that finds it missing, and its rows, which name no writer, are
//! raised once (a table upgraded in place cannot be told from an earlier
//! idutil's dump restored into a fresh cluster); while holders of an earlier
//! idutil still write the table, each newer holder's lease after they
//! wrote raises every row of the ID space.
//! Not told apart: a restore in another cluster whose transaction has, by
//! chance, the ID (modulo 2^32) that every restored row of the space
//! recorded (all of them last written by one transaction: their creation,
//! or a raise of the whole space); a restore of a physical backup, which
//! keeps the rows' `xmin`; an edit that writes `written_by` itself; and,
//! until the next lease of the space, a restore under a live holder, whose
//! renewals do not look at the writer.
//!
//! The raise counts from the server's clock, so a server whose clock is
//! further from the holder's than [`LeaseConfig::max_skew`] raises
//! nothing: the holder is refused first
//! ([`LeaseError::ClockSkew`](idutil_lease::LeaseError::ClockSkew)), and no
//! mark moves to where holders on true clocks would wait for it.
//!
//! A holder that finds its own row lowered, deleted or truncated while it
//! holds the shard writes its mark back before it stops ([the
//! rule](idutil_lease)), and a holder's host keeps the marks of the shards
//! it leased in its state file.
//!
//! # The database as a holder
//!
//! Every writer that is not a Rust holder (an admin's `INSERT` in psql, a
//! migration that back-fills rows, a service in another language, a
//! trigger, `COPY`) gets IDs in the same ID space from the database
//! itself, which holds a shard of its own:
//!
//! ```sql
//! CREATE TABLE notes (id bigint PRIMARY KEY DEFAULT idutil_next_id(), body text);
//! ```
//!
//! Install it with one script, plain SQL and PL/pgSQL (no extension, so
//! managed PostgreSQL runs it), printed by `idutil lease sql --shard 31`
//! for a migration file (sqlx, diesel, refinery) or run by `idutil lease
//! sql --shard 31 --apply` ([`DatabaseHolder`] in code). It names the
//! lease's schema (the URL's `schema=`) and ID space, creates the lease
//! tables if missing, and takes the shard's row: `holder` becomes
//! `database function SCHEMA.idutil_next_id()` and `expires_at`
//! `'infinity'`, so no Rust holder leases it while it is installed
//! (refused while a live holder has it, and for an ID space recorded with
//! another layout). Running it again changes nothing; a later version's
//! script replaces the functions in place. `idutil lease check` names the
//! shard, `idutil state` shows its holder, `idutil lease release` refuses
//! it, and a generator that finds no free shard says which one the
//! database holds. `--uninstall` prints the script that gives it back: it
//! records the counter's exact last ID in the row (the next holder resumes
//! after it), frees the row and drops the functions, and PostgreSQL
//! refuses it while a column's default still calls the function.
//!
//! Beside `NAME_next_id()` (`NAME` is `idutil` unless `--name` says
//! otherwise, for a second ID space in one schema) the script creates
//! `NAME_time(id)` (an ID's second, as `timestamptz`; an error for a
//! number that is not an ID), and `NAME_min_at(t)` / `NAME_max_at(t)`, the
//! first and last ID of the second that holds `t` on any shard
//! ([`idutil::Id::min_at`](https://docs.rs/idutil/latest/idutil/struct.Id.html#method.min_at), [`idutil::Id::max_at`](https://docs.rs/idutil/latest/idutil/struct.Id.html#method.max_at);
//! `NULL` outside the layout), so that `WHERE id BETWEEN
//! idutil_min_at(now() - interval '1 hour') AND idutil_max_at(now())` works
//! from psql. A writer needs only its own table's privileges: the
//! function runs as the role that installed it (`SECURITY DEFINER`, every
//! operator named with its schema, the locked path's `search_path`
//! pinned), whose counter no other role may draw from or move.
//!
//! **What it promises.** No ID a Rust holder of the ID space issues (the
//! shard is the database's alone), and none the function handed out
//! before, through concurrent sessions, transactions rolled back or
//! aborted, a transaction pooler, a server crash, a promoted standby, a
//! restored dump and a server clock set back; IDs increasing within a
//! session (and across the sessions of a pooler's client); every ID within
//! 2^53 − 1; its second the server's clock's when it was made, or later by
//! at most the lead cap ([`LeaseConfig::max_lead`], read at install) when
//! more than the layout's sequence (65,536 with the default) is asked in a
//! second: it borrows the next second, as a generator does, and past the
//! lead cap a call waits. One shard's sustained rate is therefore the
//! layout's sequence per second. A value handed out by a transaction that
//! never committed counts too: a PostgreSQL sequence may hand such a value
//! out again after a crash (its draw never reached the disk), so after
//! every start of the server (a crash, a restart, a promotion) the first
//! call jumps the counter past the lead cap of the highest clock second
//! seen, past every value handed out before, and the calls wait about a
//! second for the clock.
//!
//! **How the counter works.** The counter is a PostgreSQL sequence
//! (`NAME_counter`: the second since the layout's epoch and the sequence
//! within it, as one number), never rolled back, WAL-logged ahead of the
//! values it hands out, replicated. A row updated per call would serialise
//! every inserting transaction behind the one that holds it; a sequence
//! does not. The price is the catch-up: moving a sequence forward to the
//! clock takes `setval`, which is a blind write. So a call draws from the
//! sequence without a lock only when the counter already sits in the
//! clock's second (or a later one within the lead cap) and in the second
//! of the last catch-up, at or past the *fence* (`NAME_fence`), checked by
//! reading it first (a call that will not use the counter does not draw).
//! Otherwise (each new second, a lagging or leading counter, a new
//! session) it takes a session-level advisory lock, released whatever
//! happens (a cancel included), and there: raises the fence first to the
//! value the counter must reach (the clock's second, the row's mark, the
//! fence), draws, and if behind, jumps with `setval` only when the value
//! drawn is further behind than the number of sessions the server can run
//! (each can have read the counter before the fence rose, and so draw once
//! more at most), else walks with `nextval`. A jump therefore never lands
//! below a value handed out. `NAME_seen` keeps the highest second the
//! server's clock showed, from which the lead is counted, so a clock set
//! back does not count as lead: the counter goes on from its own second
//! (on the locked path until the clock catches up).
//!
//! **What it costs.** A call costs about 1.1 µs more than the `nextval`
//! a `bigserial` pays (PL/pgSQL itself, the clock, and reading the counter
//! and the fence before drawing). With 8 clients, a table keyed by it
//! took 0.89× `bigserial`'s rows a second at one row a transaction and
//! 0.60× at 100 rows a transaction, within the lead cap; past the cap,
//! one shard's sequence per second (BENCHMARKS.md, *`DEFAULT
//! idutil_next_id()` in PostgreSQL*).
//!
//! **Restores and failovers.** The first call of each session (and of each
//! server connection a pooler opens) runs the same history check as a
//! holder ([*Restores and rewound
//! histories*](#restores-and-rewound-histories)): a dump restored (new
//! OIDs), another cluster, a point-in-time recovery or a promoted standby
//! (a new timeline) raises every row of the ID space, the database's
//! counter with them, past the server's clock plus the reach in force
//! plus twice the skew limit plus one second, and records the new
//! identity (a row the lease did not write, reloaded in place or edited
//! by hand, raises them all too); the calls then wait until the counter is
//! within the lead cap. That raise and the identity it records belong to
//! the calling transaction; if it rolls back, the counter stays raised (a
//! sequence is not rolled back) and the next session's first call raises
//! the rows again from the second the first one raised from (while the
//! server, in the same run, the lease table and the recorded history are
//! the ones it raised for), so the wait is paid once, however many first
//! calls roll back. A server started anew on the same data (a physical
//! backup restored, a crash) raises from its own clock: the server that
//! ran before may have handed out more since the raise. Installing a second
//! ID space under the same name (or another shard for the same one) is
//! refused.
//!
//! **Clocks.** A server clock outside the layout (before its epoch, past
//! 2136 with the default) is refused before anything moves. The lead cap
//! is kept as a holder keeps it: a call past it waits, under the lock, so
//! that one wait serves every caller, and a wait longer than the raise of
//! a restore (twice the lead cap, the skew limit twice and a second) is
//! refused before anything moves. The lead is counted from the highest
//! second the server's clock showed, so a clock set back is not lead: the
//! counter goes on from its own second. A clock set ahead for a moment
//! moves the counter with it, and the database's IDs then carry seconds
//! ahead of the clock until it catches up (unique throughout).
//!
//! **Limits.** A counter set back by hand (or restored apart from the
//! rest), and a restore of a physical backup that keeps the system
//! identifier, the timeline, the OIDs and the rows' writers, are not told
//! apart, for the database as for a holder.
//!
//! **Without a lease** (one application on one database, its shard from
//! its host name): install the function with a shard the application never
//! uses (`idutil lease sql --shard 31`), so the database's IDs and the
//! application's never meet; the lease tables it creates hold that one
//! row.
//!
//! # Opening and closing: the deadlines
//!
//! An open is a handful of round trips: the pooler's mode, the
//! replication setup, the ID space's history, the acquisition (one
//! statement, which also checks the shard's history), then the shard's
//! first mark. Each has a round trip's deadline (a fifth of the TTL, at
//! least 2 s), but the open as a whole has its own,
//! [`LeaseConfig::open_timeout`] (**30 s** by default): a step that failed
//! in a way that may pass (no answer in time, a connection refused or
//! cut, a server restarting or out of connections, `40001`, `40P01`,
//! `55P03` lock timeouts, `57014` a cancelled statement, PgBouncer's
//! errors and queue, a commit the synchronous standby did not confirm) is
//! tried again on a fresh connection after a random pause (up to 20 ms,
//! doubling at each try to 1 s), each try given twice as long to answer as
//! the last (up to 16 round trips), within the time left. So a crowd of holders opening at once,
//! a busy server or machine, a queue at a small pool, a restart of the
//! server or of the pooler make opens slower, not failed. A step that
//! cannot pass (a refused login, a certificate that does not verify,
//! another layout's ID space, every shard leased) fails at once. Past the
//! deadline the open fails with [`LeaseError::Store`](idutil_lease::LeaseError::Store),
//! naming the step and its last failure, and that the open deadline ran
//! out after so many tries. The deadline bounds each of the lease's two
//! parts of an open: leasing the shard, and, once the state directory is
//! open, recording the shard's first mark; the state directory's part in
//! between (its locks and files) is not counted.
//!
//! What a lost answer leaves behind. A statement whose answer never came
//! may still have committed:
//!
//! - **The acquisition** writes the open's token (`host:pid:nanos:n`,
//!   unique to the open) into the row it takes. After any failed try, the
//!   next one first looks for a row of the range that still holds that
//!   token, and takes it back, with the fencing epoch the lost acquisition
//!   gave it, rather than a second row. A token still in a row means no
//!   acquisition or release wrote it since, so nobody else holds that
//!   shard: two holders never get one shard. A row whose acquisition
//!   commits only after the next try looked (the server was still working
//!   on it when the client gave up) stays leased to nobody until its TTL
//!   runs out, as does the row of an open that ran out of time: at most
//!   one TTL, and no ID was issued on it.
//! - **The history checks** never lower a mark and record what they found;
//!   run again, they find their own record (only their warning is lost).
//! - **The first mark** is conditioned on the holder's key and never
//!   lowers a mark: a raise that went through unseen makes the next try a
//!   no-op that succeeds. Its tries wait one round trip each, so the
//!   renewals get the connection between them.
//!
//! **Closing** gives the lease back in one statement, tried again the same
//! way within **a quarter of the TTL, at most 2.5 s** (a round trip waits
//! a fifth of it, at most 2 s), after any call
//! in flight on the holder's connection (a round trip's deadline); a try
//! that finds nothing to give back after one whose answer was lost reads
//! the row, and a row at this holder's fencing epoch with no holder was
//! given back by it. A close that runs out of time logs a warning saying so: the lease
//! then expires by itself within a TTL of its last renewal, and its mark
//! still covers every ID issued.
//!
//! Measured (see BENCHMARKS.md, *Many holders opening at once*): a
//! thousand holders opening at once in one process on a loaded two-core
//! machine all open and each gets its own shard, through PgBouncer in
//! transaction mode with a pool of 10 as with a connection each.
//!
//! # URLs, TLS and failover
//!
//! `postgres://user:password@host:port/db?option=value`, or libpq's
//! `key=value` form, as `tokio-postgres` reads them, plus libpq's TLS
//! options:
//!
//! - `sslmode=disable`, `prefer` (the default), `require` (encrypted, the
//!   certificate unchecked unless `sslrootcert` is given), `verify-ca`,
//!   `verify-full` (chain and host name: what managed databases advise);
//!   the system's root certificates, or `sslrootcert=/path/ca.pem`.
//! - Several hosts, `postgres://u@a:5432,b:5432/db?target_session_attrs=read-write`
//!   (or `host=a,b`): each connection goes to the first that accepts
//!   writes, so a fleet follows a failover to the promoted standby.
//!   `target_session_attrs=read-write` is implied, whatever the URL says
//!   (the lease only ever writes), and each host but the last gets its
//!   share of the round trip's deadline, so a host that drops packets or
//!   never answers does not keep a connection from the next.
//!
//! The URL's own options, taken out before it is handed to `tokio-postgres`:
//! `schema=NAME` (the table's schema, see [the table](#the-table)) and
//! `replication=strict` (see [replication](#replication)).
//!
//! The client is `tokio-postgres` on a runtime of its own per connection,
//! on the calling thread, rather than the synchronous `postgres` crate: it
//! gives every round trip a deadline, so a renewal can never outlast the
//! fence. Opening a generator from async code is fine: the lease then
//! connects from a short-lived thread of its own.
//!
//! # Deploying the PostgreSQL lease
//!
//! `idutil lease check URL` (or [`idutil::lease::check`](https://docs.rs/idutil/latest/idutil/lease/fn.check.html)) audits a
//! deployment, line by line: durability settings, standbys and the
//! synchronous setup, a pooler in front, the schema and search path,
//! privileges, clock skew, rows that never expire and free shards.
//!
//! ## Poolers
//!
//! The lease works through PgBouncer and the poolers built like it
//! (Supabase's, Neon's `-pooler` hosts, Heroku's, RDS Proxy) in
//! **transaction** and **session** mode. A holder has one connection, for
//! its renewals, raises and close, so it takes one server connection at a
//! time: in session mode, size the pool to the fleet (one per holder); in
//! transaction mode a pool smaller than the fleet is fine. Every write is
//! one transaction in one round trip of the simple query protocol: no
//! prepared statement (named or not), and no session setting
//! (`synchronous_commit` and `lock_timeout` are set with `SET LOCAL`
//! semantics inside each transaction). A pooler in **statement** mode runs
//! no transaction of several statements and is refused at open, by name.
//! Poolers drop startup options such as `options=-csearch_path=...`: name
//! the schema with `schema=` instead.
//!
//! ## Replication
//!
//! A mark must be on every standby that may be promoted. The lease reads
//! `synchronous_standby_names`, `synchronous_commit` and the standbys
//! streaming from the server (`pg_stat_get_wal_senders()`, the WAL senders
//! `pg_stat_replication` lists) at open, then again in a renewal's round
//! trip once every two TTLs (every sixth renewal: the setup is the
//! operators', not the renewals'), and warns (a `log::warn!`, once until
//! the setup changes) when a standby that may lack a raise can be
//! promoted:
//!
//! - standbys stream but `synchronous_standby_names` is empty (asynchronous
//!   replication);
//! - a quorum smaller than the standbys: `ANY 1 (s1, s2)`;
//! - priority with more standbys than it waits for: `FIRST 1 (s1, s2)`,
//!   `s1, s2`, or `*` with several standbys.
//!
//! The safe setups: `ANY n (s1, ..., sn)` or `FIRST n (...)` of all `n`
//! standbys, or a failover manager that promotes only a synchronous
//! standby (Patroni's synchronous mode, pg_auto_failover with its
//! candidate priorities). `replication=strict` in the URL (or
//! [`LeaseConfig::strict_replication`]) makes the warning a refusal
//! ([`LeaseError::UnsafeStore`](idutil_lease::LeaseError::UnsafeStore)): at open, and at a renewal, which then
//! fails until the setup is safe again, so the holder fences itself. A
//! setup that turns unsafe under a running holder is seen within three
//! TTLs (two TTLs since the last read, a renewal period, a round trip),
//! and under the strict rule the holder has stopped issuing by then; while
//! refused, every renewal reads the setup again, so the holder goes on as
//! soon as it is safe. A role that may not read the WAL senders (execute
//! `pg_stat_get_wal_senders()`) leases with a warning that the setup is
//! not checked, and is refused under the strict rule.
//!
//! ## Backups and restores
//!
//! A restore of the lease table (or of the database) from an earlier
//! backup takes the shards' marks back in time. The lease tells it apart
//! and jumps past what the fleet can have issued since, at the next lease
//! (see [*Restores and rewound histories*](#restores-and-rewound-histories)):
//! a dump restored comes back as a new table, a base backup on a new
//! timeline or in another cluster, and rows reloaded in place or into a
//! fresh cluster were written by the restore, not by the lease. A mark
//! lowered by hand in a row no holder holds is raised back past what the
//! fleet can have issued; one that also writes `written_by` is not told
//! apart: never write old `high_water` values into the live table by
//! hand. A logical dump (`pg_dump`) of the
//! table is consistent; copying its rows by hand while holders run is not.
//!
//! ## Roles and schemas
//!
//! Give the fleet's roles `SELECT, INSERT, UPDATE` on the table and on
//! `idutil_lease_history` beside it (and `CREATE` on their schema for the
//! first holder, or create them with a migration: see [the
//! table](#the-table) for the lease table's columns); `idutil lease check`
//! says what a role lacks. A table created by an earlier idutil lacks the
//! column `written_by`: the first holder whose role owns the table adds
//! it; a role that only writes the rows is refused until the owner runs
//! `ALTER TABLE idutil_lease ADD COLUMN written_by bigint`. Services of one fleet whose roles differ share
//! one table as long as they name the same schema: the default `public`
//! does, whatever their search paths. Fleets that must not share an ID
//! space use different [`LeaseConfig::prefix`]es (or schemas).
//!
//! A role's session defaults do not reach the lease's transactions: each
//! begins `ISOLATION LEVEL READ COMMITTED` (a role defaulting to
//! `serializable` made concurrent opens fail with serialization errors)
//! and is sent in one round trip, so an `idle_in_transaction_session_timeout`
//! never finds it idle. A `statement_timeout` shorter than a round trip's
//! deadline fails calls on a busy server, and a role with
//! `default_transaction_read_only` cannot lease at all; `idutil lease
//! check` names each of these settings (its `session` lines).

mod acquire;
mod audit;
mod conn;
mod database;
mod held;
mod history;
mod inspect;
mod notices;
mod release;
mod replication;
mod retry;
mod row;
mod sql;
mod target;
mod tls;

pub use database::DatabaseHolder;

use std::time::Duration;

// The values shared with the generator, by the paths its crate uses.
use idutil_core::{clock, layout, sync};

use clock::Clock;
use idutil_lease::interface::{Ask, Engine, Grant, Held};
use idutil_lease::LeaseConfig;
use idutil_lease::{Finding, LeaseResult, Released, ShardLease};
use layout::Layout;

const ENGINE: &str = "PostgreSQL";
/// How many times an acquisition is tried before every shard counts as
/// leased.
const MAX_TRIES: u64 = 6;
/// A fencing epoch no acquisition can raise (a row rewritten by hand): the
/// shard is granted with it unchanged, read as invalid and given back.
const EPOCH_MAX: i64 = i64::MAX;
/// `undefined_table`: the table is not there yet.
const UNDEFINED_TABLE: &str = "42P01";

/// The store's clock from `extract(epoch FROM clock_timestamp())`.
fn server_time(seconds: Option<f64>) -> Option<Duration> {
    seconds
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map(Duration::from_secs_f64)
}

/// The PostgreSQL engine ([`LeaseConfig::new`] with `postgres://`).
///
/// Public only so that `idutil` can choose it for a URL; applications
/// name a store by its URL, never by this type, and `idutil` re-exports
/// this crate as `idutil::lease::postgres`, so it is hidden from
/// the docs there and here.
#[doc(hidden)]
pub struct Postgres;

impl Engine for Postgres {
    fn connect(&self, ask: &Ask<'_>, _time: &dyn Clock) -> LeaseResult<(Box<dyn Held>, Grant)> {
        acquire::connect(ask)
    }

    fn inspect(&self, config: &LeaseConfig, layout: &Layout) -> LeaseResult<Vec<ShardLease>> {
        inspect::inspect(config, layout)
    }

    fn release(&self, config: &LeaseConfig, layout: &Layout, shard: u32) -> LeaseResult<Released> {
        release::release(config, layout, shard)
    }

    fn check(&self, config: &LeaseConfig, layout: &Layout) -> LeaseResult<Vec<Finding>> {
        audit::audit(config, layout)
    }
}
