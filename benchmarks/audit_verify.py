"""``nbcast audit verify`` over 1,000,000 audit entries on PostgreSQL.

Prints JSON. Seeds one tenant's chain of ``--entries`` entries (the hashes computed as
``audit.append`` computes them, loaded with COPY), then times, side by side:

- ``verify_s``: :func:`nbcast.tenancy.audit.verify` — every entry read in keyset
  batches, its canonical encoding and SHA-256 recomputed and chained, the head compared;
- ``reference_read_s``: the same rows read in the same batches and nothing else (the
  floor of any check that reads the whole chain), so ``ratio`` is what checking costs
  over reading.

Target: under 10 s for 1,000,000 entries.

    python -m benchmarks.audit_verify [--entries 1000000]
"""

from __future__ import annotations

import argparse
import io
import json
import time
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa

from benchmarks._common import scratch_database
from nbcast.db import Database
from nbcast.tenancy import audit
from nbcast.tenancy.models import AuditHead, Tenant


def seed(db: Database, entries: int) -> int:
    """One tenant's chain of ``entries`` entries, loaded with COPY; its id."""
    with db.session() as session:
        tenant_id = session.scalar(sa.select(Tenant.id).where(Tenant.name == "default"))
    assert tenant_id is not None
    start = datetime(2026, 1, 1, tzinfo=UTC)
    prev = audit.GENESIS
    buffer = io.StringIO()
    for seq in range(1, entries + 1):
        at = start + timedelta(seconds=seq)
        details = audit.details_text({"run": seq, "channel": "email"})
        obj = f"delivery:{seq}"
        digest = audit.chain_hash(
            prev,
            audit.canonical(tenant_id, seq, at, "delivery-worker", "delivery.sent", obj, details),
        )
        row = (tenant_id, seq, at.isoformat(), "delivery-worker", "delivery.sent", obj)
        buffer.write("\t".join(map(str, row)) + "\t" + details.replace("\\", "\\\\"))
        buffer.write(f"\t{prev}\t{digest}\n")
        prev = digest
    raw = db.engine.raw_connection()
    try:
        cursor = raw.cursor()
        with cursor.copy(
            "COPY audit_log (tenant_id, seq, at, actor, action, object, details, prev_hash, "
            "hash) FROM STDIN"
        ) as copy:
            copy.write(buffer.getvalue())
        raw.commit()
    finally:
        raw.close()
    with db.session() as session:
        session.add(AuditHead(tenant_id=tenant_id, seq=entries, hash=prev, updated_at=start))
    with db.engine.connect() as conn:
        conn.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql(
            "VACUUM ANALYZE audit_log"
        )
    return tenant_id


def read_only(db: Database, tenant_id: int) -> int:
    """The reference: read the chain exactly as verify does, check nothing."""
    with db.session() as session:
        return sum(1 for _ in audit.chain_rows(session, tenant_id))


def main() -> None:
    """Seed, time both, print JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=1_000_000)
    args = parser.parse_args()
    with scratch_database() as url:
        db = Database.open(url)
        began = time.perf_counter()
        tenant_id = seed(db, args.entries)
        seeded = time.perf_counter() - began
        began = time.perf_counter()
        assert read_only(db, tenant_id) == args.entries
        reference = time.perf_counter() - began
        began = time.perf_counter()
        with db.session() as session:
            checked, broken = audit.verify(session, {tenant_id: "default"})
        verified = time.perf_counter() - began
        assert broken is None, broken
        assert checked == args.entries
        db.dispose()
    print(
        json.dumps(
            {
                "entries": args.entries,
                "seed_s": round(seeded, 2),
                "verify_s": round(verified, 2),
                "reference_read_s": round(reference, 2),
                "ratio": round(verified / reference, 2),
                "verified_per_s": round(args.entries / verified),
                "target_s": 10,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
