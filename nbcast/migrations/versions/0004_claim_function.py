"""Executor: the claim as one server-side function on PostgreSQL; leaner attempt rows.

``nbcast_claim_runs`` does on the server what ``RunQueue.claim`` does in Python on
SQLite — fair-share order, a ``SKIP LOCKED`` lock per tenant, the recount of live runs
under that lock, the budget check, the ``SKIP LOCKED`` pick of due runs (one serial
run per definition), the lease and the attempt rows — in one round trip. Each
statement of a PL/pgSQL function takes a fresh snapshot under READ COMMITTED, so the
recount after the tenant lock sees every claim committed before the lock was
granted, as the two-statement Python version does. The clock is the caller's
(``p_now``, moved on at ``p_rate`` by the real time the claim has taken), except that
a caller on the real clock gets the server's ``clock_timestamp()`` at the moment of
the lease — a time taken after the tenant lock, so an attempt's start is never
earlier than the end of the attempt whose completion made room for it.

The claim's transaction commits asynchronously (``synchronous_commit = off``, for
this transaction only): a server crash can lose the last moments' leases, never a
completion, and a lost lease is what fencing is for — the holder's next fenced
write fails and the run is leased again after the reaper returns it.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-29
"""

from __future__ import annotations

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

CLAIM_FUNCTION = r"""
CREATE OR REPLACE FUNCTION nbcast_claim_runs(
    p_owner text, p_limit integer, p_now timestamptz, p_lease interval,
    p_host text, p_engine text, p_month timestamptz, p_rate double precision,
    p_real boolean)
RETURNS TABLE (
    out_kind text, out_tenant_id integer, out_n integer, out_expires_at timestamptz,
    run_id bigint, attempt integer, definition_id integer, version integer,
    slot_key text, run_kind text, fire_at timestamptz, parameters jsonb,
    definition_name text, notebook_json text, tenant_name text,
    max_concurrent_runs integer, cpus_per_run double precision,
    memory_mb_per_run integer, run_timeout_s integer, max_attempts integer,
    warehouse jsonb)
LANGUAGE plpgsql VOLATILE AS $fn$
#variable_conflict use_column
DECLARE
    t record;
    remaining integer := p_limit;
    live integer;
    room integer;
    spent bigint;
    affected integer;
    chosen bigint[];
    leased_at timestamptz;
BEGIN
    IF p_limit <= 0 THEN
        RETURN;
    END IF;
    -- A lease may be lost in a server crash: fencing makes that harmless (the
    -- holder's next write fails and the run is leased again), so the claim's commit
    -- does not wait for the WAL flush. Completions stay synchronous.
    PERFORM set_config('synchronous_commit', 'off', true);
    FOR t IN
        SELECT te.id, te.max_concurrent_runs AS quota, te.warehouse_budget_bytes AS budget,
               a.live, w.waiting
        FROM tenants te
        CROSS JOIN LATERAL (
            SELECT count(*)::integer AS live FROM runs r
            WHERE r.tenant_id = te.id AND r.state IN ('LEASED', 'RUNNING')) a
        CROSS JOIN LATERAL (
            SELECT count(*)::integer AS waiting FROM (
                SELECT 1 FROM runs r
                WHERE r.tenant_id = te.id AND r.state = 'QUEUED' AND r.not_before <= p_now
                LIMIT p_limit) q) w
        WHERE w.waiting > 0 AND a.live < te.max_concurrent_runs
        ORDER BY a.live / greatest(te.share, 1e-9), w.waiting, random()
    LOOP
        EXIT WHEN remaining <= 0;
        -- NO KEY UPDATE: serializes claims for the tenant without blocking the
        -- foreign-key checks of rows being inserted for it (runs, attempts).
        PERFORM 1 FROM tenants WHERE id = t.id FOR NO KEY UPDATE SKIP LOCKED;
        IF NOT FOUND THEN  -- another worker is claiming for this tenant right now
            out_kind := 'skipped'; out_tenant_id := t.id; out_n := 0;
            RETURN NEXT;
            CONTINUE;
        END IF;
        SELECT count(*) INTO live FROM runs r
        WHERE r.tenant_id = t.id AND r.state IN ('LEASED', 'RUNNING');
        room := least(t.quota - live, remaining, t.waiting);
        CONTINUE WHEN room <= 0;
        IF t.budget IS NOT NULL THEN
            SELECT coalesce(sum(u.bytes), 0) INTO spent FROM warehouse_usage u
            WHERE u.tenant_id = t.id AND u.recorded_at >= p_month;
            IF spent >= t.budget THEN
                UPDATE runs r SET state = 'FAILED', reason = 'budget_exceeded',
                    finished_at = p_now,
                    error = jsonb_build_object(
                        'reason', 'budget_exceeded',
                        'message', 'the tenant''s warehouse budget for this month is spent')
                WHERE r.tenant_id = t.id AND r.state = 'QUEUED' AND r.not_before <= p_now;
                GET DIAGNOSTICS affected = ROW_COUNT;
                out_kind := 'budget_failed'; out_tenant_id := t.id; out_n := affected;
                RETURN NEXT;
                CONTINUE;
            END IF;
        END IF;
        WITH candidates AS (
            SELECT r.id, r.definition_id, r.serial, r.not_before FROM runs r
            WHERE r.tenant_id = t.id AND r.state = 'QUEUED' AND r.not_before <= p_now
              AND NOT EXISTS (SELECT 1 FROM run_cancel_requests c WHERE c.run_id = r.id)
              AND (NOT r.serial OR NOT EXISTS (
                  SELECT 1 FROM runs b WHERE b.definition_id = r.definition_id
                  AND b.state IN ('LEASED', 'RUNNING')))
            ORDER BY r.not_before, r.id
            LIMIT room * 4
            FOR UPDATE SKIP LOCKED
        ), firsts AS (
            SELECT id, not_before,
                   CASE WHEN serial THEN row_number() OVER (
                       PARTITION BY definition_id, serial ORDER BY not_before, id)
                   ELSE 1 END AS k
            FROM candidates
        )
        SELECT array_agg(id ORDER BY not_before, id) INTO chosen
        FROM (SELECT id, not_before FROM firsts WHERE k = 1
              ORDER BY not_before, id LIMIT room) s;
        CONTINUE WHEN chosen IS NULL;
        remaining := remaining - cardinality(chosen);
        -- The lease starts now, under the tenant lock, not when the claim began. A
        -- real-time caller (p_real) takes the time as it is now; a simulated clock's
        -- instant moves on by the real time since the call, at the clock's rate.
        leased_at := CASE WHEN p_real THEN clock_timestamp()
                          ELSE p_now + (clock_timestamp() - statement_timestamp()) * p_rate
                     END;
        RETURN QUERY
        WITH leased AS (
            UPDATE runs r SET state = 'LEASED', attempt = r.attempt + 1,
                lease_owner = p_owner, lease_expires_at = leased_at + p_lease, reason = NULL
            WHERE r.id = ANY (chosen)
            RETURNING r.*
        ), attempts AS (
            INSERT INTO run_attempts (tenant_id, run_id, attempt, worker, host, engine,
                                      started_at)
            SELECT l.tenant_id, l.id, l.attempt, p_owner, p_host, p_engine, leased_at
            FROM leased l
        )
        SELECT 'leased'::text, l.tenant_id, 0, l.lease_expires_at, l.id, l.attempt,
               l.definition_id, l.version,
               l.slot_key::text, l.kind::text, l.fire_at, l.parameters, d.name::text,
               v.notebook_json::text, te.name::text, te.max_concurrent_runs,
               te.cpus_per_run, te.memory_mb_per_run, te.run_timeout_s, te.max_attempts,
               te.warehouse
        FROM leased l
        JOIN report_definitions d ON d.id = l.definition_id
        JOIN definition_versions v ON v.id = l.version_id
        JOIN tenants te ON te.id = l.tenant_id
        ORDER BY l.not_before, l.id;
    END LOOP;
END
$fn$
"""


def upgrade() -> None:
    # The unique (run_id, attempt) index already serves lookups by run: one index
    # fewer to maintain per attempt row.
    op.drop_index("ix_run_attempts_run_id", "run_attempts")
    if op.get_bind().dialect.name == "postgresql":
        op.execute(CLAIM_FUNCTION)
        # An attempt row is written twice (opened at the claim, closed at the end);
        # free space on its page lets the second write be a HOT update.
        op.execute("ALTER TABLE run_attempts SET (fillfactor = 70)")
        # runs is a queue: every claim and completion leaves dead index entries that
        # the quota count and the queue scan step over until VACUUM removes them, so
        # autovacuum should visit it after a small fraction of churn, at full speed.
        for table in ("runs", "run_attempts"):
            op.execute(
                f"ALTER TABLE {table} SET (autovacuum_vacuum_scale_factor = 0.01, "
                "autovacuum_vacuum_threshold = 1000, autovacuum_vacuum_cost_delay = 0, "
                "autovacuum_analyze_scale_factor = 0.02)"
            )


def downgrade() -> None:
    op.create_index("ix_run_attempts_run_id", "run_attempts", ["run_id"])
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE run_attempts RESET (fillfactor)")
        for table in ("runs", "run_attempts"):
            op.execute(
                f"ALTER TABLE {table} RESET (autovacuum_vacuum_scale_factor, "
                "autovacuum_vacuum_threshold, autovacuum_vacuum_cost_delay, "
                "autovacuum_analyze_scale_factor)"
            )
        op.execute(
            "DROP FUNCTION IF EXISTS nbcast_claim_runs"
            "(text, integer, timestamptz, interval, text, text, timestamptz, double precision, "
            "boolean)"
        )
