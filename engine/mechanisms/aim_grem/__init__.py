"""AIM+GReM (Fuentes, Mullins et al.): adaptive selection with residual measurements (CRP) and GReM-MLE."""
