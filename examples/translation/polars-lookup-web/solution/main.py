"""tests/reference_app.py ported to Modal: the same FastAPI service, served from a Modal
function as an ASGI app (`@modal.asgi_app`), its image installing fastapi and polars.
The polars table is built once per container, when the app is made."""

import modal

image = modal.Image.debian_slim().pip_install("fastapi", "polars")
app = modal.App("polars-lookup", image=image)


@app.function(timeout=300)
@modal.asgi_app()
def lookup():
    import polars as pl
    from fastapi import FastAPI, HTTPException
    from pydantic import BaseModel

    products = pl.DataFrame(
        {
            "key": ["a", "b", "c", "d", "e", "f"],
            "name": ["anvil", "bucket", "candle", "drill", "easel", "funnel"],
            "price": [129.5, 7.25, 3.1, 89.99, 45.0, 2.4],
            "stock": [3, 40, 250, 12, 0, 75],
        }
    )
    web = FastAPI()

    class Keys(BaseModel):
        keys: list[str]

    def find(key: str) -> dict | None:
        rows = products.filter(pl.col("key") == key).to_dicts()
        return rows[0] if rows else None

    @web.get("/")
    def get_one(key: str) -> dict:
        row = find(key)
        if row is None:
            raise HTTPException(status_code=404, detail=f"unknown key: {key}")
        return row

    @web.post("/")
    def get_many(body: Keys) -> dict:
        asked = pl.DataFrame({"key": body.keys}, schema={"key": pl.String})
        found = asked.with_row_index("i").join(products, on="key").sort("i").drop("i")
        missing = [k for k in body.keys if find(k) is None]
        value = float((found["price"] * found["stock"]).sum()) if found.height else 0.0
        return {"found": found.to_dicts(), "missing": missing, "stock_value": round(value, 2)}

    return web
