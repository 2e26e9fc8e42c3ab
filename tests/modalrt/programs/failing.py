import modal

app = modal.App("failing")


@app.function()
def divide(a: int, b: int) -> float:
    return a / b


@app.local_entrypoint()
def main():
    print("before")
    print(divide.remote(1, 0))


@app.function()
def local_class():
    import threading

    class Local:
        def __init__(self) -> None:
            self.lock = threading.Lock()  # no lock travels, with cloudpickle installed either

    return Local()  # does not pickle: the container says so


@app.function()
def container_only_class():
    import importlib
    import sys
    import tempfile
    from pathlib import Path

    folder = tempfile.mkdtemp()
    Path(folder, "only_here.py").write_text("class Thing:\n    pass\n")
    sys.path.insert(0, folder)
    return importlib.import_module("only_here").Thing()  # the caller cannot import it


@app.local_entrypoint()
def serialization():
    for name, fn in (("local_class", local_class), ("container_only", container_only_class)):
        try:
            fn.remote()
        except modal.exception.Error as exc:
            print(name, type(exc).__name__)
    print("still working", divide.remote(6, 3))
