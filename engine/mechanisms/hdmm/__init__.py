"""HDMM (McKenna et al.): implicit workloads, OPT_0/⊗/+/M strategy optimisers, SVD bound, the mechanism."""
