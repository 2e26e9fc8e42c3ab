# expect: app function local_entrypoint
# legacy:
# Conditions a reader folds at a glance: none of these branches ever runs.
from typing import TYPE_CHECKING

import modal

app = modal.App("folded")


@app.function()
def work(x: int) -> int:
    return x + 1


if TYPE_CHECKING:
    vol = modal.Volume.from_name("never")

    @app.function(volumes={"/data": vol})
    def unused() -> None: ...


@app.local_entrypoint()
def main():
    if 1 == 2:
        list(work.map(range(10)))
    if not True:
        work.spawn(1)
    if "":
        modal.Dict.from_name("cache")
    while False:
        list(work.starmap([(1,)]))
    if 2**3 < 5 or None:
        modal.Queue.from_name("jobs")
    total = list(work.for_each([1])) if False else work.remote(1)
    done = 0 and work.spawn_map([1])
    print(total, done)
