"""The original program: a FastAPI service that looks products up in a polars table.

GET  /?key=a                      one product, or 404 {"detail": "unknown key: ..."}
POST /  {"keys": ["a", "x"]}      the products found (in the order asked), the keys
                                  missing, and the stock value of those found

uvicorn reference_app:app         # serves it
"""

import polars as pl
from fastapi import FastAPI, HTTPException
from pydantic import BaseModel

PRODUCTS = pl.DataFrame(
    {
        "key": ["a", "b", "c", "d", "e", "f"],
        "name": ["anvil", "bucket", "candle", "drill", "easel", "funnel"],
        "price": [129.5, 7.25, 3.1, 89.99, 45.0, 2.4],
        "stock": [3, 40, 250, 12, 0, 75],
    }
)

app = FastAPI()


class Keys(BaseModel):
    keys: list[str]


def find(key: str) -> dict | None:
    rows = PRODUCTS.filter(pl.col("key") == key).to_dicts()
    return rows[0] if rows else None


@app.get("/")
def lookup(key: str) -> dict:
    row = find(key)
    if row is None:
        raise HTTPException(status_code=404, detail=f"unknown key: {key}")
    return row


@app.post("/")
def lookup_many(body: Keys) -> dict:
    asked = pl.DataFrame({"key": body.keys}, schema={"key": pl.String})
    found = asked.with_row_index("i").join(PRODUCTS, on="key").sort("i").drop("i")
    missing = [k for k in body.keys if find(k) is None]
    value = float((found["price"] * found["stock"]).sum()) if found.height else 0.0
    return {"found": found.to_dicts(), "missing": missing, "stock_value": round(value, 2)}
