"""Content filters shared by the content-based stacks (chord, brokertree).

See :mod:`pubmesh.proto.content.filters` for how filters are validated, matched, normalized,
covered, merged and reduced (docs/protocols/chord.md §4, Terpstra et al. §2.1).

Package map:

* ``filters`` — content filters: validation, matching, normal form, covering, merging and
  reduction (everything this package re-exports).
* ``sets`` — value sets of one kind (Points, Span): the algebra under the filter normal form.
* ``values`` — how the analysis (Spark) sees one JSON value: is it a number, which number, and
  what is its text; reproduced here so that matching agrees with the analysis matcher.
"""

from pubmesh.proto.content.filters import (
    MAINTENANCE_HULL,
    OPERATORS,
    PRESENT,
    TOPIC,
    Conjunction,
    Constraint,
    Disjunction,
    FilterError,
    Reducer,
    attributes_problem,
    canonical_text,
    covers,
    covers_any,
    disjunction_covers,
    filter_problem,
    inc,
    is_satisfiable,
    maintenance_topic,
    matches,
    matches_prepared,
    perfect_merge,
    prepare,
    publication_attributes,
    reduce,
    reducer,
    to_filter,
    topic_based,
    upper_bound,
    validate,
    with_topic,
)

__all__ = [
    "MAINTENANCE_HULL",
    "OPERATORS",
    "PRESENT",
    "TOPIC",
    "Conjunction",
    "Constraint",
    "Disjunction",
    "FilterError",
    "Reducer",
    "attributes_problem",
    "canonical_text",
    "covers",
    "covers_any",
    "disjunction_covers",
    "filter_problem",
    "inc",
    "is_satisfiable",
    "maintenance_topic",
    "matches",
    "matches_prepared",
    "perfect_merge",
    "prepare",
    "publication_attributes",
    "reduce",
    "reducer",
    "to_filter",
    "topic_based",
    "upper_bound",
    "validate",
    "with_topic",
]
