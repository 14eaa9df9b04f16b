-- idutil: the database as a holder of shard @SHARD@ of ID space @SPACE_SHOWN@
-- (layout @LAYOUT_SHOWN@), in schema @SCHEMA_SHOWN@.
--
--     CREATE TABLE notes (id bigint PRIMARY KEY DEFAULT @FN@_next_id(), ...);
--
-- Printed by `idutil lease sql`. Run it in one transaction (as a migration,
-- or `psql -1 -v ON_ERROR_STOP=1 -f`). Running it again changes nothing but
-- the functions, which a later version's script replaces in place. How the
-- counter works, and what it promises: the crate docs, `lease::postgres`,
-- *The database as a holder*.

@TABLES@

-- Takes the shard: refused while a live holder has it, or when the ID space
-- is recorded with another layout. The counter resumes after the row's mark.
DO $idutil$
DECLARE
    found_layout text;
    r record;
BEGIN
    PERFORM pg_catalog.pg_advisory_xact_lock(@ROWS_LOCK@, pg_catalog.hashtext(@SPACE@));
    SELECT t.layout INTO found_layout FROM @TABLE@ AS t
        WHERE t.space = @SPACE@ AND t.layout <> @LAYOUT@ LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'idutil: ID space % is recorded with layout %, not %',
            @SPACE@, found_layout, @LAYOUT@
            USING HINT = 'install with the layout the ID space was recorded with';
    END IF;
    SELECT t.space, t.shard INTO r FROM @TABLE@ AS t
        WHERE t.holder = @HOLDER@ AND (t.space <> @SPACE@ OR t.shard <> @SHARD@) LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'idutil: % already holds shard % of ID space %', @HOLDER@, r.shard, r.space
            USING HINT = 'give this one another name (idutil lease sql --name), or uninstall '
                'that one first (idutil lease sql --uninstall)';
    END IF;
    INSERT INTO @TABLE@ (space, shard, layout, written_by)
        VALUES (@SPACE@, @SHARD@, @LAYOUT@, @PENDING@)
        ON CONFLICT DO NOTHING;
    SELECT t.holder, t.expires_at, t.expires_at > pg_catalog.clock_timestamp() AS live
        INTO r FROM @TABLE@ AS t WHERE t.space = @SPACE@ AND t.shard = @SHARD@ FOR UPDATE;
    IF r.holder IS DISTINCT FROM @HOLDER@ AND r.holder IS NOT NULL AND r.live THEN
        RAISE EXCEPTION 'idutil: shard % of ID space % is leased by % until %',
            @SHARD@, @SPACE@, r.holder, r.expires_at
            USING HINT = 'choose a shard no holder uses, or stop that holder and install '
                'again once its lease has expired';
    END IF;
    UPDATE @TABLE@ AS t SET holder = @HOLDER@, expires_at = 'infinity',
            epoch = t.epoch + (t.epoch < @EPOCH_MAX@)::int, written_by = @PENDING@
        WHERE t.space = @SPACE@ AND t.shard = @SHARD@ AND t.holder IS DISTINCT FROM @HOLDER@;
    -- Each write of the lease records its writer: a row that did not is
    -- raised by the history check.
    @STAMP@;
END
$idutil$;

-- The counter: seconds since the layout's epoch and the sequence within the
-- second, as one number (second << @SEQ_BITS@ | sequence). `nextval` is what
-- every call pays; a sequence is never rolled back and survives a crash.
CREATE SEQUENCE IF NOT EXISTS @FN@_counter AS bigint MINVALUE 0 START 0 CACHE 1 NO CYCLE;
-- The lowest counter value a call may still hand out without the lock:
-- raised under the lock before the counter jumps.
CREATE SEQUENCE IF NOT EXISTS @FN@_fence AS bigint MINVALUE 0 START 0 CACHE 1 NO CYCLE;
-- The highest second (since the epoch) this server's clock has shown: the
-- lead is counted from it, so a clock set back does not count as lead.
CREATE SEQUENCE IF NOT EXISTS @FN@_seen AS bigint MINVALUE 0 START 0 CACHE 1 NO CYCLE;
-- When the server this counter last checked started
-- (`pg_postmaster_start_time()`, Unix seconds): a new one is a crash, a
-- restart or a promoted standby, after which draws that were never flushed
-- may be drawn again unless the counter jumps.
CREATE SEQUENCE IF NOT EXISTS @FN@_started AS bigint MINVALUE 0 START 0 CACHE 1 NO CYCLE;
-- The server's identity (a hash of its system identifier, timeline, start
-- time, the lease table's OID and file node, and the history it recorded) the
-- history check last raised the ID space for, and the second (Unix) it
-- raised from: a raise whose caller's transaction rolled back is made
-- again from that second, not from a later one (a sequence is not rolled
-- back; the rows and the history are).
CREATE SEQUENCE IF NOT EXISTS @FN@_raised_for AS bigint
    MINVALUE -9223372036854775808 START 0 CACHE 1 NO CYCLE;
CREATE SEQUENCE IF NOT EXISTS @FN@_raised_at AS bigint MINVALUE 0 START 0 CACHE 1 NO CYCLE;
-- Only the functions touch them (they run as the installing role).
REVOKE ALL ON SEQUENCE @FN@_counter, @FN@_fence, @FN@_seen, @FN@_started,
    @FN@_raised_for, @FN@_raised_at FROM PUBLIC;
-- A new counter has drawn nothing a crash could lose.
DO $idutil$
BEGIN
    IF pg_catalog.pg_sequence_last_value(@STARTED_LIT@::pg_catalog.regclass) IS NULL
       AND pg_catalog.pg_sequence_last_value(@COUNTER_LIT@::pg_catalog.regclass) IS NULL THEN
        PERFORM pg_catalog.setval(@STARTED_LIT@::pg_catalog.regclass,
            pg_catalog.floor(pg_catalog.date_part('epoch',
                pg_catalog.pg_postmaster_start_time()))::bigint);
    END IF;
END
$idutil$;

-- The ID of a counter value.
CREATE OR REPLACE FUNCTION @FN@_id_of(v bigint) RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
AS $idutil$
    SELECT ((v >> @SEQ_BITS@) << @SECONDS_SHIFT@) | ((v & @SEQ_MASK@) << @SHARD_BITS@) | @SHARD@
$idutil$;

-- Whether the server, the cluster or the lease table was replaced since the
-- ID space's history was recorded (a restore, a promoted standby, another
-- cluster): then every row of the space is raised, as a Rust holder's check
-- does, and the new identity recorded. Run once per session, under the lock.
CREATE OR REPLACE FUNCTION @FN@_check_space() RETURNS void
    LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
    SET search_path = pg_catalog, pg_temp
AS $idutil$
DECLARE
    v_sys text;
    v_tl bigint;
    v_result record;
    v_identity bigint;
    v_clock double precision := pg_catalog.date_part('epoch', pg_catalog.clock_timestamp());
BEGIN
    IF pg_catalog.has_function_privilege('pg_catalog.pg_control_system()', 'EXECUTE') THEN
        SELECT s.system_identifier::text INTO v_sys FROM pg_catalog.pg_control_system() AS s;
    END IF;
    v_tl := ('x' || pg_catalog.substr(pg_catalog.pg_walfile_name(pg_catalog.pg_current_wal_lsn()),
        1, 8))::bit(32)::bigint;
    PERFORM 1 FROM @HISTORY@ AS h
        WHERE h.space = @SPACE@ AND h.shard = -1
          AND (h.system_identifier IS NULL OR v_sys IS NULL OR h.system_identifier = v_sys)
          AND (h.timeline IS NULL OR h.timeline = v_tl)
          AND (h.table_oid IS NULL
               OR h.table_oid = pg_catalog.to_regclass(@TABLE_TEXT@)::oid::bigint)
          AND (h.table_node IS NULL
               OR h.table_node = pg_catalog.pg_relation_filenode(
                   pg_catalog.to_regclass(@TABLE_TEXT@))::bigint)
          AND h.max_lead >= @REACH@
          AND NOT EXISTS (@STRANGERS@);
    IF FOUND THEN
        RETURN;
    END IF;
    PERFORM pg_catalog.pg_advisory_xact_lock(@HISTORY_LOCK@, pg_catalog.hashtext(@SPACE@));
    -- The first check of a new identity raises the rows and records it in
    -- the caller's transaction: if that rolls back, the next first call
    -- finds the old history again, and raises from the second the first
    -- one did (its raise of the counter stayed), not from its own: else each
    -- rolled-back first call would push the counter a raise further ahead
    -- of the clock, and every call wait for it. Rows the lease did not
    -- write are raised from the clock as ever.
    -- The memo holds for the same server and table, the same run of the
    -- server (its start time: a backup restored, or the same data started
    -- again, keeps the rest, though the server before it may have handed
    -- out more since), and the same recorded history (its row as it
    -- stands, the version included): a history row deleted, rewritten or
    -- restored since is raised for afresh. Every part is written as text
    -- no session setting changes (the start time in microseconds, not a
    -- timestamp, whose text follows TimeZone and DateStyle).
    v_identity := ('x' || pg_catalog.left(pg_catalog.md5(pg_catalog.concat_ws(' ', v_sys, v_tl,
        (pg_catalog.date_part('epoch', pg_catalog.pg_postmaster_start_time()) * 1000000)::bigint,
        pg_catalog.to_regclass(@TABLE_TEXT@)::oid,
        pg_catalog.pg_relation_filenode(pg_catalog.to_regclass(@TABLE_TEXT@)),
        (SELECT h.xmin::text || ' ' || h::text FROM @HISTORY@ AS h
            WHERE h.space = @SPACE@ AND h.shard = -1))), 16))::bit(64)::bigint;
    IF pg_catalog.pg_sequence_last_value(@RAISED_FOR_LIT@::pg_catalog.regclass) = v_identity
       AND NOT EXISTS (@STRANGERS@) THEN
        v_clock := LEAST(v_clock,
            pg_catalog.pg_sequence_last_value(@RAISED_AT_LIT@::pg_catalog.regclass));
    END IF;
    @SPACE_CHECK@
        INTO v_result;
    IF (v_result.forgotten OR v_result.strangers > 0)
       AND pg_catalog.pg_sequence_last_value(@RAISED_FOR_LIT@::pg_catalog.regclass)
           IS DISTINCT FROM v_identity THEN
        PERFORM pg_catalog.setval(@RAISED_AT_LIT@::pg_catalog.regclass,
            pg_catalog.floor(v_clock)::bigint, true);
        PERFORM pg_catalog.setval(@RAISED_FOR_LIT@::pg_catalog.regclass, v_identity, true);
    END IF;
    @STAMP@;
END
$idutil$;

-- Moves the counter to the first value it may hand out now, under the lock:
-- past the clock's second, the row's mark and the fence; then waits, still
-- under the lock, while that value is past the lead cap. Returns the value.
-- Whatever it refuses, it refuses before anything moves.
CREATE OR REPLACE FUNCTION @FN@_advance(p_first boolean) RETURNS bigint
    LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
    SET search_path = pg_catalog, pg_temp
AS $idutil$
DECLARE
    v_clock double precision := pg_catalog.date_part('epoch', pg_catalog.clock_timestamp())
        - @EPOCH@;
    v_now bigint := pg_catalog.floor(v_clock)::bigint;
    r record;
    v_target bigint;
    v_fence bigint;
    v_seen bigint;
    v_started bigint;
    v_restart bigint := 0;
    v_lead bigint;
    v bigint;
BEGIN
    IF v_now < 0 OR v_now >= @SECONDS_END@ THEN
        RAISE EXCEPTION 'idutil: this server''s clock is outside layout % (it reads % s since its epoch)',
            @LAYOUT@, v_now
            USING HINT = 'set the server''s clock right: nothing was moved';
    END IF;
    SELECT s.last_value INTO v_seen FROM @FN@_seen AS s;
    IF p_first THEN
        -- A server started since the counter last looked (a crash, a
        -- restart, a promotion): draws that never reached the disk (a
        -- transaction that never committed) would be drawn again. Every
        -- value handed out was within the lead cap of the highest clock
        -- second seen, so the counter jumps past that.
        v_started := pg_catalog.floor(pg_catalog.date_part('epoch',
            pg_catalog.pg_postmaster_start_time()))::bigint;
        IF pg_catalog.pg_sequence_last_value(@STARTED_LIT@::pg_catalog.regclass)
           IS DISTINCT FROM v_started THEN
            v_restart := LEAST(GREATEST(v_now, v_seen + 1) + @MAX_LEAD@ + 1, @SECONDS_END@)
                << @SEQ_BITS@;
        END IF;
    END IF;
    SELECT t.holder, t.expires_at > pg_catalog.clock_timestamp() AS live, t.high_water,
            t.last_second, t.last_sequence
        INTO r FROM @TABLE@ AS t WHERE t.space = @SPACE@ AND t.shard = @SHARD@;
    IF NOT FOUND THEN
        -- The row was deleted: the shard is still this database's.
        INSERT INTO @TABLE@ AS t (space, shard, layout, holder, expires_at, written_by)
            VALUES (@SPACE@, @SHARD@, @LAYOUT@, @HOLDER@, 'infinity', @PENDING@)
            ON CONFLICT DO NOTHING;
        @STAMP@;
    ELSIF r.holder IS DISTINCT FROM @HOLDER@ THEN
        IF r.holder IS NOT NULL AND r.live THEN
            RAISE EXCEPTION 'idutil: shard % of ID space % is leased by %, not by %',
                @SHARD@, @SPACE@, r.holder, @HOLDER@
                USING HINT = 'the row was changed by hand or restored from before the install; '
                    'stop that holder, let its lease expire, and run idutil lease sql again';
        END IF;
        -- Freed (by hand, or a row restored from before the install): taken back.
        UPDATE @TABLE@ AS t SET holder = @HOLDER@, expires_at = 'infinity',
                epoch = t.epoch + (t.epoch < @EPOCH_MAX@)::int, written_by = @PENDING@
            WHERE t.space = @SPACE@ AND t.shard = @SHARD@;
        @STAMP@;
    END IF;
    SELECT f.last_value INTO v_fence FROM @FN@_fence AS f;
    SELECT c.last_value INTO v FROM @FN@_counter AS c;
    v_target := GREATEST(v_now << @SEQ_BITS@, v_restart, v_fence,
        CASE WHEN r.last_second IS NOT NULL AND r.last_sequence IS NOT NULL
                  AND r.last_second >= @EPOCH@
             THEN LEAST(((r.last_second - @EPOCH@) << @SEQ_BITS@) + r.last_sequence + 1,
                  @COUNTER_END@)
             WHEN r.high_water IS NOT NULL AND r.high_water >= @EPOCH@
             THEN (LEAST(r.high_water - @EPOCH@ + 1, @SECONDS_END@)) << @SEQ_BITS@
             ELSE 0 END);
    -- The lead the value will have, counted from the highest clock second
    -- seen (a clock set back is not lead).
    v_seen := GREATEST(v_seen, v_now);
    v_lead := (GREATEST(v_target, v + 1) >> @SEQ_BITS@) - v_seen;
    IF v_target >= @COUNTER_END@ OR v + 1 >= @COUNTER_END@ THEN
        RAISE EXCEPTION 'idutil: shard % has reached the last second of layout %', @SHARD@, @LAYOUT@;
    END IF;
    IF v_lead - @MAX_LEAD@ > @MAX_WAIT@ THEN
        RAISE EXCEPTION 'idutil: shard %''s counter would be % s ahead of this server''s clock '
                '(lead cap % s)', @SHARD@, v_lead, @MAX_LEAD@
            USING HINT = 'the clock was set far back, or the row''s mark raised by hand: IDs '
                'resume when the clock is within the lead cap of it; nothing was moved';
    END IF;
    IF v_target > v_fence THEN
        PERFORM pg_catalog.setval(@FENCE_LIT@::pg_catalog.regclass, v_target, true);
        v_fence := v_target;
    END IF;
    IF v_now > (SELECT s.last_value FROM @FN@_seen AS s) THEN
        PERFORM pg_catalog.setval(@SEEN_LIT@::pg_catalog.regclass, v_now, true);
    END IF;
    v := pg_catalog.nextval(@COUNTER_LIT@::pg_catalog.regclass);
    IF v < v_target THEN
        -- Calls that read the counter before the fence rose (one at most
        -- for each session the server can run) may still draw from it: a
        -- jump that lands past all of them is safe, a shorter gap is walked.
        IF v + @BACKENDS@ < v_target THEN
            PERFORM pg_catalog.setval(@COUNTER_LIT@::pg_catalog.regclass, v_target, false);
            v := pg_catalog.nextval(@COUNTER_LIT@::pg_catalog.regclass);
        ELSE
            WHILE v < v_target LOOP
                v := pg_catalog.nextval(@COUNTER_LIT@::pg_catalog.regclass);
            END LOOP;
        END IF;
    END IF;
    -- Calls without the lock stay in this value's second.
    IF v > v_fence THEN
        PERFORM pg_catalog.setval(@FENCE_LIT@::pg_catalog.regclass, v, true);
    END IF;
    -- The new server is known only once the counter is past what it may
    -- have lost.
    IF v_restart > 0 THEN
        PERFORM pg_catalog.setval(@STARTED_LIT@::pg_catalog.regclass, v_started, true);
    END IF;
    -- The lead cap, as a leased holder keeps it: wait here, under the
    -- lock, so that one wait serves every caller, counted from the highest
    -- second seen; the time waited then counts as seen (a clock set back
    -- stays behind it).
    v_lead := (v >> @SEQ_BITS@) - v_seen;
    IF v_lead > @MAX_LEAD@ THEN
        PERFORM pg_catalog.pg_sleep(((v >> @SEQ_BITS@) - @MAX_LEAD@)
            - GREATEST(v_clock, v_seen::double precision));
        IF (v >> @SEQ_BITS@) - @MAX_LEAD@ > (SELECT s.last_value FROM @FN@_seen AS s) THEN
            PERFORM pg_catalog.setval(@SEEN_LIT@::pg_catalog.regclass,
                (v >> @SEQ_BITS@) - @MAX_LEAD@, true);
        END IF;
    END IF;
    RETURN v;
END
$idutil$;

-- The slow path: the lock, the counter moved, the lock released whatever
-- happens (a cancelled or failed call included).
CREATE OR REPLACE FUNCTION @FN@_catch_up() RETURNS bigint
    LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $idutil$
DECLARE
    v bigint;
    v_first boolean := pg_catalog.current_setting('@GUC@', true) IS DISTINCT FROM @COUNTER_OID@;
BEGIN
    -- The session's first look at the server and the table, before the
    -- counter's lock: a raise it makes holds the history's lock and the
    -- rows until the caller's transaction ends, and a session waiting for
    -- them must not hold the counter's lock meanwhile (the first session's
    -- next catch-up would wait for it: a deadlock).
    IF v_first THEN
        PERFORM @FN@_check_space();
    END IF;
    BEGIN
        PERFORM pg_catalog.pg_advisory_lock(@LOCK@);
        v := @FN@_advance(v_first);
        PERFORM pg_catalog.pg_advisory_unlock(@LOCK@);
        IF v_first THEN
            PERFORM pg_catalog.set_config('@GUC@', @COUNTER_OID@, false);
        END IF;
    EXCEPTION WHEN OTHERS OR query_canceled THEN
        -- A lock granted as a timeout fired is held though the wait
        -- failed: released, as many times as it is held.
        WHILE EXISTS (SELECT 1 FROM pg_catalog.pg_locks AS l
                WHERE l.locktype = 'advisory' AND l.pid = pg_catalog.pg_backend_pid()
                  AND l.classid = @LOCK_CLASS@::oid AND l.objid = @LOCK_OBJ@::oid
                  AND l.objsubid = 2 AND l.granted) LOOP
            PERFORM pg_catalog.pg_advisory_unlock(@LOCK@);
        END LOOP;
        RAISE;
    END;
    RETURN @FN@_id_of(v);
END
$idutil$;
-- The advance of an earlier version, replaced by the one above.
DROP FUNCTION IF EXISTS @FN@_advance();
REVOKE ALL ON FUNCTION @FN@_check_space(), @FN@_advance(boolean), @FN@_catch_up(),
    @FN@_id_of(bigint) FROM PUBLIC;

-- An ID for a new row: `DEFAULT @FN@_next_id()`. Increasing within a
-- session, in the clock's second, never one a Rust holder of the ID space
-- issues, never one this function gave before. It runs as the role that
-- installed it (the counter is that role's alone), so every operator is
-- named with its schema: a caller's search_path cannot change what runs.
CREATE OR REPLACE FUNCTION @FN@_next_id() RETURNS bigint
    LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
AS $idutil$
DECLARE
    v_floor bigint := (pg_catalog.floor(pg_catalog.date_part('epoch',
        pg_catalog.clock_timestamp()))::bigint OPERATOR(pg_catalog.-) @EPOCH@::bigint)
        OPERATOR(pg_catalog.<<) @SEQ_BITS@;
    v_counter bigint;
    v_fence bigint;
    v_top bigint;
    v bigint;
BEGIN
    -- Without the lock, in a session that checked the server once: a
    -- counter at or past the clock's second and the fence, still in the
    -- fence's second (the row is looked at again in each new second) and
    -- within the lead cap. Read first, so that a call that will not use
    -- the counter does not draw from it.
    IF pg_catalog.current_setting('@GUC@', true) OPERATOR(pg_catalog.=) @COUNTER_OID@
       AND v_floor OPERATOR(pg_catalog.>=) 0::bigint
       AND v_floor OPERATOR(pg_catalog.<) @COUNTER_END@::bigint THEN
        v_counter := pg_catalog.pg_sequence_last_value(@COUNTER_LIT@::pg_catalog.regclass);
        v_fence := pg_catalog.pg_sequence_last_value(@FENCE_LIT@::pg_catalog.regclass);
        v_top := LEAST(v_fence OPERATOR(pg_catalog.|) @SEQ_MASK@::bigint,
            v_floor OPERATOR(pg_catalog.+) @LEAD_SPAN@::bigint);
        IF v_counter OPERATOR(pg_catalog.>=) v_floor
           AND v_counter OPERATOR(pg_catalog.>=) v_fence
           AND v_counter OPERATOR(pg_catalog.<) v_top THEN
            v := pg_catalog.nextval(@COUNTER_LIT@::pg_catalog.regclass);
            IF v OPERATOR(pg_catalog.<=) v_top AND v OPERATOR(pg_catalog.>=) v_fence THEN
                RETURN ((v OPERATOR(pg_catalog.>>) @SEQ_BITS@) OPERATOR(pg_catalog.<<) @SECONDS_SHIFT@)
                    OPERATOR(pg_catalog.|) ((v OPERATOR(pg_catalog.&) @SEQ_MASK@::bigint)
                        OPERATOR(pg_catalog.<<) @SHARD_BITS@)
                    OPERATOR(pg_catalog.|) @SHARD@::bigint;
            END IF;
        END IF;
    END IF;
    RETURN @FN@_catch_up();
END
$idutil$;

-- An ID's time (its second).
CREATE OR REPLACE FUNCTION @FN@_time(id bigint) RETURNS timestamptz
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE STRICT
AS $idutil$
BEGIN
    IF id < 0 OR id > 9007199254740991 OR id >= (1::bigint << @TOTAL_BITS@) THEN
        RAISE EXCEPTION 'idutil: % is not an ID of layout % (0 to %)', id, @LAYOUT@,
            LEAST(9007199254740991, (1::bigint << @TOTAL_BITS@) - 1);
    END IF;
    RETURN pg_catalog.to_timestamp((@EPOCH@ + (id >> @SECONDS_SHIFT@))::double precision);
END
$idutil$;

-- The smallest and the largest ID any holder can issue in the second that
-- holds `at`; NULL outside the layout's range (`Id::min_at`, `Id::max_at`).
-- `WHERE id BETWEEN @FN@_min_at(a) AND @FN@_max_at(b)`.
CREATE OR REPLACE FUNCTION @FN@_min_at(at timestamptz) RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
AS $idutil$
    SELECT CASE WHEN s >= 0 AND s < @SECONDS_END@ THEN s::bigint << @SECONDS_SHIFT@ END
    FROM (SELECT pg_catalog.floor(pg_catalog.date_part('epoch', at)) - @EPOCH@ AS s) AS x
$idutil$;
CREATE OR REPLACE FUNCTION @FN@_max_at(at timestamptz) RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
AS $idutil$
    SELECT CASE WHEN s >= 0 AND s < @SECONDS_END@
                THEN (s::bigint << @SECONDS_SHIFT@) | ((1::bigint << @SECONDS_SHIFT@) - 1) END
    FROM (SELECT pg_catalog.floor(pg_catalog.date_part('epoch', at)) - @EPOCH@ AS s) AS x
$idutil$;
