"""The numerics of relational link learning, free of privacy and data: exact projections (``projection``),
projected gradient descent on one slice (``pgd``), unbiased rounding (``ubs``), random slicing (``slicing``) and
the relaxed problem over record types (``type_problem``)."""
