"""The body of the flash-attention backward kernel (c_attention_bwd): packing, the key-block
tasks, the dQ reduction; one OpenMP parallel region with the three passes as work-sharing loops."""

from __future__ import annotations

import math

from uol_core.backends.c import CodeWriter
from uol_core.backends.c_attention_tiles import Tiles
from uol_core.backends.c_names import index_id, tensor_id
from uol_core.odl.ir import Op


def body(w: CodeWriter, op: Op, plan, n: dict, t: Tiles, texts: tuple[str, str],
         batch: list[int]) -> None:
    """Emit the kernel's statements after the argument declarations (closes the function)."""
    from uol_core.backends.c_attention_bwd import uses_index

    S, T, D, E, NB, BQ, BK, DP, EP, SP, TP, KB, TH = (n[k] for k in (
        "S", "T", "D", "E", "NB", "BQ", "BK", "DP", "EP", "SP", "TP", "KB", "THREADS"))
    Q, K, V, MX, L, Z, DO, DQ, DK, DV = (tensor_id(x) for x in (
        plan.q, plan.k, plan.v, plan.mx, plan.l, plan.z, plan.do, plan.dq, plan.dk, plan.dv))
    mr, qt = t.mr, t.qt
    score, slope = texts
    # z = s - mx below this makes e^z / l (l <= T) subnormal: ln(FLT_MIN) + ln(T), IEEE binary32
    cutoff = float(f"{math.log(2.0 ** -126) + math.log(max(T, 1)):.6f}")
    lines = {s.target: s.line for s in op.stmts}
    pad = "            "
    # Index variables the score expression or its slope read: batch indices from the slice
    # number, i and j from the tile position (declared only when read, as c_attention does).
    pre, rest = [], "n"
    for name, extent in reversed(list(zip(plan.prefix, batch))):
        if uses_index(score + slope, name):
            pre.append(f"{pad}const int64_t {index_id(name)} = ({rest}) % {extent};")
        rest = f"{rest} / {extent}"
    jdef = f"const int64_t {index_id(plan.j)} = k0 + jj;\n                    " \
        if uses_index(score + slope, plan.j) else ""
    idef = f"const int64_t {index_id(plan.i)} = q0 + ii; " if uses_index(score + slope, plan.i) else ""
    total = f"{NB}LL * ({D * SP} + {E * SP} + {SP * DP} + {SP * EP} + {TP * DP} + {3 * SP} + {TH * SP * DP})"
    al = "__attribute__((aligned(64)))"
    # Causal (j <= i + c): queries i < k0 - c see none of this block's keys, their p and dS
    # are exactly 0, so whole query blocks before that are skipped (half the work at c = 0).
    q_lo = "0" if plan.causal is None else \
        f"(k0 - {plan.causal} > 0 ? (k0 - {plan.causal}) / {BQ} * {BQ} : 0)"
    w.emit(f"""    /* Scratch, one malloc per call: Q^T, dO^T [slice][query block][D|E][BQ]
       (contiguous per block: a row stride of SP floats, a power of two, would map the rows a
       micro-tile reads onto the same L1 sets);
       Q, dO rows [slice][SP][DP|EP] and K rows [slice][TP][DP], zero-padded to whole tiles;
       mx, 1/l, Di [slice][SP]; dQ partials [thread][slice][SP][DP]. */
    float *scratch = (float *)malloc(sizeof(float) * {total});
    if (!scratch) {{  /* no memory: NaN gradients say so instead of silent garbage */
        for (int64_t x = 0; x < {NB * S * D}; ++x) {DQ}[x] = NAN;
        for (int64_t x = 0; x < {NB * T * D}; ++x) {DK}[x] = NAN;
        for (int64_t x = 0; x < {NB * T * E}; ++x) {DV}[x] = NAN;
        return;
    }}
    float *const qT = scratch, *const doT = qT + {NB * D * SP}LL, *const qp = doT + {NB * E * SP}LL;
    float *const dop = qp + {NB * SP * DP}LL, *const kp = dop + {NB * SP * EP}LL;
    float *const mxs = kp + {NB * TP * DP}LL, *const rl = mxs + {NB * SP}LL, *const di = rl + {NB * SP}LL;
    float *const dqp = di + {NB * SP}LL;
    #pragma omp parallel num_threads({TH})
    {{
        #pragma omp for
        for (int64_t th = 0; th < {TH}; ++th) memset(dqp + th * {NB * SP * DP}LL, 0, sizeof(float) * {NB * SP * DP}LL);
        #pragma omp for collapse(2) nowait
        for (int64_t n = 0; n < {NB}; ++n)
        for (int64_t i = 0; i < {SP}; ++i) {{  /* pack one query row; Di = dO . z / l = dO . O */
            float *restrict qr = qp + (n * {SP} + i) * {DP}, *restrict gr = dop + (n * {SP} + i) * {EP};
            float acc = 0.0f, inv = 0.0f, m = 0.0f;  /* padding rows: p = 0 (1/l = 0), Di = 0 */
            for (int64_t d = 0; d < {DP}; ++d) qr[d] = i < {S} && d < {D} ? {Q}[(n * {S} + i) * {D} + d] : 0.0f;
            for (int64_t e = 0; e < {EP}; ++e) gr[e] = i < {S} && e < {E} ? {DO}[(n * {S} + i) * {E} + e] : 0.0f;
            float *restrict qc = qT + (n * {SP} + i / {BQ} * {BQ}) * {D} + i % {BQ};
            float *restrict gc = doT + (n * {SP} + i / {BQ} * {BQ}) * {E} + i % {BQ};
            for (int64_t d = 0; d < {D}; ++d) qc[d * {BQ}] = qr[d];
            for (int64_t e = 0; e < {E}; ++e) gc[e * {BQ}] = gr[e];
            if (i < {S}) {{
                for (int64_t e = 0; e < {E}; ++e) acc += gr[e] * {Z}[(n * {S} + i) * {E} + e];
                inv = 1.0f / {L}[n * {S} + i];
                m = {MX}[n * {S} + i];
            }}
            mxs[n * {SP} + i] = m; rl[n * {SP} + i] = inv; di[n * {SP} + i] = acc * inv;
        }}
        #pragma omp for collapse(2)
        for (int64_t n = 0; n < {NB}; ++n)
        for (int64_t j = 0; j < {TP}; ++j)  /* K rows, zero-padded: padding keys score finite */
            for (int64_t d = 0; d < {DP}; ++d)
                kp[(n * {TP} + j) * {DP} + d] = j < {T} && d < {D} ? {K}[(n * {T} + j) * {D} + d] : 0.0f;
        /* One task = one slice and BK keys: it owns those rows of dK and dV. */
        #pragma omp for collapse(2) schedule(static)
        for (int64_t n = 0; n < {NB}; ++n)
        for (int64_t kb = 0; kb < {KB}; ++kb) {{
            const int64_t k0 = kb * {BK};
            const int64_t nk = {T} - k0 < {BK} ? {T} - k0 : {BK};
            const int64_t nkr = (nk + {mr - 1}) / {mr} * {mr};  /* keys the register tiles cover */
            float st[{BK}][{BQ}] {al}, dt[{BK}][{BQ}] {al}, dka[{BK}][{DP}] {al}, dva[{BK}][{EP}] {al};
            float *const dq = dqp + (omp_get_thread_num() * {NB}LL + n) * {SP * DP};
            const float *const kb0 = kp + (n * {TP} + k0) * {DP};
            const float *const mxn = mxs + n * {SP}, *const rln = rl + n * {SP}, *const din = di + n * {SP};
{"".join(x + chr(10) for x in pre)}            memset(dka, 0, sizeof dka); memset(dva, 0, sizeof dva);
            for (int64_t q0 = {q_lo}; q0 < {SP}; q0 += {BQ}) {{
                for (int64_t j0 = 0; j0 < nkr; j0 += {mr}) {{  /* S^T = K Q^T, dP^T = V dO^T */
                    const float *kr[{mr}], *vr[{mr}];
                    for (int64_t r = 0; r < {mr}; ++r) {{
                        kr[r] = kb0 + (j0 + r) * {DP};
                        vr[r] = {V} + (n * {T} + (k0 + j0 + r < {T} ? k0 + j0 + r : {T - 1})) * {E};
                    }}
                    for (int64_t i0 = 0; i0 < {BQ}; i0 += {qt}) {{
                        uol_qk_tile(kr, qT + (n * {SP} + q0) * {D} + i0, &st[j0][i0]);
                        uol_vdo_tile(vr, doT + (n * {SP} + q0) * {E} + i0, &dt[j0][i0]);
                    }}
                }}""", lines[plan.score.target])
    w.emit(f"""                for (int64_t jj = 0; jj < nkr; ++jj) {{
                    if (jj >= nk) {{  /* keys past T: p = dS = 0, no share in dQ */
                        memset(st[jj], 0, sizeof st[jj]); memset(dt[jj], 0, sizeof dt[jj]);
                        continue;
                    }}
                    {jdef}#pragma omp simd
                    for (int64_t ii = 0; ii < {BQ}; ++ii) {{  /* the score expression and its slope */
                        {idef}st[jj][ii] = {score};
                        dt[jj][ii] = (dt[jj][ii] - din[q0 + ii]) * ({slope});
                    }}
                    #pragma omp simd
                    for (int64_t ii = 0; ii < {BQ}; ++ii) {{  /* P = exp(s - mx) / l, dS = P (dP - Di) f' */
                        /* Below {cutoff:.4g} (ln of the smallest normal float x {T} keys), e^z / l
                           is subnormal, and every operation on a subnormal runs as a microcode
                           assist (masked causal scores made the backward 6x slower): such a P
                           (under {T} x 1.2e-38) is 0, and no lane computes it. */
                        const float z = st[jj][ii] - mxn[q0 + ii];
                        const int under = z < {cutoff!r}f;
                        const float p = under ? 0.0f : uol_expf(under ? 0.0f : z) * rln[q0 + ii];
                        st[jj][ii] = p;
                        dt[jj][ii] = p * dt[jj][ii];
                    }}
                }}""", lines.get(f"d_{plan.score.target}", op.line))
    full = BQ // mr * mr
    tail = "" if full == BQ else (
        f"\n                for (int64_t d0 = 0; d0 < {DP}; d0 += {qt})\n"
        f"                    uol_dq_tile{BQ - full}(nkr, &dt[0][{full}], kb0 + d0, "
        f"dq + (q0 + {full}) * {DP} + d0);")
    w.emit(f"""                for (int64_t j0 = 0; j0 < nkr; j0 += {mr}) {{  /* dV += P^T dO, dK += dS^T Q */
                    for (int64_t e0 = 0; e0 < {EP}; e0 += {qt})
                        uol_dv_tile{mr}({BQ}, &st[j0][0], dop + (n * {SP} + q0) * {EP} + e0, &dva[j0][e0]);
                    for (int64_t d0 = 0; d0 < {DP}; d0 += {qt})
                        uol_dk_tile{mr}({BQ}, &dt[j0][0], qp + (n * {SP} + q0) * {DP} + d0, &dka[j0][d0]);
                }}
                for (int64_t i0 = 0; i0 < {full}; i0 += {mr})  /* dQ += dS K, this thread's partial */
                    for (int64_t d0 = 0; d0 < {DP}; d0 += {qt})
                        uol_dq_tile{mr}(nkr, &dt[0][i0], kb0 + d0, dq + (q0 + i0) * {DP} + d0);{tail}
            }}
            for (int64_t jj = 0; jj < nk; ++jj) {{
                for (int64_t d = 0; d < {D}; ++d) {DK}[(n * {T} + k0 + jj) * {D} + d] = dka[jj][d];
                for (int64_t e = 0; e < {E}; ++e) {DV}[(n * {T} + k0 + jj) * {E} + e] = dva[jj][e];
            }}
        }}
        #pragma omp for
        for (int64_t r = 0; r < {NB * S}; ++r) {{  /* dQ = sum of the partials, in thread order */
            const float *src = dqp + (r / {S} * {SP} + r % {S}) * {DP};
            float *restrict dst = {DQ} + r * {D};
            for (int64_t d = 0; d < {D}; ++d) dst[d] = src[d];
            for (int64_t th = 1; th < {TH}; ++th)
                for (int64_t d = 0; d < {D}; ++d) dst[d] += src[th * {NB * SP * DP}LL + d];
        }}
    }}
    free(scratch);
}}""", op.stmts[-1].line)
