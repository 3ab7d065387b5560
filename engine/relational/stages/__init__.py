"""The relational run (``run.run_relational``) and its stages: the inputs checked where they live
(``problem``, ``resolved_links``, ``real_side`` and its task kernels ``real_kernels``, ``degree_bound``), stage 1
(``table_synthesis``), stage 2 (``link_learning`` over random slices or ``type_iteration`` over record types,
``selection`` of the ``cross_workloads`` to measure, ``shrinkage``), the degrees (``synthetic_degrees``,
``degree_histograms``), sibling foreign keys (``siblings``), the budget (``composition``, ``parameters``) and the
run's checkpoint (``checkpoint``)."""
