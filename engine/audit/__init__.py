"""`privcube audit`: the privacy guarantee checked from the outside, by running each mechanism end to end on
neighbouring datasets and bounding ε from the outputs (runner: the harness; cases: what is run; bounds:
the statistics). It sits beside the driver because it drives whole jobs."""
