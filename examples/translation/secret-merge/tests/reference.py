"""The original program: join orders to customers and pseudonymise the customers.

It draws `--customers` customers and `--orders` orders from `--seed`, joins each order to
its customer on the join key (orders of unknown customers are dropped), replaces the
customer's id by a salted SHA-256 pseudonym, and prints the joined rows with the totals
per region. The salt and the join key are configuration: here constants in the code.

    python reference.py --customers 6 --orders 10 --seed 1   # one JSON object
"""

import argparse
import hashlib
import json
import random

SALT = "crucible-merge-2026"
JOIN_KEY = "customer_id"
REGIONS = ["north", "south", "east", "west"]


def make_inputs(customers, orders, seed):
    rng = random.Random(seed)
    people = [{JOIN_KEY: 100 + i, "region": rng.choice(REGIONS)} for i in range(customers)]
    sales = [
        {
            "order_id": i,
            JOIN_KEY: 100 + rng.randrange(customers + 2),  # some customers are unknown
            "amount": round(rng.uniform(1, 500), 2),
        }
        for i in range(orders)
    ]
    return people, sales


def pseudonym(value, salt):
    return hashlib.sha256(f"{salt}:{value}".encode()).hexdigest()[:16]


def merge(people, sales, key, salt):
    by_key = {p[key]: p for p in people}
    rows = []
    totals = {}
    for s in sales:
        person = by_key.get(s[key])
        if person is None:
            continue
        rows.append(
            {
                "order_id": s["order_id"],
                "customer": pseudonym(s[key], salt),
                "region": person["region"],
                "amount": s["amount"],
            }
        )
        totals[person["region"]] = totals.get(person["region"], 0.0) + s["amount"]
    return {"rows": rows, "totals": dict(sorted(totals.items()))}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--customers", type=int, default=6)
    parser.add_argument("--orders", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    people, sales = make_inputs(args.customers, args.orders, args.seed)
    print(json.dumps(merge(people, sales, JOIN_KEY, SALT)))


if __name__ == "__main__":
    main()
