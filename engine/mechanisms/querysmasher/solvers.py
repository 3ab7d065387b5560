"""Low-dimensional subworkload solvers (QuerySmasher Sec. 6.3, 7.1, App. C, D).

Each solver takes the weighted Gram G (c × c, PSD, rows in the centred residual space) of one
Kronecker part of a subworkload and returns a strategy V = BᵀB normalised to privacy cost 1
(max diag V = 1) with error L = tr(G V⁺). The optimum (Yuan et al.'s SDP)

    L*(G) = min { tr(G V⁺) : V ⪰ 0, range V ⊇ range G, V_ii ≤ 1 }

has the dual  L*(G) = max_{λ ≥ 0, Σλ = 1} (tr √(Λ^½ G Λ^½))²,  which certifies every solution: the
reported ``gap`` is (primal − dual) / primal.

* ``closed``: G ∝ ⊗ C (marginals): V = ⊗ C·d/(d−1), L = α ∏ (d−1)²/d.
* ``fourier``: weighted Fourier factorisation (WFF, App. C): V diagonal in the DFT basis,
  L = (Σ_k √g_k)² / c; optimal for circulant (circular-range) Grams.
* ``eigen``: eigen-design V = √G / max diag √G (optimal when diag √G is constant).
* ``eigen-design``: Li & Miklau's Eigen-Design (Program 1 weighting of the eigen-queries, completion
  rows, or its closed form; the better), from :mod:`privcube.mechanisms.eigen_design`.
* ``newton``: interior-point Newton on the dual (concave in λ over the simplex, log barrier), exact
  to the requested gap; the primal V = F (FᵀΛF)^{-½} Fᵀ (G = FFᵀ) is recovered without dividing by λ.
  Cost O(c² min(r², 20r)) per step (r = rank G; a quadrature form of the Hessian for large r), so
  ``auto`` uses it when that is below ``newton_limit`` (e.g. 2-D parts up to ~400 cells).
* ``lowrank``: for a thin Gram G = RᵀR (rank r ≪ c, e.g. affine / abs-diff pairs): the same dual
  Newton on an active set of cells grown by KKT violators, certified on all cells; V kept factored
  (B is r × c, V⁺ = vfac vfacᵀ), so parts of many thousand cells are solved exactly without any c × c
  matrix. ``auto`` uses it (on the Gram's factor, whatever its rank) when dense Newton would exceed
  ``newton_limit``; :func:`solve_part` uses it for every thin part above ``THIN_DENSE_LIMIT`` cells.
* ``lbfgs``: L-BFGS on the unit-diagonal parameterisation V = D^{-½} RᵀR D^{-½}.
* ``sdp``: the SDP via cvxpy/Clarabel (Schur-complement epigraph), small c only.
* ``auto``: the cheapest of the above whose certificate reaches ``tol``.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import scipy.linalg as sla
import scipy.optimize as sopt

from privcube.core.context import local_map
from privcube.core.errors import ConfigError
from privcube.linalg.psd import psd_pinv, psd_sqrt
from privcube.mechanisms.querysmasher.solution import PartSolution

METHODS = ("auto", "closed", "fourier", "eigen", "eigen-design", "newton", "lowrank", "lbfgs", "sdp")

#: per-step flop budget (c²r²) below which ``auto`` uses the Newton dual solver
NEWTON_LIMIT = 4e9


def centering(shape: tuple[int, ...]) -> np.ndarray:
    """The projector ⊗ C_d onto the centred (residual) space of a marginal of this shape."""
    out = np.ones((1, 1))
    for d in shape:
        out = np.kron(out, np.eye(d) - 1.0 / d)
    return out


def dual_value(g: np.ndarray, lam: np.ndarray) -> float:
    """Dual objective (tr √(Λ^½ G Λ^½))² at λ (normalised to Σλ = 1): a lower bound on L*(G)."""
    lam = np.clip(np.asarray(lam, dtype=float), 0, None)
    s = lam.sum()
    if s <= 0:
        return 0.0
    r = np.sqrt(lam / s)
    w = np.linalg.eigvalsh(r[:, None] * g * r[None, :])
    return float(np.sqrt(np.clip(w, 0, None)).sum() ** 2)


def _finish(g: np.ndarray, v: np.ndarray, method: str, dual: float = float("nan"), **info: Any) -> PartSolution:
    v = (v + v.T) / 2
    v = v / np.max(np.diag(v))
    vp = psd_pinv(v)
    return PartSolution(float(np.sum(g * vp)), vp, psd_sqrt(v), method, dual, dict(info))


def _kkt_dual(g: np.ndarray, vpinv: np.ndarray, maxiter: int = 200) -> float:
    """Dual bound: λ from the KKT condition V⁻¹ G V⁻¹ = Λ, then L-BFGS-B ascent of the dual."""
    lam0 = np.clip(np.einsum("ij,jk,ki->i", vpinv, g, vpinv), 0, None)
    if lam0.sum() <= 0:
        lam0 = np.ones(g.shape[0])
    lam0 = lam0 / lam0.sum()
    return refine_dual(g, lam0, maxiter=maxiter)


def refine_dual(g: np.ndarray, lam0: np.ndarray, maxiter: int = 200) -> float:
    """Maximise (tr √(K Λ K))² / Σλ (K = √G) over λ ≥ 0 from ``lam0``; returns the best bound found."""
    k = psd_sqrt(g)
    best = [dual_value(g, lam0)]

    def fun(lam: np.ndarray) -> tuple[float, np.ndarray]:
        s = lam.sum()
        if s <= 0:
            return 0.0, -np.ones_like(lam)
        a = k @ (lam[:, None] * k)
        w, v = np.linalg.eigh((a + a.T) / 2)
        pos = w > 1e-14 * max(w.max(), 1e-300)
        phi = float(np.sqrt(w[pos]).sum())
        kv = k @ v[:, pos]
        dphi = 0.5 * np.sum(kv**2 / np.sqrt(w[pos])[None, :], axis=1)
        val = phi * phi / s
        best[0] = max(best[0], val)
        return -val, -(2 * phi * dphi / s - val / s)

    try:
        sopt.minimize(fun, lam0, jac=True, method="L-BFGS-B", bounds=[(0, None)] * len(lam0),
                      options={"maxiter": maxiter, "ftol": 1e-15, "gtol": 1e-12})
    except (ValueError, np.linalg.LinAlgError):
        pass
    return float(best[0])


def solve_closed(g: np.ndarray, shape: tuple[int, ...]) -> PartSolution | None:
    """Closed form when G = α ⊗ C (marginal subworkloads); None when G has another shape."""
    c = centering(shape)
    tr_c = float(np.trace(c))
    if tr_c <= 0:
        return None
    alpha = float(np.trace(g)) / tr_c
    if alpha <= 0 or not np.allclose(g, alpha * c, rtol=1e-9, atol=1e-12 * alpha * max(g.shape[0], 1)):
        return None
    p = math.prod((d - 1) / d for d in shape)
    v = c / p
    lval = alpha * math.prod((d - 1) ** 2 / d for d in shape)
    return PartSolution(lval, c * p, psd_sqrt(v), "closed", lval, {})


def _dft(shape: tuple[int, ...]) -> np.ndarray:
    f = np.ones((1, 1), dtype=complex)
    for d in shape:
        k = np.arange(d)
        f = np.kron(f, np.exp(-2j * np.pi * np.outer(k, k) / d))
    return f


def _circulant(h: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """The multi-level circulant matrix M[i, j] = h[(i − j) mod shape] (cells in C order)."""
    k = len(shape)
    idx = []
    for ax, n in enumerate(shape):
        sh = [1] * (2 * k)
        sh[ax] = sh[k + ax] = n
        idx.append(((np.arange(n)[:, None] - np.arange(n)[None, :]) % n).reshape(sh))
    c = math.prod(shape)
    return np.asarray(h).reshape(shape)[tuple(idx)].reshape(c, c)


def fourier_spectrum(shape: tuple[int, ...], g: np.ndarray | None = None, rows: np.ndarray | None = None) -> np.ndarray:
    """g_k = (F G Fᴴ)_kk / c for every frequency k (F the multi-dimensional DFT), from G or from rows R (G = RᵀR)."""
    c = math.prod(shape)
    axes = tuple(range(1, len(shape) + 1))
    if rows is not None:
        fr = np.fft.fftn(np.asarray(rows, dtype=float).reshape((-1,) + tuple(shape)), axes=axes)
        return np.sum(np.abs(fr) ** 2, axis=0).reshape(-1) / c
    k = len(shape)
    m = np.fft.fftn(np.asarray(g, dtype=float).reshape(tuple(shape) * 2), axes=tuple(range(k)))
    m = np.fft.fftn(np.conj(m), axes=tuple(range(k, 2 * k)))  # conj of (F G Fᴴ)
    return np.real(np.conj(np.diagonal(m.reshape(c, c)))) / c


def solve_fourier(g: np.ndarray | None, shape: tuple[int, ...], rows: np.ndarray | None = None) -> PartSolution:
    """Weighted Fourier factorisation (WFF): V = Fᴴ diag(s) F / c with s ∝ √(diag F G Fᴴ / c).

    Computed with FFTs: the spectrum from G (or its rows), V⁺ and B = V^½ as multi-level circulants.
    """
    c = math.prod(shape)
    gk = fourier_spectrum(shape, g, rows)
    gk = np.where(gk > 1e-12 * max(float(gk.max()), 0.0), gk, 0.0)  # round-off on null frequencies
    root = np.sqrt(gk)
    total = root.sum()
    if total <= 0:
        raise ConfigError("fourier solver: the Gram matrix is zero")
    s = c * root / total
    inv = np.where(s > 0, 1.0 / np.where(s > 0, s, 1), 0.0)
    vp = _circulant(np.real(np.fft.ifftn(inv.reshape(shape))), shape)
    b = _circulant(np.real(np.fft.ifftn(np.sqrt(s).reshape(shape))), shape)
    lval = float(total**2 / c)
    return PartSolution(lval, (vp + vp.T) / 2, (b + b.T) / 2, "fourier", float("nan"), {})


def solve_eigen(g: np.ndarray) -> PartSolution:
    """Eigen-design V = √G / max diag √G, certified by the uniform-λ dual (tr √G)² / c."""
    root = psd_sqrt(g)
    c = g.shape[0]
    d = np.diag(root)
    if d.max() <= 0:
        raise ConfigError("eigen solver: the Gram matrix is zero")
    # Pseudo-inverse on the range of G: V = √G/m has V⁺ = m (√G)⁺ and tr(G V⁺) = m tr √G.
    m = float(d.max())
    vp = m * psd_pinv(root)
    lower = float(np.trace(root)) ** 2 / c
    return PartSolution(m * float(np.trace(root)), vp, psd_sqrt(root / m), "eigen", lower, {})


def solve_lbfgs(g: np.ndarray, warm: np.ndarray | None = None, *, maxiter: int = 3000,
                tol: float = 1e-12) -> PartSolution:
    """Minimise tr(G X⁻¹) over unit-diagonal X = D^{-½}RᵀRD^{-½} with L-BFGS, then certify."""
    c = g.shape[0]
    scale = float(np.trace(g)) or 1.0
    gs = g / scale
    reg = 1e-9 * np.eye(c)
    if warm is None:
        warm = np.eye(c)
    r0 = np.linalg.cholesky((warm + warm.T) / 2 + 1e-6 * np.trace(warm) / c * np.eye(c)).T

    def fun(x: np.ndarray) -> tuple[float, np.ndarray]:
        r = x.reshape(c, c)
        s = r.T @ r + reg
        h = np.sqrt(np.diag(s))
        try:
            cf = sla.cho_factor(s)
        except np.linalg.LinAlgError:
            return 1e30, np.zeros_like(x)
        sinv = sla.cho_solve(cf, np.eye(c))
        hg = h[:, None] * gs * h[None, :]
        val = float(np.sum(hg * sinv))
        grad_s = -sinv @ hg @ sinv
        t = gs @ (h[:, None] * sinv)
        grad_s[np.diag_indices(c)] += np.diag(t) / h
        grad_r = 2 * r @ ((grad_s + grad_s.T) / 2)
        return val, grad_r.ravel()

    res = sopt.minimize(fun, r0.ravel(), jac=True, method="L-BFGS-B",
                        options={"maxiter": maxiter, "maxcor": 30, "ftol": tol, "gtol": 1e-12})
    r = res.x.reshape(c, c)
    s = r.T @ r + reg
    h = 1 / np.sqrt(np.diag(s))
    v = h[:, None] * s * h[None, :]
    sol = _finish(g, v, "lbfgs", iterations=int(res.nit))
    sol.dual = _kkt_dual(g, sol.vpinv)
    return sol


def _gram_factor(g: np.ndarray) -> tuple[np.ndarray, float]:
    """F (c × r, full column rank) with G/s = FFᵀ, s = tr G."""
    scale = float(np.trace(g)) or 1.0
    w, u = np.linalg.eigh(g / scale)
    keep = w > 1e-12 * max(w.max(), 1e-300)
    return u[:, keep] * np.sqrt(w[keep]), scale


def _exp_quadrature(xmin: float, xmax: float, h: float = 1.25) -> tuple[np.ndarray, np.ndarray]:
    """Nodes/weights with Σ w_k e^{−t_k x} ≈ 1/x (relative error ≲ 1e-5) for x ∈ [2·xmin, 2·xmax].

    Trapezoid rule in τ = log t (the integrand decays doubly exponentially). Only the Newton
    Hessian uses it, so its accuracy affects the step quality, never the certificate.
    """
    lo = math.log(1e-6 / (2 * xmax))
    hi = math.log(14.0 / (2 * max(xmin, 1e-300)))
    tau = np.arange(lo, hi + h, h)
    t = np.exp(tau)
    return t, h * t


def _syrk(a: np.ndarray) -> np.ndarray:
    """A Aᵀ (symmetric rank-k update, half the flops of a GEMM)."""
    from scipy.linalg.blas import dsyrk

    m = dsyrk(1.0, np.asfortranarray(a))
    return np.triu(m) + np.triu(m, 1).T


def newton_cost(g: np.ndarray) -> float:
    """Approximate flops of one Newton step of :func:`solve_newton` (c² · min(r², 20 r))."""
    c = g.shape[0]
    w = np.linalg.eigvalsh(g)
    r = int(np.sum(w > 1e-12 * max(float(w.max()), 1e-300)))
    return float(c * c) * float(min(r * r, 20 * r))


def solve_newton(g: np.ndarray, *, tol: float = 1e-6, max_steps: int = 150) -> PartSolution:
    """Exact solve of the dual  max_{λ∈Δ} φ(λ) = tr √(FᵀΛF)  (L* = max φ²) by a barrier Newton method.

    With G = FFᵀ and A = FᵀΛF = Q diag(w) Qᵀ: ∂φ/∂λ_i = ½ f_iᵀA^{-½}f_i and the Hessian is
    Σ_ab Γ_ab (f̃_ia f̃_ib)(f̃_ja f̃_jb), Γ_ab = −½ / (√w_a √w_b (√w_a + √w_b)) (Daleckii-Krein).
    The primal X = F A^{-½} Fᵀ has tr(G X⁺) = φ and diag X = 2∇φ, so V = X / max diag X is feasible
    with L = 2φ·max ∇φ, while φ² is a dual bound: gap = 1 − φ / (2 max ∇φ), driven below ``tol``.
    """
    f, scale = _gram_factor(g)
    if f.shape[1] == 0:
        raise ConfigError("newton solver: the Gram matrix is zero")
    lam, steps = _newton_dual(f, tol, max_steps)
    phi, grad, ft, q, s = _dual_eval(f, lam)
    x = (ft / s) @ ft.T  # F A^{-1/2} Fᵀ
    sol = _finish(g, x, "newton", phi * phi * scale, steps=steps, lam=lam)
    sol.dual = min(sol.dual, sol.L)  # round-off only
    return sol


def _dual_eval(f: np.ndarray, lam: np.ndarray, hess: bool = False):  # noqa: ANN202
    """φ(λ) = tr √(FᵀΛF), its gradient ½ diag(F A^{-½} Fᵀ), and (``hess``) the Hessian in λ."""
    c, r = f.shape
    w, q = np.linalg.eigh(f.T @ (lam[:, None] * f))
    s = np.sqrt(np.clip(w, 1e-300, None))
    ft = f @ q
    grad = 0.5 * np.sum(ft * ft / s, axis=1)
    if not hess:
        return float(s.sum()), grad, ft, q, s
    h = np.zeros((c, c))
    ts, ws = _exp_quadrature(float(s.min()), float(s.max()))
    if len(ts) < r // 2:
        # Γ_ab = −½ ∫₀^∞ e^{−t s_a}/s_a · e^{−t s_b}/s_b dt: rank one in (a, b) per node, so
        # H ≈ −½ Σ_k w_k (F̃ diag(e^{−t_k s}/s) F̃ᵀ)∘² at c²r flops per node instead of c²r².
        for t, wk in zip(ts, ws):
            a = ft * np.sqrt(np.exp(-t * s) / s)
            m = _syrk(a)
            h -= 0.5 * wk * m * m
        return float(s.sum()), grad, h
    gam = -0.5 / (s[:, None] * s[None, :] * (s[:, None] + s[None, :]))
    bs = max(1, int(2e6 // (c * r)))
    for a0 in range(0, r, bs):
        a1 = min(r, a0 + bs)
        z = (ft[:, a0:a1, None] * ft[:, None, :]).reshape(c, -1)
        h += (z * gam[a0:a1].reshape(-1)) @ z.T
    return float(s.sum()), grad, h


def _newton_dual(f: np.ndarray, tol: float, max_steps: int, lam0: np.ndarray | None = None,
                 mu0: float = 0.1) -> tuple[np.ndarray, int]:
    """Barrier Newton ascent of φ over the simplex for the factor F (c × r); returns (λ, steps).

    ``lam0`` warm-starts λ (else uniform + fixed-point steps); the barrier weight starts at mu0·φ/c."""
    c = f.shape[0]

    def evalf(lam: np.ndarray, hess: bool = False):  # noqa: ANN202
        return _dual_eval(f, lam, hess)

    if lam0 is None:
        lam = np.full(c, 1.0 / c)
        for _ in range(20):  # fixed-point warm start λ ← λ∘∇φ / φ (digest §5.2)
            _, grad, *_ = evalf(lam)
            lam = np.clip(lam * grad, 1e-12, None)
            lam /= lam.sum()
    else:
        lam = np.clip(np.asarray(lam0, dtype=float), 1e-12, None)
        lam /= lam.sum()
    phi, grad, *_ = evalf(lam)
    mu = mu0 * phi / c
    steps = 0
    last_gap = math.inf
    ones = np.ones((c, 1))
    while steps < max_steps:
        for _ in range(60):
            steps += 1
            phi, grad, h = evalf(lam, True)
            gf = -grad - mu / lam
            hf = -h
            hf[np.diag_indices(c)] += mu / lam**2
            try:  # H_f ≻ 0: d = H_f⁻¹(−g_f + ν1) with 1ᵀd = 0
                cf = sla.cho_factor(hf, check_finite=False)
                y = sla.cho_solve(cf, np.stack([-gf, np.ones(c)], axis=1), check_finite=False)
                d = y[:, 0] - (y[:, 0].sum() / y[:, 1].sum()) * y[:, 1]
            except (np.linalg.LinAlgError, sla.LinAlgError):
                kkt = np.block([[hf, ones], [ones.T, np.zeros((1, 1))]])
                d = np.linalg.lstsq(kkt, np.concatenate([-gf, [0.0]]), rcond=None)[0][:c]
            dec = float(-gf @ d)
            if not dec > 1e-12 * phi:
                break
            neg = d < 0
            t = min(1.0, 0.99 * float(np.min(-lam[neg] / d[neg]))) if neg.any() else 1.0
            f0 = -phi - mu * float(np.log(lam).sum())
            while True:
                new = lam + t * d
                p1 = evalf(new)[0]
                if -p1 - mu * float(np.log(new).sum()) <= f0 - 0.25 * t * dec or t < 1e-12:
                    break
                t *= 0.5
            lam = new
            if dec < 1e-3 * mu * c or steps >= max_steps:
                break
        phi, grad, *_ = evalf(lam)
        gap = 1 - phi / (2 * grad.max())
        if gap <= tol or gap > 0.5 * last_gap:  # converged, or stalled at round-off
            break
        last_gap = gap
        mu *= 0.1
    return lam, steps


def rows_factor(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """Thin factor of G = RᵀR: (U, σ, scale) with G/scale = U diag(σ²) Uᵀ, U orthonormal (c × r)."""
    rows = np.asarray(rows, dtype=float)
    scale = float(np.sum(rows * rows)) or 1.0
    if rows.shape[0] >= rows.shape[1]:
        w, u = np.linalg.eigh(rows.T @ rows / scale)
        keep = w > 1e-12 * max(float(w.max()), 1e-300)
        return u[:, keep], np.sqrt(w[keep]), scale
    _, sv, vt = np.linalg.svd(rows / math.sqrt(scale), full_matrices=False)
    keep = sv > 1e-6 * max(float(sv.max()), 1e-300)
    return vt[keep].T, sv[keep], scale


def solve_lowrank(rows: np.ndarray, *, tol: float = 1e-6, max_rounds: int = 40,
                  max_steps: int = 150) -> PartSolution:
    """Exact solve for a low-rank Gram G = RᵀR (rank r ≪ c) without any c × c matrix.

    The dual max_{λ∈Δ} tr √(FᵀΛF) (G = FFᵀ, F = Uσ) is an A-optimal-design problem whose optimal λ
    is supported on few cells: an active-set method runs the barrier Newton of :func:`solve_newton`
    on a working set W (initially the 3r cells of largest fixed-point λ), then adds the cells whose
    gradient exceeds the working set's maximum (the KKT violators) until the certificate on ALL cells,
    gap = 1 − φ / (2 max_i ∇φ_i), is ≤ ``tol``. The primal is V = F A^{-½} Fᵀ / max diag, kept
    factored: B = diag(w^{-¼}) Qᵀ Fᵀ / √m (r × c) and V⁺ = vfac vfacᵀ, vfac = √m U σ⁻¹ Q diag(w^{¼}).
    """
    u, sv, scale = rows_factor(rows)
    f = u * sv
    c, r = f.shape
    if r == 0:
        raise ConfigError("lowrank solver: the Gram matrix is zero")
    lam = np.full(c, 1.0 / c)
    for _ in range(30):  # multiplicative fixed point: picks out the likely support
        _, grad, *_ = _dual_eval(f, lam)
        lam = np.clip(lam * grad, 0, None)
        lam /= lam.sum()
    work = np.sort(np.argsort(-lam, kind="stable")[: min(c, 3 * r)])
    best: tuple[float, np.ndarray] | None = None
    steps = rounds = 0
    gap = math.inf
    warm = None
    for rounds in range(1, max_rounds + 1):
        fw = f[work]
        uw, sw, _ = rows_factor(fw.T)  # restricted problem in its own (full-rank) coordinates
        if warm is None:
            lam_w, k = _newton_dual(uw * sw, 0.5 * tol, max_steps)
        else:  # later rounds: start from the last λ (new cells small) with a small barrier weight
            lam_w, k = _newton_dual(uw * sw, 0.5 * tol, max_steps, lam0=warm[work], mu0=1e-3)
        steps += k
        lam = np.zeros(c)
        lam[work] = lam_w
        phi, grad, *_ = _dual_eval(f, lam)
        gap = 1 - phi / (2 * grad.max())
        if best is None or gap < best[0]:
            best = (gap, lam)
        if gap <= tol or len(work) == c:
            break
        top = float(grad[work].max())
        viol = np.flatnonzero(grad > top * (1 + 1e-9))
        viol = viol[np.argsort(-grad[viol], kind="stable")][: max(r // 2, 10)]
        keep = work[lam_w > 1e-8 * lam_w.max()]
        if len(keep) < r:
            keep = work
        work = np.union1d(keep, viol)
        warm = lam.copy()
        warm[viol] = 1e-2 * float(lam.max())
    gap, lam = best
    phi, grad, ft, q, s = _dual_eval(f, lam)
    m = float(2 * grad.max())  # max diag X, X = F A^{-½} Fᵀ
    w4 = np.sqrt(s)  # w^{1/4}
    vfac = math.sqrt(m) * (u / sv) @ (q * w4)
    b = ((q / w4).T @ f.T) / math.sqrt(m)
    lval = m * phi * scale
    return PartSolution(lval, None, b, "lowrank", min(phi * phi * scale, lval),
                        {"rounds": rounds, "steps": steps, "support": int(np.sum(lam > 0)), "rank": r,
                         "lam": lam}, vfac)


def solve_sdp(g: np.ndarray, shape: tuple[int, ...]) -> PartSolution:
    """Exact SDP via cvxpy (Clarabel) on the centred basis; gap from the KKT dual bound."""
    import cvxpy as cp

    cmat = centering(shape)
    w, vecs = np.linalg.eigh(cmat)
    u = vecs[:, w > 0.5]  # orthonormal basis of the centred space (c × r)
    scale = float(np.trace(g)) or 1.0
    gh = u.T @ (g / scale) @ u
    k = psd_sqrt(gh)
    r = u.shape[1]
    x = cp.Variable((r, r), symmetric=True)
    y = cp.Variable((r, r), symmetric=True)
    cons = [cp.bmat([[y, k], [k.T, x]]) >> 0, cp.diag(u @ x @ u.T) <= 1]
    prob = cp.Problem(cp.Minimize(cp.trace(y)), cons)
    try:
        prob.solve(solver=cp.CLARABEL)
    except Exception:  # noqa: BLE001 - any cvxpy/solver failure falls back to SCS
        prob.solve(solver=cp.SCS, eps=1e-9)
    if x.value is None:
        raise ConfigError(f"sdp solver failed ({prob.status})")
    v = u @ x.value @ u.T
    sol = _finish(g, v, "sdp", status=prob.status)
    sol.dual = _kkt_dual(g, sol.vpinv)
    return sol


def solve(g: np.ndarray, shape: tuple[int, ...], method: str = "auto", *, tol: float = 1e-4,
          sdp_limit: int = 40, newton_limit: float = NEWTON_LIMIT) -> PartSolution:
    """Solve one part Gram with ``method`` (see module docstring); ``auto`` stops at gap ≤ tol."""
    if method not in METHODS:
        raise ConfigError(f"querysmasher: parameter 'solver' must be one of {METHODS}, got {method!r}")
    g = np.asarray(g, dtype=float)
    g = (g + g.T) / 2
    c = g.shape[0]
    if c != math.prod(shape):
        raise ConfigError(f"querysmasher: Gram of size {c} does not match part shape {shape}")
    if method in ("auto", "closed"):
        sol = solve_closed(g, shape)
        if sol is not None or method == "closed":
            if sol is None:
                raise ConfigError("querysmasher: solver 'closed' needs a marginal (⊗C) subworkload")
            return sol
    if method == "fourier":
        return solve_fourier(g, shape)
    if method == "eigen":
        return solve_eigen(g)
    if method == "eigen-design":
        from privcube.mechanisms.eigen_design import querysmasher_part

        return querysmasher_part(g)
    if method == "sdp":
        return solve_sdp(g, shape)
    if method == "lbfgs":
        return solve_lbfgs(g, psd_pinv(solve_eigen(g).vpinv))
    if method == "newton":
        return solve_newton(g, tol=0.5 * tol)
    if method == "lowrank":
        f, scale = _gram_factor(g)
        return solve_lowrank(f.T * math.sqrt(scale), tol=0.5 * tol)
    # auto: eigen-design, Fourier, then the Newton dual (dense when c²r² ≤ newton_limit, else active-set on
    # the Gram factor), then L-BFGS from the best, then SDP if still not certified
    cands = [solve_eigen(g)]
    if c <= 4096:
        f = solve_fourier(g, shape)
        f.dual = cands[0].dual
        cands.append(f)
    best = min(cands, key=lambda s: s.L)
    lower = max(s.dual for s in cands)
    best.dual = max(best.dual if math.isfinite(best.dual) else 0.0, lower)
    if best.gap <= tol:
        return best
    w = np.linalg.eigvalsh(g)
    rank = int(np.sum(w > 1e-12 * max(float(w.max()), 1e-300)))
    exact = None
    if float(c * c) * float(min(rank * rank, 20 * rank)) <= newton_limit:  # newton_cost(g)
        exact = solve_newton(g, tol=0.5 * tol)
    else:  # active-set barrier Newton on the Gram's factor (support only when low rank): certified, and
        # far faster than L-BFGS, which used to be the only option here for full-rank parts of ~600+ cells
        f, scale = _gram_factor(g)
        exact = solve_lowrank(f.T * math.sqrt(scale), tol=0.5 * tol)
    if exact is not None:
        exact.dual = max(exact.dual, lower)
        if exact.L <= best.L:
            best = exact
        else:
            best.dual = max(best.dual, exact.dual)
        if best.gap <= tol:
            return best
    v0 = psd_pinv(best.pinv_dense())
    lb = solve_lbfgs(g, v0 + 1e-3 * np.eye(c))
    lb.dual = max(lb.dual, lower)
    if lb.L > best.L:
        best.dual = max(best.dual, lb.dual)
    else:
        best = lb
    if best.gap > tol and c <= sdp_limit:
        sd = solve_sdp(g, shape)
        sd.dual = max(sd.dual, best.dual)
        if sd.L < best.L:
            best = sd
        else:
            best.dual = max(best.dual, sd.dual)
    return best


#: bytes of working memory a dense solve of a c-cell part needs, per c² (≈ 16 dense c × c float64 arrays)
DENSE_BYTES_PER_CELL2 = 16 * 8
#: thin parts (rank ≤ c/3) above this many cells go to the active-set solver even under ``dense_limit``:
#: a 39×29 abs-diff part takes 0.5 s there against 24 s for the dense Newton (same certified optimum)
THIN_DENSE_LIMIT = 512


def _available_memory() -> float:
    try:
        import psutil

        return float(psutil.virtual_memory().available)
    except Exception:  # noqa: BLE001 - no psutil / no /proc: do not block the solve
        return math.inf


def solve_part(part: Any, method: str = "auto", *, tol: float = 1e-4, sdp_limit: int = 40,
               newton_limit: float = NEWTON_LIMIT, dense_limit: int = 4096) -> PartSolution:
    """Solve one decomposition part (``shape``, ``size``, ``gram()``, ``rows(max_rows)``, ``attrs``).

    Up to ``dense_limit`` cells: :func:`solve` on the dense Gram. Above it the part is never
    materialised as c × c when its Gram has a thin row factor (≤ c/3 rows, e.g. affine or abs-diff
    pairs): ``auto``/``lowrank`` then use :func:`solve_lowrank`. Other large parts are solved densely
    when the memory a dense solve needs is available; otherwise a ConfigError names the part.
    """
    if method not in METHODS:
        raise ConfigError(f"querysmasher: parameter 'solver' must be one of {METHODS}, got {method!r}")
    c = int(part.size)
    thin = c > 1 and part.row_count() <= c // 3  # thin factor: rank ≤ c/3
    if thin and c > dense_limit:
        need = 6 * 8 * float(c) * part.row_count()  # rows, factor, vfac, B and temporaries
        avail = _available_memory()
        if need > avail:
            raise ConfigError(
                f"querysmasher: subworkload part on {list(part.attrs)} (shape {tuple(part.shape)}, {c} cells, "
                f"{part.row_count()} rows) needs about {need / 1e9:.1f} GB even in factored form, but only "
                f"{avail / 1e9:.1f} GB is available"
            )
    rows = part.rows() if thin else None
    if rows is not None:
        if method == "lowrank":
            return solve_lowrank(rows, tol=0.5 * tol)
        if method == "fourier":
            return solve_fourier(None, tuple(part.shape), rows=rows)
        if method == "auto":
            r = len(rows_factor(rows)[1])
            if c > min(dense_limit, THIN_DENSE_LIMIT) or float(c * c) * float(min(r * r, 20 * r)) > newton_limit:
                return solve_lowrank(rows, tol=0.5 * tol)  # dense Newton too costly: active set
    if c <= dense_limit:
        return solve(part.gram(), part.shape, method, tol=tol, sdp_limit=sdp_limit, newton_limit=newton_limit)
    need = DENSE_BYTES_PER_CELL2 * float(c) ** 2
    avail = _available_memory()
    if need > avail:
        kind = "no thin row factor" if rows is None else f"solver {method!r} needs the dense Gram"
        raise ConfigError(
            f"querysmasher: subworkload part on {list(part.attrs)} (shape {tuple(part.shape)}, {c} cells; "
            f"{kind}) needs about {need / 1e9:.1f} GB for a dense solve, but only {avail / 1e9:.1f} GB is "
            f"available; use Kronecker-structured query types on these attributes or a machine with more memory"
        )
    return solve(part.gram(), part.shape, method, tol=tol, sdp_limit=sdp_limit, newton_limit=newton_limit)


def solve_item(item: tuple[Any, str, float, int, float, int]) -> PartSolution:
    """One part solve as a task: ``(part, method, tol, sdp_limit, newton_limit, dense_limit)`` (picklable)."""
    part, method, tol, sdp_limit, newton_limit, dense_limit = item
    return solve_part(part, method, tol=tol, sdp_limit=sdp_limit, newton_limit=newton_limit, dense_limit=dense_limit)


def solve_parts(parts: Sequence[Any], *, method: str = "auto", tol: float = 1e-4, sdp_limit: int = 40,
                newton_limit: float = NEWTON_LIMIT, dense_limit: int = 4096,
                map: Callable[..., list[Any]] | None = None) -> list[PartSolution]:
    """Solve each part through ``map`` (a run context's: one task per part on a cluster, the biggest
    submitted first; default: in order, here, with a progress bar); results in input order.

    Parts above ``dense_limit`` cells are solved in factored form (see :func:`solve_part`)."""
    items = [(p, method, tol, sdp_limit, newton_limit, dense_limit) for p in parts]
    return (map or local_map)(solve_item, items, cost=lambda it: float(it[0].size) ** 3,
                              label="querysmasher-solve", title="querysmasher: solving parts")
