import modal

app = modal.App("wordcount")

LINES = [
    "the quick brown fox",
    "jumps over the lazy dog",
    "and runs away",
]


@app.function(gpu="T4")
def count(line: str) -> int:
    return len(line.split())


@app.local_entrypoint()
def main() -> None:
    print(sum(count.map(LINES)))
