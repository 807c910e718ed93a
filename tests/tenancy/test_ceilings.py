"""Quota ceilings (issue 20, item 8): operators set what a tenant's admins may set its
quotas to; an admin moves only within them, and a refusal writes nothing. The case
the hostile review found — an admin raising the share to a million and removing both
daily budgets — is refused; an operator still can."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import sqlalchemy as sa

from nbcast.access import Caller
from nbcast.clock import FixedClock
from nbcast.db import Database
from nbcast.errors import AccessDeniedError, ConfigError
from nbcast.tenancy import audit
from nbcast.tenancy.models import AuditEntry, Tenant
from nbcast.tenancy.roles import seed_operators
from nbcast.tenancy.tenants import change_quota, create_tenant, set_ceilings

CLOCK = FixedClock(datetime(2026, 12, 3, 9, 0, tzinfo=UTC))
OPERATOR = Caller(tenant="default", user="boss")
ADMIN = Caller(tenant="acme", user="ada")


@pytest.fixture
def acme(db: Database) -> Database:
    with db.session() as session:
        seed_operators(session, "boss", frozenset(), "default", CLOCK.now())
    create_tenant(
        db,
        CLOCK,
        OPERATOR,
        "acme",
        admin="ada",
        max_concurrent_runs=4,
        share=2.0,
        budget_warehouse_bytes_per_day=10**9,
        budget_cpu_s_per_day=3600.0,
    )
    return db


def quotas(db: Database) -> dict[str, object]:
    with db.session() as session:
        tenant = session.scalar(sa.select(Tenant).where(Tenant.name == "acme"))
        assert tenant is not None
        return {
            "max_concurrent_runs": tenant.max_concurrent_runs,
            "share": tenant.share,
            "budget_warehouse_bytes_per_day": tenant.budget_warehouse_bytes_per_day,
            "budget_cpu_s_per_day": tenant.budget_cpu_s_per_day,
            "ceilings": tenant.quota_ceilings,
        }


def test_a_new_tenants_ceilings_are_its_quotas(acme: Database) -> None:
    ceilings = quotas(acme)["ceilings"]
    assert isinstance(ceilings, dict)
    assert ceilings["max_concurrent_runs"] == 4
    assert ceilings["share"] == 2.0
    assert ceilings["budget_warehouse_bytes_per_day"] == 10**9


@pytest.mark.parametrize(
    "change",
    [
        {"share": 1_000_000.0},
        {"budget_warehouse_bytes_per_day": None},
        {"budget_cpu_s_per_day": None},
        {"max_concurrent_runs": 5},
        {"budget_warehouse_bytes_per_day": 10**9 + 1},
    ],
    ids=[
        "share_to_a_million",
        "remove_byte_budget",
        "remove_cpu_budget",
        "more_runs",
        "more_bytes",
    ],
)
def test_an_admin_cannot_go_past_a_ceiling(acme: Database, change: dict[str, object]) -> None:
    before = quotas(acme)
    with pytest.raises(AccessDeniedError, match="only an operator can"):
        change_quota(acme, CLOCK, ADMIN, "acme", **change)
    assert quotas(acme) == before


def test_an_admin_moves_within_the_ceilings(acme: Database) -> None:
    change_quota(acme, CLOCK, ADMIN, "acme", max_concurrent_runs=1, share=0.5)
    change_quota(acme, CLOCK, ADMIN, "acme", max_concurrent_runs=4, share=2.0)
    assert quotas(acme)["max_concurrent_runs"] == 4


def test_an_operator_raises_a_ceiling_and_then_the_admin_may_follow(acme: Database) -> None:
    set_ceilings(acme, CLOCK, OPERATOR, "acme", max_concurrent_runs=8, budget_cpu_s_per_day=None)
    change_quota(acme, CLOCK, ADMIN, "acme", max_concurrent_runs=8, budget_cpu_s_per_day=None)
    after = quotas(acme)
    assert (after["max_concurrent_runs"], after["budget_cpu_s_per_day"]) == (8, None)


def test_a_lower_ceiling_brings_the_quota_down_and_is_audited(acme: Database) -> None:
    set_ceilings(acme, CLOCK, OPERATOR, "acme", max_concurrent_runs=2, share=1.0)
    after = quotas(acme)
    assert (after["max_concurrent_runs"], after["share"]) == (2, 1.0)
    with acme.session() as session:
        entry = session.scalars(
            sa.select(AuditEntry).where(AuditEntry.action == audit.Action.ceilings_changed)
        ).one()
    assert entry.actor == "boss"
    assert '"quotas_lowered":{"max_concurrent_runs":2,"share":1.0}' in entry.details


def test_a_budget_ceiling_brings_back_a_removed_budget(acme: Database) -> None:
    set_ceilings(acme, CLOCK, OPERATOR, "acme", budget_cpu_s_per_day=None)
    change_quota(acme, CLOCK, ADMIN, "acme", budget_cpu_s_per_day=None)
    set_ceilings(acme, CLOCK, OPERATOR, "acme", budget_cpu_s_per_day=60.0)
    assert quotas(acme)["budget_cpu_s_per_day"] == 60.0


def test_an_operator_is_not_held_by_ceilings(acme: Database) -> None:
    change_quota(acme, CLOCK, OPERATOR, "acme", share=1_000_000.0)
    assert quotas(acme)["share"] == 1_000_000.0


def test_only_an_operator_sets_ceilings(acme: Database) -> None:
    before = quotas(acme)
    with pytest.raises(AccessDeniedError):
        set_ceilings(acme, CLOCK, ADMIN, "acme", share=1_000_000.0)
    assert quotas(acme) == before


@pytest.mark.parametrize(
    "values",
    [{"share": -1.0}, {"max_concurrent_runs": None}, {"wings": 2}, {"memory_mb_per_run": 8}],
    ids=["negative", "no_value", "unknown", "below_minimum"],
)
def test_a_nonsense_ceiling_is_refused(acme: Database, values: dict[str, object]) -> None:
    before = quotas(acme)
    with pytest.raises(ConfigError):
        set_ceilings(acme, CLOCK, OPERATOR, "acme", **values)
    assert quotas(acme) == before


def test_the_command_line_sets_ceilings_and_refuses_an_admin_in_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.command import act_as

    monkeypatch.delenv("NBCAST_DATABASE_URL", raising=False)
    assert (
        act_as(capsys, monkeypatch, "boss", "tenants", "create", "acme", "--admin", "ada")[0] == 0
    )
    monkeypatch.setenv("NBCAST_TENANT", "acme")
    code, _, err = act_as(
        capsys, monkeypatch, "ada", "tenants", "set-quota", "acme", "--share", "1e6"
    )
    assert code == 2
    assert err.startswith("error: share 1,000,000.0 is above the tenant's ceiling of 1.0")
    assert len(err.strip().splitlines()) == 1
    code, _, err = act_as(
        capsys, monkeypatch, "ada", "tenants", "set-ceiling", "acme", "--share", "9"
    )
    assert code == 2
    assert err.startswith("error:")
    code, out, _ = act_as(
        capsys, monkeypatch, "boss", "tenants", "set-ceiling", "acme", "--share", "9",
        "--no-budget-ceiling", "bytes",
    )  # fmt: skip
    assert code == 0
    assert out.strip() == "tenant acme ceilings: share=9.0, budget_warehouse_bytes_per_day=none"
    assert (
        act_as(capsys, monkeypatch, "ada", "tenants", "set-quota", "acme", "--share", "9")[0] == 0
    )
