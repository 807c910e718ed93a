"""Executor: daily budgets in the claim, and leases that carry a run's recipient scope.

``nbcast_claim_runs`` is replaced: instead of failing a tenant's due runs when its
monthly warehouse budget is spent (``warehouse_budget_bytes``, dropped here), it
reads the tenant's use of the day (``tenant_usage_days``) against its daily budgets
(``budget_warehouse_bytes_per_day``, ``budget_cpu_s_per_day``) and, once one is
spent, leases nothing of the tenant and marks its due QUEUED runs with reason
``budget`` (they wait for the next UTC day). A lease also returns the run's
``audience`` and ``row_filter``, and the warehouse bytes the tenant has left today
(NULL without a warehouse budget). Serial runs are one at a time per definition *and
audience* (each recipient scope of a slot is its own stream). ``p_budgets`` false skips the budget check (the
benchmarks' switch, ``RunQueue(accounting=False)``). Everything else — fair
share, the tenant lock, the recount, serial runs, the lease time — is migration
0004's, unchanged.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

OLD_SIGNATURE = (
    "nbcast_claim_runs(text, integer, timestamptz, interval, text, text, timestamptz, "
    "double precision, boolean)"
)
NEW_SIGNATURE = (
    "nbcast_claim_runs(text, integer, timestamptz, interval, text, text, date, "
    "double precision, boolean, boolean)"
)

CLAIM_FUNCTION = r"""
CREATE OR REPLACE FUNCTION nbcast_claim_runs(
    p_owner text, p_limit integer, p_now timestamptz, p_lease interval,
    p_host text, p_engine text, p_day date, p_rate double precision,
    p_real boolean, p_budgets boolean)
RETURNS TABLE (
    out_kind text, out_tenant_id integer, out_n integer, out_expires_at timestamptz,
    run_id bigint, attempt integer, definition_id integer, version integer,
    slot_key text, run_kind text, fire_at timestamptz, parameters jsonb,
    definition_name text, notebook_json text, tenant_name text,
    max_concurrent_runs integer, cpus_per_run double precision,
    memory_mb_per_run integer, run_timeout_s integer, max_attempts integer,
    warehouse jsonb, audience text, row_filter jsonb, bytes_left bigint)
LANGUAGE plpgsql VOLATILE AS $fn$
#variable_conflict use_column
DECLARE
    t record;
    remaining integer := p_limit;
    live integer;
    room integer;
    used_cpu double precision;
    used_bytes bigint;
    left_bytes bigint;
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
        SELECT te.id, te.max_concurrent_runs AS quota,
               te.budget_warehouse_bytes_per_day AS byte_budget,
               te.budget_cpu_s_per_day AS cpu_budget, a.live, w.waiting
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
        left_bytes := NULL;
        IF p_budgets AND (t.byte_budget IS NOT NULL OR t.cpu_budget IS NOT NULL) THEN
            SELECT u.cpu_s, u.warehouse_bytes INTO used_cpu, used_bytes
            FROM tenant_usage_days u WHERE u.tenant_id = t.id AND u.day = p_day;
            used_cpu := coalesce(used_cpu, 0);
            used_bytes := coalesce(used_bytes, 0);
            IF t.byte_budget IS NOT NULL THEN
                left_bytes := greatest(t.byte_budget - used_bytes, 0);
            END IF;
            IF (left_bytes IS NOT NULL AND left_bytes <= 0)
               OR (t.cpu_budget IS NOT NULL AND used_cpu >= t.cpu_budget) THEN
                -- Spent for today: the due runs wait (reason budget) until the next day.
                UPDATE runs r SET reason = 'budget'
                WHERE r.tenant_id = t.id AND r.state = 'QUEUED' AND r.not_before <= p_now
                  AND r.reason IS DISTINCT FROM 'budget';
                GET DIAGNOSTICS affected = ROW_COUNT;
                out_kind := 'budget_held'; out_tenant_id := t.id; out_n := affected;
                RETURN NEXT;
                CONTINUE;
            END IF;
        END IF;
        WITH candidates AS (
            SELECT r.id, r.definition_id, r.audience, r.serial, r.not_before FROM runs r
            WHERE r.tenant_id = t.id AND r.state = 'QUEUED' AND r.not_before <= p_now
              AND NOT EXISTS (SELECT 1 FROM run_cancel_requests c WHERE c.run_id = r.id)
              AND (NOT r.serial OR NOT EXISTS (
                  SELECT 1 FROM runs b WHERE b.definition_id = r.definition_id
                  AND b.audience = r.audience AND b.state IN ('LEASED', 'RUNNING')))
            ORDER BY r.not_before, r.id
            LIMIT room * 4
            FOR UPDATE SKIP LOCKED
        ), firsts AS (
            SELECT id, not_before,
                   CASE WHEN serial THEN row_number() OVER (
                       PARTITION BY definition_id, audience, serial ORDER BY not_before, id)
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
               te.warehouse, l.audience::text, l.row_filter, left_bytes
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
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"DROP FUNCTION IF EXISTS {OLD_SIGNATURE}")
    with op.batch_alter_table("tenants") as batch:
        batch.drop_column("warehouse_budget_bytes")
    if op.get_bind().dialect.name == "postgresql":
        op.execute(CLAIM_FUNCTION)


def downgrade() -> None:
    with op.batch_alter_table("tenants") as batch:
        batch.add_column(sa.Column("warehouse_budget_bytes", sa.BigInteger(), nullable=True))
    if op.get_bind().dialect.name == "postgresql":
        from importlib import import_module

        op.execute(f"DROP FUNCTION IF EXISTS {NEW_SIGNATURE}")
        op.execute(import_module("nbcast.migrations.versions.0004_claim_function").CLAIM_FUNCTION)
