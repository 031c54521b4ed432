"""The Patricia trie of publications with labels and hashes (Feldmann et al. §4.2, spec §8).

How it works
============
Every subscriber of a topic stores every publication of the topic in a binary Patricia trie.
A publication p issued by ``publisher`` is a leaf whose *label* is the key
h(id(publisher), p) in {0,1}^256, so all leaves have labels of the same length c = 256
(Feldmann et al. §4.2: "the constant c and the hash function h are known to all subscribers").
Chains of single-child nodes are compressed, so every inner node has exactly two children, and
its label is the longest common prefix of its children's labels (possibly the empty word).

Each node also carries a *hash* (a Merkle-like summary of its subtrie): a leaf hashes its key
and its content, g(0x00 || key || p); an inner node hashes its children's hashes in bit order,
g(0x01 || hash(child_0) || hash(child_1)). Two subtries with the same label and the same hash
hold the same publications (g collision-resistant), which is what lets CheckTrie
(:mod:`pubmesh.proto.skipring.publications`) compare whole tries by exchanging one
(label, hash) pair and descend only where they differ.

The one rule that keeps it correct: **publications are never removed** (Feldmann et al. §5,
"no publish messages are deleted from the Patricia tries"). Insertion is the only mutation and
it recomputes the hashes on the path from the new leaf to the root, so every stored hash is
always the hash of its current subtrie.

Choices (spec §10.8): h = SHA-256 over the length-prefixed publisher id and the encoded
publication; g = SHA-256 with a one-byte domain separator (0x00 leaves, 0x01 inner nodes), so a
leaf's hash also covers its content. Labels are strings over {"0", "1"}, as in the testbed
(``patriciatrie/TrieNode.java``), which keeps prefix tests exact and readable.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass

KEY_BITS = 256
"""c, the length of every leaf label (SHA-256)."""

_LEAF = b"\x00"
_INNER = b"\x01"


@dataclass(frozen=True, slots=True)
class Publication:
    """A publication as the application issued it: its id, who published it and its bytes."""

    pub_id: int
    publisher: int
    payload: bytes

    def content(self) -> bytes:
        """p, encoded: the publication id (8 bytes, signed) and the payload."""
        return self.pub_id.to_bytes(8, "big", signed=True) + self.payload

    def key_digest(self) -> bytes:
        """h(id(publisher), p) as 32 bytes: SHA-256 of the length-prefixed publisher id and p."""
        ident = str(self.publisher).encode()
        data = len(ident).to_bytes(2, "big") + ident + self.content()
        return hashlib.sha256(data).digest()


def key_of(publication: Publication) -> str:
    """The leaf label of ``publication``: h(id(publisher), p) as 256 bits."""
    return format(int.from_bytes(publication.key_digest(), "big"), f"0{KEY_BITS}b")


def leaf_hash(key: str, publication: Publication) -> bytes:
    """g(0x00 || key || p)."""
    return hashlib.sha256(
        _LEAF + int(key, 2).to_bytes(KEY_BITS // 8, "big") + publication.content()
    ).digest()


def leaf_of(publication: Publication) -> tuple[str, bytes]:
    """(key, leaf hash) of ``publication``: :func:`key_of` and :func:`leaf_hash`. A flood
    hands one publication to every subscriber, most of them more than once (§4.3: from each
    neighbour), and each computes both to insert it, so they are remembered for the latest
    1,024 publications. They are functions of the publication alone, so the memo changes no
    result; it only takes publications of exact types (``True == 1`` hashes alike but keys
    differently, as ``str(True)``), and computes the others afresh."""
    if (
        type(publication.pub_id) is int
        and type(publication.publisher) is int
        and type(publication.payload) is bytes
    ):
        return _leaf_memo(publication)
    return _leaf_memo.__wrapped__(publication)


@functools.lru_cache(maxsize=1024)
def _leaf_memo(publication: Publication) -> tuple[str, bytes]:
    key = key_of(publication)
    return key, leaf_hash(key, publication)


def inner_hash(zero: bytes, one: bytes) -> bytes:
    """g(0x01 || hash(child_0) || hash(child_1))."""
    return hashlib.sha256(_INNER + zero + one).digest()


def is_bits(text: object, limit: int = KEY_BITS) -> bool:
    """Whether ``text`` is a bit string of at most ``limit`` bits (a possible trie label)."""
    return isinstance(text, str) and len(text) <= limit and text.strip("01") == ""


def common_prefix_length(a: str, b: str) -> int:
    """Length of the longest common prefix of two strings (binary search over slices, which
    compare in C)."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo], a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid
    return lo


class TrieNode:
    """A node of the trie: a leaf (``publication`` set, no children) or an inner node with
    exactly two children ordered by the bit that follows the node's label."""

    __slots__ = ("children", "hash", "hops", "label", "publication")

    def __init__(
        self,
        label: str,
        hash_: bytes,
        publication: Publication | None = None,
        hops: int = 0,
        children: list[TrieNode] | None = None,
    ) -> None:
        self.label = label
        self.hash = hash_
        self.publication = publication
        self.hops = hops
        self.children = children

    @property
    def is_leaf(self) -> bool:
        return self.children is None

    def pair(self) -> tuple[str, bytes]:
        """(label, hash): how a node travels in CheckTrie, without its children."""
        return (self.label, self.hash)


class PatriciaTrie:
    """The binary Patricia trie T_v of one subscriber and topic (Feldmann et al. §4.2)."""

    __slots__ = ("by_label", "root")

    def __init__(self) -> None:
        self.root: TrieNode | None = None
        #: every node by its label (labels of distinct nodes differ: inner labels are shorter
        #: than KEY_BITS and distinct along any path, leaves are distinct keys)
        self.by_label: dict[str, TrieNode] = {}

    def __len__(self) -> int:
        """Number of publications."""
        if self.root is None:
            return 0
        return (len(self.by_label) + 1) // 2

    def __contains__(self, key: str) -> bool:
        node = self.by_label.get(key)
        return node is not None and node.is_leaf

    def root_pair(self) -> tuple[str, bytes] | None:
        return None if self.root is None else self.root.pair()

    def find(self, label: str) -> TrieNode | None:
        """The node labelled exactly ``label``, if any."""
        return self.by_label.get(label)

    def insert(self, publication: Publication, hops: int = 0) -> bool:
        """Insert ``publication`` unless its key is present; True if it was new."""
        key, digest = leaf_of(publication)
        if key in self.by_label:
            return False
        leaf = TrieNode(key, digest, publication, hops)
        self.by_label[key] = leaf
        if self.root is None:
            self.root = leaf
            return True
        path: list[TrieNode] = []
        node = self.root
        while True:
            cp = common_prefix_length(key, node.label)
            if cp < len(node.label):
                # key leaves node's label at bit cp: a new inner node joins them there
                below = [node, leaf] if node.label[cp] == "0" else [leaf, node]
                inner = TrieNode(key[:cp], inner_hash(below[0].hash, below[1].hash), children=below)
                self.by_label[inner.label] = inner
                if path:
                    parent_children = path[-1].children
                    assert parent_children is not None
                    parent_children[parent_children.index(node)] = inner
                else:
                    self.root = inner
                break
            # node's label is a proper prefix of key (an equal leaf was excluded above)
            children = node.children
            assert children is not None
            path.append(node)
            node = children[key[cp] == "1"]
        for ancestor in reversed(path):
            kids = ancestor.children
            assert kids is not None
            ancestor.hash = inner_hash(kids[0].hash, kids[1].hash)
        return True

    def minimal_extension(self, label: str) -> TrieNode | None:
        """The node y with minimal |label(y)| such that ``label`` is a proper prefix of
        label(y) (Feldmann et al. §4.2, case 3), or None."""
        node = self.root
        while node is not None:
            here = node.label
            if len(here) > len(label):
                return node if here.startswith(label) else None
            if len(here) == len(label) or not label.startswith(here) or node.children is None:
                return None
            node = node.children[label[len(here)] == "1"]
        return None

    def subtrie(self, prefix: str) -> TrieNode | None:
        """The highest node whose label starts with ``prefix``: its leaves are exactly the
        publications whose keys start with ``prefix``."""
        node = self.root
        while node is not None:
            here = node.label
            if here.startswith(prefix):
                return node
            if len(here) >= len(prefix) or not prefix.startswith(here) or node.children is None:
                return None
            node = node.children[prefix[len(here)] == "1"]
        return None

    def leaves(self, prefix: str = "") -> Iterator[TrieNode]:
        """Leaves whose keys start with ``prefix``, in key order."""
        top = self.subtrie(prefix)
        if top is None:
            return
        stack = [top]
        while stack:
            node = stack.pop()
            if node.children is None:
                yield node
            else:
                stack.append(node.children[1])
                stack.append(node.children[0])

    def publications(self) -> list[Publication]:
        out = []
        for leaf in self.leaves():
            assert leaf.publication is not None
            out.append(leaf.publication)
        return out
