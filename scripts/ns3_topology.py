"""The ConWeave authors' ns-3 topology file, as scripts/compare-ns3 reads it.

The file holds "nodes switches links", then the switch ids, then one link
per line ("a b rate delay error"). A node's k-th link in file order is its
interface k + 1 (0 is the loopback), as their simulator installs them.
"""


def read(path):
    """(node count, set of switch ids, each node's neighbours in interface order)."""
    lines = [l.split() for l in open(path) if l.strip()]
    n_nodes, _, n_links = map(int, lines[0][:3])
    switch_ids = set(map(int, lines[1]))
    ifaces = {}
    for l in lines[2:2 + n_links]:
        a, b = int(l[0]), int(l[1])
        ifaces.setdefault(a, []).append(b)
        ifaces.setdefault(b, []).append(a)
    return n_nodes, switch_ids, ifaces
