"""The skipring stack's protocols: the supervised skip ring publish/subscribe system of
Feldmann et al., built to docs/protocols/skipring.md.

* :mod:`.supervisor`, :mod:`.subscriber` — the two node roles; :mod:`.node` picks one
  (node 0 is the supervisor);
* :mod:`.labels`, :mod:`.ring` — labels and BuildRing/shortcut state per topic (§3);
* :mod:`.patricia`, :mod:`.publications` — the Patricia trie, CheckTrie and flooding (§4.2-4.3);
* :mod:`.messages`, :mod:`.params` — the wire messages and the ``[stack.skipring]`` table;
* :mod:`.corruption`, :mod:`.legitimacy` — corrupted initial states and the legitimacy
  predicate (self-stabilization, §3.3 and §4);
* :mod:`.warm` — warm start: every topic's skip ring SR(n) built by construction.
"""
