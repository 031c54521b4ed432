"""The ``chord`` stack: content-based publish/subscribe over a Chord-shaped overlay
(Terpstra et al., DEBS 2003), built to docs/protocols/chord.md."""
