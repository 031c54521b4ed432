"""Sequence vectors (Kazemzadeh & Jacobsen §2.2, §5.2–§5.4, Fig. 5; docs/protocols/brokertree.md §5,
§6.3–§6.4).

The legitimacy check is compared with Definition 2 itself on random propagations over a
chain, and Fig. 5's detector with Lemma 1: every copy of a message that travels a legitimate
propagation is accepted exactly once at every node, whatever mix of bypasses the copies take.
A failure prints the seed and the command that replays it.
"""

from __future__ import annotations

import itertools
import random

import pytest

from pubmesh.proto.brokertree.seqvect import (
    Entry,
    HighSeq,
    Seq,
    from_node,
    legitimate,
    shifted,
)

SEEDS = range(1, 21)


def _replay(test: str, seed: int) -> str:
    return (
        f"seed {seed}; replay: pytest tests/proto/brokertree/test_brokertree_seqvect.py -k '{test}'"
    )


def _def2(prop: list[int], delta: int) -> bool:
    """Kazemzadeh & Jacobsen §5.2 Definition 2: every window of 2δ + 1 has at least δ + 1 ones."""
    w = 2 * delta + 1
    return all(sum(prop[i : i + w]) >= delta + 1 for i in range(len(prop) - w + 1))


def _random_visits(rng: random.Random, length: int, delta: int) -> list[int]:
    """Positions 0 … length−1 visited by a copy: 0 and the last always, at most δ skipped
    per hop (the bypass reach, spec §4)."""
    visits = [0]
    while visits[-1] < length - 1:
        step = 1 + (rng.randrange(delta + 1) if rng.random() < 0.35 else 0)
        visits.append(min(length - 1, visits[-1] + step))
    return visits


def test_shifted_puts_the_bypassed_nodes_then_the_sender_first_and_cuts() -> None:
    """Spec §5: vect' = [(N_k,⊥) … (N₁,⊥), (N, lseq)] + vin, cut to 3δ + 1."""
    vin: tuple[Entry, ...] = ((7, (0.0, 1)), (6, None), (5, (0.0, 9)))
    out = shifted(vin, 8, (0.0, 4), bypassed=[9, 10], delta=1)
    assert out == ((10, None), (9, None), (8, (0.0, 4)), (7, (0.0, 1)))
    assert shifted((), 3, (1.0, 0), bypassed=[], delta=2) == ((3, (1.0, 0)),)


@pytest.mark.parametrize("delta", [1, 2, 3, 4])
@pytest.mark.parametrize("seed", SEEDS)
def test_the_senders_check_is_definition_2(delta: int, seed: int) -> None:
    """[P §5.3]: checking at most δ ⊥ in the newest 2δ + 1 entries of each outgoing vector
    accepts a hop exactly when the propagation up to its receiver is legitimate (Def. 2),
    given the hops before it were. From δ = 4 a path shorter than 2δ + 1 can hold two
    bypasses with more than δ ⊥ in all, which Def. 2 still calls legitimate."""
    rng = random.Random(seed * 10 + delta)
    agreed = 0
    for _ in range(200):
        visits = _random_visits(rng, rng.randrange(2, 6 * delta + 4), delta)
        vect: tuple[Entry, ...] = ()
        for a, b in itertools.pairwise(visits):
            vect = shifted(vect, a, (0.0, a), bypassed=list(range(a + 1, b)), delta=delta)
            prop = [1 if i in visits[: visits.index(b) + 1] else 0 for i in range(b + 1)]
            assert legitimate(vect, delta) == _def2(prop, delta), (
                visits,
                b,
                _replay("definition_2", seed),
            )
            agreed += 1
            if not legitimate(vect, delta):
                break
    assert agreed > 200


@pytest.mark.parametrize("delta", [1, 2, 3])
@pytest.mark.parametrize("seed", SEEDS)
def test_fig5_accepts_each_message_once_per_node_lemma_1(delta: int, seed: int) -> None:
    """[P §5.4] Lemma 1: over a chain, messages from S, each sent as 1–3 copies along
    legitimate propagations with random bypasses: every node that a copy reaches accepts the
    message exactly once (its first copy), and no fresh message is taken for a duplicate."""
    rng = random.Random(seed * 10 + delta)
    length = 6 * delta + 4
    high = [HighSeq(delta) for _ in range(length)]
    counter = [0] * length
    accepted: list[dict[int, int]] = [{} for _ in range(length)]
    duplicates_caught = 0
    for message in range(40):
        seq_of: dict[int, Seq] = {}  # each node numbers the message once, on first receipt
        counter[0] += 1
        seq_of[0] = (0.0, counter[0])
        for _copy in range(rng.randrange(1, 4)):
            while True:
                visits = _random_visits(rng, length, delta)
                if _def2([1 if i in visits else 0 for i in range(length)], delta):
                    break
            vect: tuple[Entry, ...] = ()
            for a, b in itertools.pairwise(visits):
                vect = shifted(vect, a, seq_of[a], bypassed=list(range(a + 1, b)), delta=delta)
                assert legitimate(vect, delta)
                if high[b].is_duplicate(vect):
                    duplicates_caught += 1
                    break  # a duplicate is not forwarded
                accepted[b][message] = accepted[b].get(message, 0) + 1
                counter[b] += 1
                seq_of[b] = (0.0, counter[b])
        why = (message, _replay("lemma_1", seed))
        for node in range(1, length):
            assert accepted[node].get(message, 0) <= 1, (node, *why)
        assert accepted[length - 1].get(message, 0) == 1, why
    assert duplicates_caught > 0


def test_from_is_the_subscriber_within_delta_plus_1_hops_else_delta_plus_1_closer() -> None:
    """[P §2.2], spec §5 STEP-II: from = vect[δ].node, or S when the vector is δ entries or
    fewer (S within δ + 1 hops). ⊥ entries still name their node."""
    chain = [(x, (0.0, x)) for x in (5, 4, 3, 2, 1)]  # the receiver is 6, S = 1
    assert from_node(chain[:2], subscriber=1, delta=2) == 1
    assert from_node(chain[:3], subscriber=1, delta=2) == 3
    assert from_node(chain, subscriber=1, delta=2) == 3
    assert from_node([(5, None), (4, None), (3, (0.0, 3))], subscriber=1, delta=1) == 4
