#!/usr/bin/env python3
"""Generate the bundled example retail lake used by the nbcast example notebooks.

The lake is a folder of Parquet files:

* ``regions.parquet``   -- sales regions (EMEA, AMER, APAC, LATAM)
* ``stores.parquet``    -- stores, the region they belong to and their IANA time zone
* ``products.parquet``  -- product catalogue (sku, category, list price)
* ``orders.parquet``    -- one row per order line, 2025-10-01 .. 2027-01-31

Amounts are USD and ``order_ts`` is a naive TIMESTAMP in store-local time: the wall
clock of the store's ``timezone``.  Stores trade 07:00 .. 22:00 local time, so, over
all regions, orders arrive around the clock.

The range is fixed relative to the year the examples, the demo and the tests live in
(:data:`YEAR`, 2026): the whole year, the quarter before it (a 12-week dashboard early
in the year has its history) and the January after it (a late-December slot reports
its previous business day, an early-January weekly report looks back into December).

Everything is derived from a fixed seed, so two runs produce byte-identical files
(for the same DuckDB version).  Some hourly load batches deliberately contain
data-quality defects (missing customer ids, negative quantities, duplicated order ids
and revenue that does not equal quantity * unit price): every defect of a batch is an
order placed within one UTC hour, so ``data_quality.ipynb``, which checks the orders
placed in its own four-hour interval, has findings on some intervals and none on the
others.  Three batches are fixed (:data:`FIXED_BATCHES`, in the demo's days around
the New York fall-back of 2026-11-01); the others are drawn at random outside those
days.  The stamp file lists every batch and how many rows each defect corrupted
(an order that was corrupted and then ingested twice is flagged twice).

Usage::

    python notebooks/examples/lake/generate.py            # into notebooks/examples/lake/
    python notebooks/examples/lake/generate.py --out /tmp/lake --force

Regeneration is skipped when the files exist and the stamp file
(``.generated.json``) matches the generator version, the hash of this script,
the seed, the DuckDB version and the file sizes; ``--force`` always rewrites
them.  Files are written to temporary names and renamed into place.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pandas as pd

# Bump whenever the generated data (or its layout) changes, so stale lakes are rebuilt.
GENERATOR_VERSION = "2"
SEED = 20260101
STAMP_NAME = ".generated.json"
TABLES = ("regions", "stores", "products", "orders")

YEAR = 2026
"""The year the examples, the demo and the tests live in; the range is relative to it."""
FIRST_DAY = np.datetime64(f"{YEAR - 1}-10-01", "D")
LAST_DAY = np.datetime64(f"{YEAR + 1}-01-31", "D")
FIRST_ORDER_ID = 100_000_001
N_CUSTOMERS = 60_000

DEFECT_KINDS = ("null_customer_id", "negative_quantity", "duplicate_order_id", "revenue_mismatch")
FIXED_BATCHES = (
    # (the UTC hour of a faulty load batch, its defects). In data_quality's schedule
    # (every four hours, America/New_York) these are the intervals
    # 2026-10-31 08:00-12:00 EDT, 2026-11-01 00:00 EDT-04:00 EST (five hours: the
    # fall-back) and 2026-11-01 12:00-16:00 EST.
    ("2026-10-31T15", ("null_customer_id", "revenue_mismatch")),
    ("2026-11-01T05", ("negative_quantity",)),
    ("2026-11-01T19", ("duplicate_order_id", "negative_quantity")),
)
QUIET_FIRST, QUIET_LAST = np.datetime64(f"{YEAR}-10-26", "D"), np.datetime64(f"{YEAR}-11-08", "D")
"""No random defect batch falls on these (UTC) days: there, the fixed ones are all there is."""
N_RANDOM_BATCHES = 30
MIN_BATCH_ROWS = 12  # a batch hour must have enough orders for the largest defect

REGIONS = [
    ("EMEA", "Europe, Middle East & Africa", "London"),
    ("AMER", "North America", "New York"),
    ("APAC", "Asia Pacific", "Singapore"),
    ("LATAM", "Latin America", "São Paulo"),
]

# (city, country, region, relative size, IANA time zone)
STORES = [
    ("London", "GB", "EMEA", 1.6, "Europe/London"),
    ("Manchester", "GB", "EMEA", 0.8, "Europe/London"),
    ("Berlin", "DE", "EMEA", 1.3, "Europe/Berlin"),
    ("Munich", "DE", "EMEA", 1.0, "Europe/Berlin"),
    ("Hamburg", "DE", "EMEA", 0.7, "Europe/Berlin"),
    ("Paris", "FR", "EMEA", 1.4, "Europe/Paris"),
    ("Lyon", "FR", "EMEA", 0.6, "Europe/Paris"),
    ("Madrid", "ES", "EMEA", 0.9, "Europe/Madrid"),
    ("Milan", "IT", "EMEA", 0.9, "Europe/Rome"),
    ("Amsterdam", "NL", "EMEA", 0.8, "Europe/Amsterdam"),
    ("Stockholm", "SE", "EMEA", 0.6, "Europe/Stockholm"),
    ("Dubai", "AE", "EMEA", 0.9, "Asia/Dubai"),
    ("Johannesburg", "ZA", "EMEA", 0.5, "Africa/Johannesburg"),
    ("New York", "US", "AMER", 1.8, "America/New_York"),
    ("Brooklyn", "US", "AMER", 0.8, "America/New_York"),
    ("Boston", "US", "AMER", 0.9, "America/New_York"),
    ("Chicago", "US", "AMER", 1.2, "America/Chicago"),
    ("Austin", "US", "AMER", 0.8, "America/Chicago"),
    ("Denver", "US", "AMER", 0.7, "America/Denver"),
    ("Seattle", "US", "AMER", 0.9, "America/Los_Angeles"),
    ("San Francisco", "US", "AMER", 1.3, "America/Los_Angeles"),
    ("Los Angeles", "US", "AMER", 1.4, "America/Los_Angeles"),
    ("Toronto", "CA", "AMER", 1.0, "America/Toronto"),
    ("Vancouver", "CA", "AMER", 0.6, "America/Vancouver"),
    ("Singapore", "SG", "APAC", 1.3, "Asia/Singapore"),
    ("Tokyo", "JP", "APAC", 1.6, "Asia/Tokyo"),
    ("Osaka", "JP", "APAC", 0.8, "Asia/Tokyo"),
    ("Seoul", "KR", "APAC", 1.0, "Asia/Seoul"),
    ("Sydney", "AU", "APAC", 1.1, "Australia/Sydney"),
    ("Melbourne", "AU", "APAC", 0.8, "Australia/Melbourne"),
    ("Hong Kong", "HK", "APAC", 1.0, "Asia/Hong_Kong"),
    ("Mumbai", "IN", "APAC", 0.7, "Asia/Kolkata"),
    ("São Paulo", "BR", "LATAM", 1.2, "America/Sao_Paulo"),
    ("Rio de Janeiro", "BR", "LATAM", 0.7, "America/Sao_Paulo"),
    ("Mexico City", "MX", "LATAM", 1.1, "America/Mexico_City"),
    ("Monterrey", "MX", "LATAM", 0.5, "America/Monterrey"),
    ("Buenos Aires", "AR", "LATAM", 0.8, "America/Argentina/Buenos_Aires"),
    ("Santiago", "CL", "LATAM", 0.6, "America/Santiago"),
    ("Bogotá", "CO", "LATAM", 0.6, "America/Bogota"),
    ("Lima", "PE", "LATAM", 0.5, "America/Lima"),
]

# category: (sku prefix, median list price, product nouns)
CATEGORIES = {
    "Apparel": ("APP", 45.0, ["T-Shirt", "Hoodie", "Chinos", "Jacket", "Sweater", "Shirt"]),
    "Footwear": ("FTW", 95.0, ["Runner", "Sneaker", "Boot", "Sandal", "Loafer"]),
    "Accessories": ("ACC", 30.0, ["Cap", "Scarf", "Belt", "Wallet", "Backpack", "Sunglasses"]),
    "Home": ("HOM", 40.0, ["Mug", "Throw", "Candle", "Cushion", "Lamp", "Vase"]),
    "Electronics": ("ELE", 120.0, ["Earbuds", "Speaker", "Charger", "Power Bank", "Watch"]),
    "Beauty": ("BEA", 25.0, ["Serum", "Cleanser", "Lip Balm", "Moisturiser", "Fragrance"]),
    "Outdoor": ("OUT", 70.0, ["Tent", "Bottle", "Headlamp", "Rain Shell", "Daypack"]),
    "Toys": ("TOY", 22.0, ["Puzzle", "Building Set", "Plush", "Board Game", "Kite"]),
}
ADJECTIVES = [
    "Classic", "Essential", "Urban", "Trail", "Nordic", "Studio", "Coastal", "Everyday",
    "Summit", "Heritage",
]  # fmt: skip
PRODUCTS_PER_CATEGORY = 25


def build_regions() -> pd.DataFrame:
    return pd.DataFrame(REGIONS, columns=["region", "region_name", "hq_city"])


def build_stores() -> pd.DataFrame:
    df = pd.DataFrame(STORES, columns=["city", "country", "region", "size", "timezone"])
    df.insert(0, "store_id", np.arange(101, 101 + len(df), dtype=np.int32))
    df.insert(1, "store_name", "nbcast " + df["city"])
    # Opening dates: deterministic, spread over 2012..2025.
    years = 2012 + (df["store_id"].to_numpy() * 7) % 14
    months = 1 + (df["store_id"].to_numpy() * 5) % 12
    df["opened_on"] = pd.to_datetime(
        {"year": years, "month": months, "day": np.ones(len(df), dtype=int)}
    ).dt.date
    return df


def build_products(rng: np.random.Generator) -> pd.DataFrame:
    rows = []
    for category, (prefix, median_price, nouns) in CATEGORIES.items():
        for i in range(PRODUCTS_PER_CATEGORY):
            noun = nouns[i % len(nouns)]
            adjective = ADJECTIVES[(i // len(nouns) + 3 * i) % len(ADJECTIVES)]
            price = median_price * float(rng.lognormal(0.0, 0.35))
            price = max(4.99, round(price) - 0.01)  # charm pricing: 49.99, 119.99, ...
            rows.append(
                {
                    "sku": f"{prefix}-{1001 + i}",
                    "product_name": f"{adjective} {noun}",
                    "category": category,
                    "unit_price": round(price, 2),
                }
            )
    return pd.DataFrame(rows)


def day_of_year(days: np.ndarray) -> np.ndarray:
    """0 for 1 January of each day's own year."""
    start_of_year = days.astype("datetime64[Y]").astype("datetime64[D]")
    doy: np.ndarray = (days - start_of_year).astype(np.int64)
    return doy


def seasonal_bump(doy: np.ndarray, centre: int, width: float) -> np.ndarray:
    """A bump around day-of-year ``centre`` that wraps over New Year."""
    distance = np.abs(doy - centre)
    distance = np.minimum(distance, 365 - distance)
    bump: np.ndarray = np.exp(-((distance / width) ** 2))
    return bump


def build_orders(
    rng: np.random.Generator,
    con: duckdb.DuckDBPyConnection,
    stores: pd.DataFrame,
    products: pd.DataFrame,
) -> tuple[pd.DataFrame, list[dict[str, Any]]]:
    days = np.arange(FIRST_DAY, LAST_DAY + 1, dtype="datetime64[D]")

    # Daily volume: weekly pattern (Sat busiest), gentle trend, holiday peak in Nov/Dec.
    weekday = (days.astype(np.int64) + 3) % 7  # 0 = Monday (1970-01-01 was a Thursday)
    weekday_factor = np.array([0.85, 0.88, 0.92, 0.95, 1.10, 1.30, 1.05])[weekday]
    doy = day_of_year(days)
    years_since = (days - np.datetime64(f"{YEAR}-01-01", "D")).astype(np.int64) / 365.0
    trend = 1.0 + 0.15 * years_since
    holiday = 1.0 + 0.6 * seasonal_bump(doy, 350, 18.0)
    summer = 1.0 + 0.1 * seasonal_bump(doy, 190, 25.0)
    expected = 520.0 * weekday_factor * trend * holiday * summer
    per_day = rng.poisson(expected)
    n = int(per_day.sum())

    order_day = np.repeat(days, per_day)
    # Trading hours 07:00 .. 22:00 store-local time, with an afternoon peak.
    seconds = np.clip(rng.normal(14.5 * 3600, 3.2 * 3600, n), 7 * 3600, 22 * 3600 - 1)
    order_ts = order_day.astype("datetime64[s]") + seconds.astype(np.int64)

    store_weights = stores["size"].to_numpy() / stores["size"].sum()
    store_idx = rng.choice(len(stores), size=n, p=store_weights)

    # Zipf-like product popularity.
    popularity = 1.0 / np.arange(1, len(products) + 1) ** 0.8
    popularity = rng.permutation(popularity)
    popularity /= popularity.sum()
    product_idx = rng.choice(len(products), size=n, p=popularity)

    quantity = np.minimum(1 + rng.poisson(0.45, n), 12).astype(np.int32)
    list_price = products["unit_price"].to_numpy()[product_idx]
    # About 8 % of orders carry a 15 % promotion.
    promo = rng.random(n) < 0.08
    unit_price = np.where(promo, np.round(list_price * 0.85, 2), list_price)
    revenue = np.round(quantity * unit_price, 2)

    # 60 % of orders come from a pool of 8,000 regulars, the rest from the whole base.
    regular = rng.random(n) < 0.6
    customer = np.where(regular, rng.integers(1, 8_001, n), rng.integers(1, N_CUSTOMERS + 1, n))
    customer_id = np.char.add("C", np.char.zfill(customer.astype(str), 6)).astype(object)

    orders = pd.DataFrame(
        {
            "order_ts": order_ts,
            "store_id": stores["store_id"].to_numpy()[store_idx],
            "sku": products["sku"].to_numpy()[product_idx],
            "region": stores["region"].to_numpy()[store_idx],
            "quantity": quantity,
            "unit_price": unit_price,
            "revenue": revenue,
            "customer_id": customer_id,
        }
    )
    orders = orders.sort_values("order_ts", kind="stable").reset_index(drop=True)
    orders.insert(0, "order_id", np.arange(FIRST_ORDER_ID, FIRST_ORDER_ID + n, dtype=np.int64))

    zones = stores.set_index("store_id")["timezone"]
    placed_utc = utc_instants(con, orders["order_ts"], orders["store_id"].map(zones))
    return inject_defects(rng, orders, placed_utc)


def utc_instants(con: duckdb.DuckDBPyConnection, local: pd.Series, zones: pd.Series) -> np.ndarray:
    """The UTC instants of store-local wall times, as naive ``datetime64[s]``.

    DuckDB (ICU) converts them, as the example notebooks' SQL does, so the generator
    and the data-quality report agree on which interval an order falls in.
    """
    frame = pd.DataFrame({"ts": local.to_numpy(), "tz": zones.to_numpy(dtype=object)})
    con.register("local_times", frame)
    try:
        seconds = con.execute(
            "SELECT epoch(timezone(tz, ts))::BIGINT AS s FROM local_times"
        ).fetchnumpy()["s"]
    finally:
        con.unregister("local_times")
    return np.asarray(seconds, dtype=np.int64).astype("datetime64[s]")


def choose_batches(
    rng: np.random.Generator, placed_utc: np.ndarray
) -> list[tuple[np.datetime64, tuple[str, ...]]]:
    """The faulty load batches: the fixed ones, then random hours outside the quiet days."""
    batches: list[tuple[np.datetime64, tuple[str, ...]]] = [
        (np.datetime64(hour, "h"), kinds) for hour, kinds in FIXED_BATCHES
    ]
    hours, counts = np.unique(placed_utc.astype("datetime64[h]"), return_counts=True)
    hour_days = hours.astype("datetime64[D]")
    eligible = hours[
        (counts >= MIN_BATCH_ROWS) & ((hour_days < QUIET_FIRST) | (hour_days > QUIET_LAST))
    ]
    for hour in np.sort(rng.choice(eligible, size=N_RANDOM_BATCHES, replace=False)):
        # Each batch has one or two kinds of defect.
        chosen = rng.choice(len(DEFECT_KINDS), size=int(rng.integers(1, 3)), replace=False)
        batches.append((hour, tuple(DEFECT_KINDS[k] for k in sorted(chosen.tolist()))))
    return sorted(batches)


def inject_defects(
    rng: np.random.Generator, orders: pd.DataFrame, placed_utc: np.ndarray
) -> tuple[pd.DataFrame, list[dict[str, Any]]]:
    """Corrupt a few rows of a few hourly load batches; return the frame and the batch log."""
    batch_of_row = placed_utc.astype("datetime64[h]")
    log: list[dict[str, Any]] = []
    duplicates = []
    for hour, kinds in choose_batches(rng, placed_utc):
        rows = np.flatnonzero(batch_of_row == hour)
        affected: dict[str, int] = {}
        for kind in sorted(kinds, key=DEFECT_KINDS.index):
            if kind == "null_customer_id":
                victims = rng.choice(rows, size=int(rng.integers(2, 9)), replace=False)
                orders.loc[victims, "customer_id"] = None
            elif kind == "negative_quantity":
                # Returns keyed in as sales: quantity and revenue both negative.
                victims = rng.choice(rows, size=int(rng.integers(1, 5)), replace=False)
                orders.loc[victims, "quantity"] = -orders.loc[victims, "quantity"]
                orders.loc[victims, "revenue"] = -orders.loc[victims, "revenue"]
            elif kind == "duplicate_order_id":
                # The same order ingested twice.
                victims = rng.choice(rows, size=int(rng.integers(2, 6)), replace=False)
                duplicates.append(orders.loc[np.sort(victims)])
            else:
                # Revenue booked at list price instead of the promotional / actual price.
                victims = rng.choice(rows, size=int(rng.integers(1, 4)), replace=False)
                factor = 1.0 + rng.integers(5, 30, size=len(victims)) / 100.0
                orders.loc[victims, "revenue"] = np.round(
                    orders.loc[victims, "revenue"].to_numpy() * factor, 2
                )
            affected[kind] = len(victims)
        log.append({"batch_utc": f"{hour}:00Z", "corrupted_rows": affected})
    if duplicates:
        orders = pd.concat([orders, *duplicates], ignore_index=True)
        orders = orders.sort_values(["order_ts", "order_id"], kind="stable").reset_index(drop=True)
    return orders, log


COLUMN_TYPES = {
    "regions": {"region": "VARCHAR", "region_name": "VARCHAR", "hq_city": "VARCHAR"},
    "stores": {
        "store_id": "INTEGER",
        "store_name": "VARCHAR",
        "city": "VARCHAR",
        "country": "VARCHAR",
        "region": "VARCHAR",
        "opened_on": "DATE",
        "timezone": "VARCHAR",
    },
    "products": {
        "sku": "VARCHAR",
        "product_name": "VARCHAR",
        "category": "VARCHAR",
        "unit_price": "DOUBLE",
    },
    "orders": {
        "order_id": "BIGINT",
        "order_ts": "TIMESTAMP",
        "store_id": "INTEGER",
        "sku": "VARCHAR",
        "region": "VARCHAR",
        "quantity": "INTEGER",
        "unit_price": "DOUBLE",
        "revenue": "DOUBLE",
        "customer_id": "VARCHAR",
    },
}


def write_parquet(con: duckdb.DuckDBPyConnection, name: str, df: pd.DataFrame, out: Path) -> None:
    """Write ``df`` to ``out/<name>.parquet`` atomically with an explicit schema."""
    select = ", ".join(
        f'CAST("{col}" AS {typ}) AS "{col}"' for col, typ in COLUMN_TYPES[name].items()
    )
    con.register("frame", df)
    target = out / f"{name}.parquet"
    fd, tmp_name = tempfile.mkstemp(prefix=f".{name}.", suffix=".parquet.tmp", dir=out)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        tmp.unlink()  # let DuckDB create the file itself
        path_sql = tmp.as_posix().replace("'", "''")
        con.execute(
            f"COPY (SELECT {select} FROM frame) TO '{path_sql}' "
            "(FORMAT parquet, COMPRESSION zstd, ROW_GROUP_SIZE 122880)"
        )
        os.replace(tmp, target)
    finally:
        con.unregister("frame")
        tmp.unlink(missing_ok=True)


def source_digest() -> str:
    """Hash of this script, so editing the generator invalidates existing lakes."""
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()


def read_stamp(out: Path) -> dict[str, Any] | None:
    try:
        stamp = json.loads((out / STAMP_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return stamp if isinstance(stamp, dict) else None


def is_up_to_date(out: Path) -> bool:
    stamp = read_stamp(out)
    if not stamp or stamp.get("generator_version") != GENERATOR_VERSION:
        return False
    if stamp.get("seed") != SEED or stamp.get("duckdb_version") != duckdb.__version__:
        return False
    if stamp.get("source_sha256") != source_digest():
        return False
    sizes = stamp.get("files", {})
    for table in TABLES:
        path = out / f"{table}.parquet"
        if not path.is_file() or sizes.get(path.name) != path.stat().st_size:
            return False
    return True


def generate(out: Path) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(SEED)
    con = duckdb.connect(config={"threads": 1, "preserve_insertion_order": True})
    try:
        regions = build_regions()
        stores = build_stores()
        products = build_products(rng)
        orders, batches = build_orders(rng, con, stores, products)
        frames = {"regions": regions, "stores": stores, "products": products, "orders": orders}
        for name in TABLES:
            write_parquet(con, name, frames[name], out)
    finally:
        con.close()

    stamp = {
        "generator_version": GENERATOR_VERSION,
        "seed": SEED,
        "duckdb_version": duckdb.__version__,
        "source_sha256": source_digest(),
        "days": {"first": str(FIRST_DAY), "last": str(LAST_DAY)},
        "rows": {name: len(frames[name]) for name in TABLES},
        "files": {f"{t}.parquet": (out / f"{t}.parquet").stat().st_size for t in TABLES},
        "defect_batches": batches,
    }
    tmp = out / f"{STAMP_NAME}.tmp"
    tmp.write_text(json.dumps(stamp, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, out / STAMP_NAME)
    return stamp


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(__file__).resolve().parent,
        help="folder to write the Parquet files to (default: the folder of this script)",
    )
    parser.add_argument("--force", action="store_true", help="regenerate even if up to date")
    parser.add_argument("-q", "--quiet", action="store_true", help="only print errors")
    args = parser.parse_args(argv)
    out = args.out.resolve()

    if not args.force and is_up_to_date(out):
        if not args.quiet:
            print(f"lake is up to date: {out} (use --force to regenerate)")
        return 0

    started = time.perf_counter()
    stamp = generate(out)
    if not args.quiet:
        total = sum(stamp["files"].values())
        rows = ", ".join(f"{k}={v}" for k, v in stamp["rows"].items())
        elapsed = time.perf_counter() - started
        print(f"wrote lake to {out}: {rows}; {total / 1e6:.2f} MB in {elapsed:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
