#!/usr/bin/env python3
"""Writes the sample input of the example pipelines (deterministic: same output every run).

Run from anywhere: `python3 examples/gen_samples.py`. It rewrites
  tumbling-count-sum/events.jsonl   purchases, int ms timestamps, 3 malformed lines
  sliding-average/events.jsonl      sensor readings, RFC 3339 timestamps
  session-summary/events.jsonl      page views in sessions separated by gaps > 30 s
  distinct-count/events.jsonl       sales of items (names, and integer SKUs)
  enrich-customers/customers.jsonl  10 customers (reference data)
  enrich-customers/orders.jsonl     orders, some of them duplicates, some of unknown customers

Every stream arrives slightly out of order (about 15% of events 0.5-4 s behind, within the
pipelines' 5 s watermark bound), and a few events arrive minutes late, after their window has
closed for good, so the late output has something in it.
"""

import json
import random
from datetime import datetime, timedelta, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
START = datetime(2026, 3, 2, 9, 0, tzinfo=timezone.utc)
START_MS = int(START.timestamp() * 1000)


def arrival_order(rng, events, late=0, late_delay=(100_000, 200_000)):
    """Orders (timestamp_ms, record) pairs by arrival: mostly in time order, about 15% a few
    seconds behind, and `late` of them (not among the first or last tenth) minutes behind."""
    n = len(events)
    late_ids = set(rng.sample(range(n // 10, n - n // 4), late))
    arrivals = []
    for i, (ts, record) in enumerate(events):
        if i in late_ids:
            delay = rng.randint(*late_delay)
        elif rng.random() < 0.15:
            delay = rng.randint(500, 4_000)
        else:
            delay = 0
        arrivals.append((ts + delay, i, record))
    arrivals.sort(key=lambda a: (a[0], a[1]))
    return [record for _, _, record in arrivals]


def write_jsonl(path, records):
    with open(HERE / path, "w", encoding="utf-8") as out:
        for record in records:
            out.write(record if isinstance(record, str) else json.dumps(record))
            out.write("\n")
    print(f"{path}: {len(records)} lines")


def tumbling_count_sum(rng):
    users = [f"u{i:02d}" for i in range(1, 13)]
    skus = ["book", "coffee", "headphones", "lamp", "mug", "notebook", "pen", "plant", "tea"]
    events, ts = [], START_MS
    for _ in range(720):
        ts += rng.randint(200, 1_800)
        amount = rng.randint(1, 200)
        if rng.random() < 0.03:
            amount = round(amount - 0.01, 2)  # a price in cents, e.g. 19.99
        user = rng.choice(users)
        events.append((ts, {"user": user, "ts": ts, "amount": amount, "sku": rng.choice(skus)}))
    lines = arrival_order(rng, events, late=4)
    # Malformed lines, for the dead-letter output: not JSON, no key, a timestamp that is no time.
    third = len(lines) // 4
    lines.insert(third, '{"user": "u03", "ts": %d, "amount": 12' % (START_MS + 150_000))
    lines.insert(2 * third, {"ts": START_MS + 330_000, "amount": 5, "sku": "pen"})
    lines.insert(3 * third, {"user": "u05", "ts": "yesterday", "amount": 7, "sku": "mug"})
    write_jsonl("tumbling-count-sum/events.jsonl", lines)


def rfc3339(ms, offset_hours=0):
    zone = timezone(timedelta(hours=offset_hours))
    text = datetime.fromtimestamp(ms / 1000, tz=zone).isoformat(timespec="milliseconds")
    return text.replace("+00:00", "Z")


def sliding_average(rng):
    sensors = {f"sensor-{i:02d}": 18.0 + i * 0.7 for i in range(1, 9)}
    events = []
    for sensor, base in sensors.items():
        ts, temperature = START_MS + rng.randint(0, 5_000), base
        # sensor-07 reports its local time (UTC+1); the rest report UTC.
        offset = 1 if sensor == "sensor-07" else 0
        while ts < START_MS + 8 * 60_000:
            temperature += rng.uniform(-0.3, 0.3)
            value = round(temperature, 1)
            if rng.random() < 0.1:
                value = round(temperature)  # some firmware sends whole degrees as integers
            events.append((ts, {"sensor": sensor, "ts": rfc3339(ts, offset), "value": value}))
            ts += rng.randint(4_000, 6_000)
    events.sort(key=lambda e: e[0])
    write_jsonl("sliding-average/events.jsonl", arrival_order(rng, events, late=4))


def session_summary(rng):
    pages = ["/", "/search", "/products/lamp", "/products/mug", "/products/tea", "/cart",
             "/checkout", "/account", "/help"]
    events = []
    for v in range(1, 21):
        visitor = f"v-{v:04d}"
        ts = START_MS + rng.randint(0, 600_000)
        for _ in range(rng.randint(2, 5)):
            for _ in range(rng.randint(3, 15)):
                events.append((ts, {"visitor": visitor, "ts": ts, "page": rng.choice(pages)}))
                ts += rng.randint(1_000, 20_000)  # within a session: gaps below 30 s
            ts += rng.randint(60_000, 600_000)  # between sessions: gaps of 1-10 min
    events.sort(key=lambda e: e[0])
    lines = arrival_order(rng, events, late=4, late_delay=(180_000, 400_000))
    write_jsonl("session-summary/events.jsonl", lines)


def distinct_count(rng):
    stores = ["berlin", "lisbon", "madrid", "oslo", "paris", "vienna"]
    names = ["espresso", "latte", "cappuccino", "croissant", "bagel", "muffin", "scone",
             "orange juice", "water", "tea", "brownie", "sandwich"]
    skus = [40112, 40113, 40250, 40377, 41001, 41002]  # packaged goods, sold by SKU
    events, ts = [], START_MS
    for _ in range(900):
        ts += rng.randint(300, 2_300)
        item = rng.choice(skus) if rng.random() < 0.25 else rng.choice(names)
        store = rng.choice(stores)
        qty = rng.randint(1, 3)
        events.append((ts, {"store": store, "ts": ts, "item": item, "qty": qty}))
    write_jsonl("distinct-count/events.jsonl", arrival_order(rng, events, late=4, late_delay=(400_000, 600_000)))


def enrich_customers(rng):
    customers = [
        ("C001", "Ada Lovelace", "gold"), ("C002", "Alan Turing", "silver"),
        ("C003", "Grace Hopper", "gold"), ("C004", "Edsger Dijkstra", "bronze"),
        ("C005", "Barbara Liskov", "silver"), ("C006", "Donald Knuth", "bronze"),
        ("C007", "Frances Allen", "gold"), ("C008", "John McCarthy", "silver"),
        ("C009", "Margaret Hamilton", "gold"), ("C010", "Ken Thompson", "bronze"),
    ]
    write_jsonl("enrich-customers/customers.jsonl", [
        {"customer_id": cid, "name": name, "tier": tier} for cid, name, tier in customers
    ])
    # C011 and C012 are not in the reference data: their orders come out as "unknown"/"none".
    ids = [cid for cid, _, _ in customers] + ["C011", "C012"]
    events, ts = [], START_MS
    for n in range(300):
        ts += rng.randint(500, 4_000)
        order = {"order_id": f"O-{10001 + n}", "customer_id": rng.choice(ids), "ts": ts,
                 "amount": round(rng.uniform(5, 250), 2), "items": rng.randint(1, 6)}
        events.append((ts, order))
        if rng.random() < 0.05:  # the shop resends an order: same event, seconds later
            events.append((ts + rng.randint(1_000, 3_000), dict(order)))
    events.sort(key=lambda e: e[0])
    write_jsonl("enrich-customers/orders.jsonl", arrival_order(rng, events, late=2))


def main():
    tumbling_count_sum(random.Random(1))
    sliding_average(random.Random(2))
    session_summary(random.Random(3))
    distinct_count(random.Random(4))
    enrich_customers(random.Random(5))


if __name__ == "__main__":
    main()
