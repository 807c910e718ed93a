#!/usr/bin/env python3
"""Generate the bundled example retail lake used by the nbcast example notebooks.

The lake is a folder of Parquet files:

* ``regions.parquet``   -- sales regions (EMEA, AMER, APAC, LATAM)
* ``stores.parquet``    -- stores and the region they belong to
* ``products.parquet``  -- product catalogue (sku, category, list price)
* ``orders.parquet``    -- one row per order line, 2026-01-01 .. 2026-12-31

Amounts are USD and ``order_ts`` is a naive TIMESTAMP in store-local time.

Everything is derived from a fixed seed, so two runs produce byte-identical files
(for the same DuckDB version).  A few days deliberately contain data-quality
defects (missing customer ids, negative quantities, duplicated order ids and
revenue that does not equal quantity * unit price) so that
``data_quality.ipynb`` has findings on some days and none on others.

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

import duckdb
import numpy as np
import pandas as pd

# Bump whenever the generated data (or its layout) changes, so stale lakes are rebuilt.
GENERATOR_VERSION = "1"
SEED = 20260101
STAMP_NAME = ".generated.json"
TABLES = ("regions", "stores", "products", "orders")

YEAR_START = np.datetime64("2026-01-01", "D")
YEAR_END = np.datetime64("2026-12-31", "D")
FIRST_ORDER_ID = 100_000_001
N_CUSTOMERS = 60_000
N_DEFECT_DAYS = 24

REGIONS = [
    ("EMEA", "Europe, Middle East & Africa", "London"),
    ("AMER", "North America", "New York"),
    ("APAC", "Asia Pacific", "Singapore"),
    ("LATAM", "Latin America", "São Paulo"),
]

# (city, country, region, relative size)
STORES = [
    ("London", "GB", "EMEA", 1.6),
    ("Manchester", "GB", "EMEA", 0.8),
    ("Berlin", "DE", "EMEA", 1.3),
    ("Munich", "DE", "EMEA", 1.0),
    ("Hamburg", "DE", "EMEA", 0.7),
    ("Paris", "FR", "EMEA", 1.4),
    ("Lyon", "FR", "EMEA", 0.6),
    ("Madrid", "ES", "EMEA", 0.9),
    ("Milan", "IT", "EMEA", 0.9),
    ("Amsterdam", "NL", "EMEA", 0.8),
    ("Stockholm", "SE", "EMEA", 0.6),
    ("Dubai", "AE", "EMEA", 0.9),
    ("Johannesburg", "ZA", "EMEA", 0.5),
    ("New York", "US", "AMER", 1.8),
    ("Brooklyn", "US", "AMER", 0.8),
    ("Boston", "US", "AMER", 0.9),
    ("Chicago", "US", "AMER", 1.2),
    ("Austin", "US", "AMER", 0.8),
    ("Denver", "US", "AMER", 0.7),
    ("Seattle", "US", "AMER", 0.9),
    ("San Francisco", "US", "AMER", 1.3),
    ("Los Angeles", "US", "AMER", 1.4),
    ("Toronto", "CA", "AMER", 1.0),
    ("Vancouver", "CA", "AMER", 0.6),
    ("Singapore", "SG", "APAC", 1.3),
    ("Tokyo", "JP", "APAC", 1.6),
    ("Osaka", "JP", "APAC", 0.8),
    ("Seoul", "KR", "APAC", 1.0),
    ("Sydney", "AU", "APAC", 1.1),
    ("Melbourne", "AU", "APAC", 0.8),
    ("Hong Kong", "HK", "APAC", 1.0),
    ("Mumbai", "IN", "APAC", 0.7),
    ("São Paulo", "BR", "LATAM", 1.2),
    ("Rio de Janeiro", "BR", "LATAM", 0.7),
    ("Mexico City", "MX", "LATAM", 1.1),
    ("Monterrey", "MX", "LATAM", 0.5),
    ("Buenos Aires", "AR", "LATAM", 0.8),
    ("Santiago", "CL", "LATAM", 0.6),
    ("Bogotá", "CO", "LATAM", 0.6),
    ("Lima", "PE", "LATAM", 0.5),
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
    df = pd.DataFrame(STORES, columns=["city", "country", "region", "size"])
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


def build_orders(
    rng: np.random.Generator, stores: pd.DataFrame, products: pd.DataFrame
) -> tuple[pd.DataFrame, dict[str, list[str]]]:
    days = np.arange(YEAR_START, YEAR_END + 1, dtype="datetime64[D]")
    n_days = len(days)

    # Daily volume: weekly pattern (Sat busiest), gentle trend, holiday peak in Nov/Dec.
    weekday = (days.astype(np.int64) + 3) % 7  # 0 = Monday (1970-01-01 was a Thursday)
    weekday_factor = np.array([0.85, 0.88, 0.92, 0.95, 1.10, 1.30, 1.05])[weekday]
    day_of_year = np.arange(n_days)
    trend = 1.0 + 0.15 * day_of_year / n_days
    holiday = 1.0 + 0.6 * np.exp(-(((day_of_year - 350) / 18.0) ** 2))
    summer = 1.0 + 0.1 * np.exp(-(((day_of_year - 190) / 25.0) ** 2))
    expected = 520.0 * weekday_factor * trend * holiday * summer
    per_day = rng.poisson(expected)
    n = int(per_day.sum())

    order_day = np.repeat(days, per_day)
    # Trading hours 07:00 .. 22:00 with an afternoon peak.
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

    return inject_defects(rng, orders, days)


def inject_defects(
    rng: np.random.Generator, orders: pd.DataFrame, days: np.ndarray
) -> tuple[pd.DataFrame, dict[str, list[str]]]:
    """Corrupt a few rows on a few days; return the corrupted frame and the defect log."""
    defect_days = np.sort(rng.choice(days, size=N_DEFECT_DAYS, replace=False))
    kinds = ["null_customer_id", "negative_quantity", "duplicate_order_id", "revenue_mismatch"]
    log: dict[str, list[str]] = {kind: [] for kind in kinds}
    day_of_row = orders["order_ts"].to_numpy().astype("datetime64[D]")
    duplicates = []
    for day in defect_days:
        rows = np.flatnonzero(day_of_row == day)
        # Each defect day has one or two kinds of defect.
        chosen = rng.choice(len(kinds), size=int(rng.integers(1, 3)), replace=False)
        for k in sorted(chosen.tolist()):
            kind = kinds[k]
            log[kind].append(str(day))
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


def read_stamp(out: Path) -> dict | None:
    try:
        return json.loads((out / STAMP_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


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


def generate(out: Path) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(SEED)
    regions = build_regions()
    stores = build_stores()
    products = build_products(rng)
    orders, defects = build_orders(rng, stores, products)
    frames = {"regions": regions, "stores": stores, "products": products, "orders": orders}

    con = duckdb.connect(config={"threads": 1, "preserve_insertion_order": True})
    try:
        for name in TABLES:
            write_parquet(con, name, frames[name], out)
    finally:
        con.close()

    stamp = {
        "generator_version": GENERATOR_VERSION,
        "seed": SEED,
        "duckdb_version": duckdb.__version__,
        "source_sha256": source_digest(),
        "rows": {name: len(frames[name]) for name in TABLES},
        "files": {f"{t}.parquet": (out / f"{t}.parquet").stat().st_size for t in TABLES},
        "defect_days": defects,
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
