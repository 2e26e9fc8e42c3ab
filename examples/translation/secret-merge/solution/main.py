"""tests/reference.py ported to Modal: the join runs in a Modal function, and its
configuration (the salt of the pseudonyms and the join key) comes from a Modal Secret
attached to that function, read from the container's environment."""

import hashlib
import json
import os
import random

import modal

app = modal.App("secret-merge")
# In production this is modal.Secret.from_name("merge-config"); from_dict keeps the port
# self-contained while the code that uses it reads only the environment.
merge_config = modal.Secret.from_dict(
    {"MERGE_SALT": "crucible-merge-2026", "JOIN_KEY": "customer_id"}
)
REGIONS = ["north", "south", "east", "west"]


def make_inputs(customers, orders, seed, key="customer_id"):
    rng = random.Random(seed)
    people = [{key: 100 + i, "region": rng.choice(REGIONS)} for i in range(customers)]
    sales = [
        {
            "order_id": i,
            key: 100 + rng.randrange(customers + 2),  # some customers are unknown
            "amount": round(rng.uniform(1, 500), 2),
        }
        for i in range(orders)
    ]
    return people, sales


@app.function(secrets=[merge_config], timeout=300)
def merge(people: list[dict], sales: list[dict]) -> dict:
    key, salt = os.environ["JOIN_KEY"], os.environ["MERGE_SALT"]
    by_key = {p[key]: p for p in people}
    rows = []
    totals: dict[str, float] = {}
    for s in sales:
        person = by_key.get(s[key])
        if person is None:
            continue
        customer = hashlib.sha256(f"{salt}:{s[key]}".encode()).hexdigest()[:16]
        rows.append(
            {
                "order_id": s["order_id"],
                "customer": customer,
                "region": person["region"],
                "amount": s["amount"],
            }
        )
        totals[person["region"]] = totals.get(person["region"], 0.0) + s["amount"]
    return {"rows": rows, "totals": dict(sorted(totals.items()))}


@app.local_entrypoint()
def main(customers: int = 6, orders: int = 10, seed: int = 0):
    people, sales = make_inputs(customers, orders, seed)
    print(json.dumps(merge.remote(people, sales)))
