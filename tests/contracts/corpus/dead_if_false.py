# expect: app function local_entrypoint
# legacy:
# Every Modal feature past the plain function call sits in a branch that never runs.
import modal

app = modal.App("squares")


@app.function()
def square(x: int) -> int:
    return x * x


if False:

    @app.function(gpu="A100", retries=3)
    def square_on_gpu(x: int) -> int:
        return x * x


@app.local_entrypoint()
def main():
    if 0:
        print(sum(square.map(range(100))))
    else:
        print(square.remote(4))
    if False:
        call = square.spawn(3)
        print(call.get())
