"""The original program: deduplicate graphs up to isomorphism by their Weisfeiler-Lehman hash.

It draws `--bases` random graphs (`--nodes` nodes, `--edges` edges) from `--seed`, then
`--n` graphs, each a base graph with its nodes relabelled by a random permutation. Graphs
with the same WL hash (`--iterations` rounds) form a group; the groups are printed in the
order of their first member.

    python reference.py --n 12 --bases 4 --nodes 8 --edges 12 --seed 1   # one JSON object
"""

import argparse
import json
import random

import networkx as nx


def make_graphs(n, bases, nodes, edges, seed):
    """Each graph as (edge list, node count): plain data, the way the graphs are stored."""
    rng = random.Random(seed)
    base = [nx.gnm_random_graph(nodes, edges, seed=rng.randrange(2**32)) for _ in range(bases)]
    graphs = []
    for _ in range(n):
        g = base[rng.randrange(bases)]
        perm = list(range(nodes))
        rng.shuffle(perm)
        graphs.append(([(perm[u], perm[v]) for u, v in g.edges()], nodes))
    return graphs


def wl_hash(edges, n_nodes, iterations):
    g = nx.Graph()
    g.add_nodes_from(range(n_nodes))
    g.add_edges_from(edges)
    return nx.weisfeiler_lehman_graph_hash(g, iterations=iterations)


def group(hashes):
    groups = {}
    for i, h in enumerate(hashes):
        groups.setdefault(h, []).append(i)
    return [{"hash": h, "members": members} for h, members in groups.items()]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=12)
    parser.add_argument("--bases", type=int, default=4)
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--edges", type=int, default=12)
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    graphs = make_graphs(args.n, args.bases, args.nodes, args.edges, args.seed)
    hashes = [wl_hash(edges, n_nodes, args.iterations) for edges, n_nodes in graphs]
    groups = group(hashes)
    print(json.dumps({"unique": len(groups), "groups": groups}))


if __name__ == "__main__":
    main()
