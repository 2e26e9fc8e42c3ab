# expect: app function local_entrypoint
# legacy:
# Code after an unconditional return, raise or infinite loop never runs.
import modal

app = modal.App("early")


@app.function()
def step(x: int) -> int:
    return x


def fan(xs: list[int]) -> list[int]:
    return [step.remote(x) for x in xs]
    return list(step.map(xs))


def never(x: int) -> int:
    raise RuntimeError("not today")
    step.spawn(x)


@app.local_entrypoint()
def main():
    try:
        print(fan([1, 2]))
        return
    except ValueError:
        raise
    finally:
        print("done")
    modal.Dict.from_name("after")


def serve() -> None:
    while True:
        step.remote(0)
    modal.Queue.from_name("unreachable")
