"""Relational synthesis: two linked tables (or one self-linked table, or a schema graph of several tables
linked by foreign keys and link tables) synthesized with their links (Alimohammadi et al., Alg. 4).

A job kind of the one driver (``mechanism: {name: relational}`` in a config selects it; see
:mod:`privcube.jobs`). Where things are:

- the job: :mod:`.spec` (tables, links, budgets of a config), :mod:`.config` (the two-table forms and the
  validated ``RelationalJob``), :mod:`.schema_graph` (a list of foreign keys), :mod:`.inputs` (the tables
  and links opened lazily), :mod:`.job` (``RelationalJobKind``: what the driver runs, the run folder),
  :mod:`.graph_run` (a schema graph run link by link), :mod:`.plan` (data-free plan), :mod:`.report_json`
  (``report.json``, link files), :mod:`.report_section` (the sections of ``report.html``),
  :mod:`.example_data` (seeded generators for tests and benchmarks);
- the algorithm: :mod:`.stages` (``run_relational``: stage 1 synthesizes the tables, stage 2 learns the links;
  the real side counted where the data lives; degrees, selection, shrinkage, siblings);
- the numerics: :mod:`.solvers` (projections, PGD, UBS rounding, random slicing, the problem on record types).
"""
