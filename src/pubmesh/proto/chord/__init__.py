"""The ``chord`` stack: content-based publish/subscribe over a Chord-shaped overlay
(papers/003, Terpstra et al., DEBS 2003), built to specs/chord.md."""
