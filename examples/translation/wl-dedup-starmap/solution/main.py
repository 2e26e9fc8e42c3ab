"""tests/reference.py ported to Modal: each graph is hashed (Weisfeiler-Lehman) in a Modal
function whose image installs networkx, fanned out over the graphs with .starmap; the
entrypoint draws the graphs and groups them by hash."""

import json
import random

import modal

image = modal.Image.debian_slim().pip_install("networkx")
app = modal.App("wl-dedup", image=image)


def make_graphs(n, bases, nodes, edges, seed):
    import networkx as nx

    rng = random.Random(seed)
    base = [nx.gnm_random_graph(nodes, edges, seed=rng.randrange(2**32)) for _ in range(bases)]
    graphs = []
    for _ in range(n):
        g = base[rng.randrange(bases)]
        perm = list(range(nodes))
        rng.shuffle(perm)
        graphs.append(([(perm[u], perm[v]) for u, v in g.edges()], nodes))
    return graphs


@app.function(timeout=300)
def wl_hash(edges: list, n_nodes: int, iterations: int) -> str:
    import networkx as nx

    g = nx.Graph()
    g.add_nodes_from(range(n_nodes))
    g.add_edges_from(edges)
    return nx.weisfeiler_lehman_graph_hash(g, iterations=iterations)


@app.local_entrypoint()
def main(
    n: int = 12, bases: int = 4, nodes: int = 8, edges: int = 12, iterations: int = 3, seed: int = 0
):
    graphs = make_graphs(n, bases, nodes, edges, seed)
    hashes = wl_hash.starmap([(e, k, iterations) for e, k in graphs])
    groups: dict[str, list[int]] = {}
    for i, h in enumerate(hashes):
        groups.setdefault(h, []).append(i)
    out = [{"hash": h, "members": members} for h, members in groups.items()]
    print(json.dumps({"unique": len(out), "groups": out}))
