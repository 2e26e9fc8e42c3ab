"""Containers started from threads that end: a thread of the entrypoint's (as an executor's
would be) calls the function, ends, and the container it started serves the next input.
A web endpoint does the same: each request's handler thread ends after its answer."""

import json
import os
import threading

import modal

app = modal.App("thread-callers")


@app.function()
def pid() -> int:
    return os.getpid()


@app.function()
@modal.asgi_app()
def web():
    async def asgi(scope, receive, send):
        if scope["type"] != "http":
            return
        body = json.dumps({"pid": os.getpid()}).encode()
        headers = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    return asgi


@app.local_entrypoint()
def main(rounds: int = 10):
    pids, failures = [], []
    for _ in range(rounds):
        t = threading.Thread(target=lambda: pids.append(pid.remote()))
        t.start()
        t.join()
        try:
            pids.append(pid.remote())
        except Exception as exc:
            failures.append(repr(exc))
    print(json.dumps({"containers": len(set(pids)), "calls": len(pids), "failures": failures}))
