# expect: app function local_entrypoint fan_out spawn dict
# legacy:
# Conditions that are not literals are not folded: a name bound to False may be rebound.
import modal

app = modal.App("live")
FAST = False


@app.function()
def step(x: int) -> int:
    return x


@app.local_entrypoint()
def main():
    if FAST:
        print(list(step.map(range(3))))
    if True:
        call = step.spawn(1)
    else:
        pass
    while True:
        if call.get():
            break
    d = modal.Dict.from_name("seen") if 1 < 2 else None
    print(d)
