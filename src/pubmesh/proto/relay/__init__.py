"""The relay layer of the ``clique`` and ``d2g`` stacks (Scheideler's lecture,
docs/protocols/relay.md §2): :mod:`pubmesh.proto.relay.layer` (relays, safe introduction, holder
counts, zombies, Release / Probe / HoldCount / RelayGone / SinkFix) and its messages in
:mod:`.messages`."""
