"""The supervised skip ring publish/subscribe system of papers/000 (placeholder, see below)."""
