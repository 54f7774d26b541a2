"""The body of the flash-attention backward kernel (c_attention_bwd): packing, the key-block
tasks, the dQ reduction; one OpenMP parallel region with the three passes as work-sharing loops."""

from __future__ import annotations

import math

from uol_core.backends.c.attention.tiles import Tiles
from uol_core.backends.c.text.names import index_id, tensor_id
from uol_core.backends.c.text.writer import CodeWriter
from uol_core.odl.ir import Op


def owns_slices(slices: int, threads: int) -> bool:
    """Whether each thread takes whole slices: when they split evenly, a thread sums a slice's
    dQ in one buffer and writes it once (no partials of every slice, no reduction pass)."""
    return slices % threads == 0


def body(w: CodeWriter, op: Op, plan, n: dict, t: Tiles, texts: tuple[str, str],
         batch: list[int]) -> None:
    """Emit the kernel's statements after the argument declarations (closes the function)."""
    # deferred: at the top this import closes a circle, and fails while the modules load
    from uol_core.backends.c.attention.backward import uses_index

    S, T, D, E, NB, BQ, BK, DP, EP, SP, KB, TH = (n[k] for k in (
        "S", "T", "D", "E", "NB", "BQ", "BK", "DP", "EP", "SP", "KB", "THREADS"))
    Q, K, V, MX, L, OUT, DO, DQ, DK, DV = (tensor_id(x) for x in (
        plan.q, plan.k, plan.v, plan.mx, plan.l, plan.o, plan.do, plan.dq, plan.dk, plan.dv))
    mr, qt = t.mr, t.qt
    rem = T % mr  # keys of the one short register tile (the last key block's last)
    score, slope = texts
    # z = s - mx below this makes e^z / l (l <= T) subnormal: ln(FLT_MIN) + ln(T), IEEE binary32
    cutoff = float(f"{math.log(2.0 ** -126) + math.log(max(T, 1)):.6f}")
    lines = {s.target: s.line for s in op.stmts}
    pad = "            "
    # Index variables the score expression or its slope read: batch indices from the slice
    # number, i and j from the tile position (declared only when read, as attention.forward does).
    pre, rest = [], "n"
    for name, extent in reversed(list(zip(plan.prefix, batch))):
        if uses_index(score + slope, name):
            pre.append(f"{pad}const int64_t {index_id(name)} = ({rest}) % {extent};")
        rest = f"{rest} / {extent}"
    jdef = f"const int64_t {index_id(plan.j)} = k0 + jj;\n                    " \
        if uses_index(score + slope, plan.j) else ""
    idef = f"const int64_t {index_id(plan.i)} = q0 + ii; " if uses_index(score + slope, plan.i) else ""
    al = "__attribute__((aligned(64)))"
    # Q and dO rows are read in place when no padding is needed (whole tiles, whole blocks).
    padded = (D, E, S) != (DP, EP, SP)
    owned = owns_slices(NB, TH)
    dq_floats = TH * SP * DP if owned else NB * TH * SP * DP
    # K rows are read in place unless D needs padding to whole vectors.
    kpad = D != DP
    rows = (f"{SP * DP} + {SP * EP} + " if padded else "") + (f"{T * DP} + " if kpad else "")
    total = f"{NB}LL * ({D * SP} + {E * SP} + {rows}{3 * SP}) + {dq_floats}LL"
    # Causal (j <= i + c): queries i < k0 - c see none of this block's keys, their p and dS
    # are exactly 0, so whole query blocks before that are skipped (half the work at c = 0).
    q_lo = "0" if plan.causal is None else \
        f"(k0 - {plan.causal} > 0 ? (k0 - {plan.causal}) / {BQ} * {BQ} : 0)"
    qrows = f"qp + (n * {SP} + q0) * {DP}" if padded else f"{Q} + (n * {S} + q0) * {D}"
    gorows = f"dop + (n * {SP} + q0) * {EP}" if padded else f"{DO} + (n * {S} + q0) * {E}"
    layout = "; ".join(
        [("Q, dO rows [slice][SP][DP|EP], zero-padded to whole tiles" if padded else
          "Q and dO rows read in place"),
         ("K rows [slice][T][DP], zero-padded to whole vectors" if kpad else
          "K rows read in place")])
    dq_layout = ("dQ of the thread's current slice [thread][SP][DP]" if owned else
                 "dQ partials [thread][slice][SP][DP]")
    w.emit(f"""    /* Scratch, one malloc per call: Q^T, dO^T [slice][query block][D|E][BQ]
       (contiguous per block: a row stride of SP floats, a power of two, would map the rows a
       micro-tile reads onto the same L1 sets);
       {layout};
       mx, 1/l, Di [slice][SP]; {dq_layout}. */
    float *scratch = (float *)malloc(sizeof(float) * ({total}));
    if (!scratch) {{  /* no memory: NaN gradients say so instead of silent garbage */
        for (int64_t x = 0; x < {NB * S * D}; ++x) {DQ}[x] = NAN;
        for (int64_t x = 0; x < {NB * T * D}; ++x) {DK}[x] = NAN;
        for (int64_t x = 0; x < {NB * T * E}; ++x) {DV}[x] = NAN;
        return;
    }}
    float *const qT = scratch, *const doT = qT + {NB * D * SP}LL, *const kp = {'doT + ' + str(NB * E * SP) + 'LL' if kpad else '(float *)' + K};
    float *const mxs = {'kp + ' + str(NB * T * DP) + 'LL' if kpad else 'doT + ' + str(NB * E * SP) + 'LL'}, *const rl = mxs + {NB * SP}LL, *const di = rl + {NB * SP}LL;
    float *const dqp = di + {NB * SP}LL;""", lines[plan.score.target])
    if padded:
        w.emit(f"    float *const qp = dqp + {dq_floats}LL, *const dop = qp + {NB * SP * DP}LL;")
    w.emit(f"""    #pragma omp parallel num_threads({TH})
    {{""")
    if not owned:
        w.emit(f"""        #pragma omp for
        for (int64_t th = 0; th < {TH}; ++th) memset(dqp + th * {NB * SP * DP}LL, 0, sizeof(float) * {NB * SP * DP}LL);""")
    copies = "" if not padded else f"""
            float *restrict qr = qp + (n * {SP} + i) * {DP}, *restrict gp = dop + (n * {SP} + i) * {EP};
            for (int64_t d = 0; d < {DP}; ++d) qr[d] = i < {S} && d < {D} ? {Q}[(n * {S} + i) * {D} + d] : 0.0f;
            for (int64_t e = 0; e < {EP}; ++e) gp[e] = i < {S} && e < {E} ? {DO}[(n * {S} + i) * {E} + e] : 0.0f;"""
    w.emit(f"""        #pragma omp for collapse(2) nowait
        for (int64_t n = 0; n < {NB}; ++n)
        for (int64_t i = 0; i < {SP}; ++i) {{  /* row statistics; Di = dO . O */
            float acc = 0.0f, inv = 0.0f, m = 0.0f;  /* padding rows: p = 0 (1/l = 0), Di = 0 */{copies}
            if (i < {S}) {{
                const float *restrict gr = {DO} + (n * {S} + i) * {E}, *restrict orow = {OUT} + (n * {S} + i) * {E};
                #pragma omp simd reduction(+:acc)
                for (int64_t e = 0; e < {E}; ++e) acc += gr[e] * orow[e];
                inv = 1.0f / {L}[n * {S} + i];
                m = {MX}[n * {S} + i];
            }}
            mxs[n * {SP} + i] = m; rl[n * {SP} + i] = inv; di[n * {SP} + i] = acc;
        }}
        #pragma omp for collapse(2) nowait
        for (int64_t n = 0; n < {NB}; ++n)
        for (int64_t b = 0; b < {SP // BQ}; ++b) {{  /* Q^T, dO^T of one query block */
            float *restrict qc = qT + (n * {SP} + b * {BQ}) * {D}, *restrict gc = doT + (n * {SP} + b * {BQ}) * {E};
            for (int64_t ii = 0; ii < {BQ}; ++ii) {{
                const int64_t i = b * {BQ} + ii;
                if (i < {S}) {{
                    const float *restrict qs = {Q} + (n * {S} + i) * {D}, *restrict gs = {DO} + (n * {S} + i) * {E};
                    for (int64_t d = 0; d < {D}; ++d) qc[d * {BQ} + ii] = qs[d];
                    for (int64_t e = 0; e < {E}; ++e) gc[e * {BQ} + ii] = gs[e];
                }} else {{
                    for (int64_t d = 0; d < {D}; ++d) qc[d * {BQ} + ii] = 0.0f;
                    for (int64_t e = 0; e < {E}; ++e) gc[e * {BQ} + ii] = 0.0f;
                }}
            }}
        }}
""" + ("" if not kpad else f"""
        #pragma omp for collapse(2) nowait
        for (int64_t n = 0; n < {NB}; ++n)
        for (int64_t j = 0; j < {T}; ++j)  /* K rows, zero-padded to whole vectors */
            for (int64_t d = 0; d < {DP}; ++d)
                kp[(n * {T} + j) * {DP} + d] = d < {D} ? {K}[(n * {T} + j) * {D} + d] : 0.0f;""") + """
        #pragma omp barrier""", lines[plan.score.target])
    if owned:
        w.emit(f"""        /* Each thread owns whole slices: one slice's tasks (blocks of BK keys) in turn, dQ
           summed in the thread's slice buffer and written once. */
        float *const dq = dqp + omp_get_thread_num() * {SP * DP}LL;
        #pragma omp for schedule(static)
        for (int64_t n = 0; n < {NB}; ++n) {{
        memset(dq, 0, sizeof(float) * {SP * DP});
        for (int64_t kb = 0; kb < {KB}; ++kb) {{""")
        dq_decl = ""
    else:
        w.emit(f"""        /* One task = one slice and BK keys: it owns those rows of dK and dV. */
        #pragma omp for collapse(2) schedule(static)
        for (int64_t n = 0; n < {NB}; ++n)
        for (int64_t kb = 0; kb < {KB}; ++kb) {{""")
        dq_decl = f"\n            float *const dq = dqp + (omp_get_thread_num() * {NB}LL + n) * {SP * DP};"
    w.emit(f"""            const int64_t k0 = kb * {BK};
            const int64_t nk = {T} - k0 < {BK} ? {T} - k0 : {BK};
            float st[{BK}][{BQ}] {al}, dt[{BK}][{BQ}] {al}, dka[{BK}][{DP}] {al}, dva[{BK}][{EP}] {al};{dq_decl}
            const float *const kb0 = kp + (n * {T} + k0) * {DP};
            const float *const mxn = mxs + n * {SP}, *const rln = rl + n * {SP}, *const din = di + n * {SP};
{"".join(x + chr(10) for x in pre)}            memset(dka, 0, sizeof dka); memset(dva, 0, sizeof dva);
            for (int64_t q0 = {q_lo}; q0 < {SP}; q0 += {BQ}) {{
                for (int64_t j0 = 0; j0 < nk; j0 += {mr}) {{  /* S^T = K Q^T, dP^T = V dO^T */
                    const int64_t rows = nk - j0 < {mr} ? nk - j0 : {mr};  /* the last: {rem or mr} */
                    const float *kr[{mr}], *vr[{mr}];
                    for (int64_t r = 0; r < rows; ++r) {{
                        kr[r] = kb0 + (j0 + r) * {DP};
                        vr[r] = {V} + (n * {T} + k0 + j0 + r) * {E};
                    }}
                    for (int64_t i0 = 0; i0 < {BQ}; i0 += {qt}) {{
{_by_rows(rem, "{{ uol_qk_tile{r}(kr, qT + (n * " + str(SP) + " + q0) * " + str(D) + " + i0, &st[j0][i0]); "
          "uol_vdo_tile{r}(vr, doT + (n * " + str(SP) + " + q0) * " + str(E) + " + i0, &dt[j0][i0]); }}", mr, "                        ")}
                    }}
                }}""", lines[plan.score.target])
    w.emit(f"""                for (int64_t jj = 0; jj < nk; ++jj) {{
                    {jdef}#pragma omp simd
                    for (int64_t ii = 0; ii < {BQ}; ++ii) {{  /* P = exp(s - mx) / l, dS = P (dP - Di) f' */
                        /* the score expression and its slope, both of the Q.K sum in st */
                        {idef}const float s = {score};
                        const float dp = (dt[jj][ii] - din[q0 + ii]) * ({slope});
                        /* Below {cutoff:.4g} (ln of the smallest normal float x {T} keys), e^z / l
                           is subnormal, and every operation on a subnormal runs as a microcode
                           assist (masked causal scores made the backward 6x slower): such a P
                           (under {T} x 1.2e-38) is 0, and no lane computes it. */
                        const float z = s - mxn[q0 + ii];
                        const int under = z < {cutoff!r}f;
                        const float p = under ? 0.0f : uol_expf(under ? 0.0f : z) * rln[q0 + ii];
                        st[jj][ii] = p;
                        dt[jj][ii] = p * dp;
                    }}
                }}""", lines.get(f"d_{plan.score.target}", op.line))
    full = BQ // mr * mr
    tail = "" if full == BQ else (
        f"\n                for (int64_t d0 = 0; d0 < {DP}; d0 += {qt})\n"
        f"                    uol_dq_tile{BQ - full}(nk, &dt[0][{full}], kb0 + d0, "
        f"dq + (q0 + {full}) * {DP} + d0);")
    w.emit(f"""                for (int64_t j0 = 0; j0 < nk; j0 += {mr}) {{  /* dV += P^T dO, dK += dS^T Q */
{"" if not rem else f"                    const int64_t rows = nk - j0 < {mr} ? nk - j0 : {mr};{chr(10)}"}                    for (int64_t e0 = 0; e0 < {EP}; e0 += {qt}) {{
{_by_rows(rem, "uol_dv_tile{r}(" + str(BQ) + ", &st[j0][0], " + gorows + " + e0, &dva[j0][e0]);", mr, "                        ")}
                    }}
                    for (int64_t d0 = 0; d0 < {DP}; d0 += {qt}) {{
{_by_rows(rem, "uol_dk_tile{r}(" + str(BQ) + ", &dt[j0][0], " + qrows + " + d0, &dka[j0][d0]);", mr, "                        ")}
                    }}
                }}
                for (int64_t i0 = 0; i0 < {full}; i0 += {mr})  /* dQ += dS K */
                    for (int64_t d0 = 0; d0 < {DP}; d0 += {qt})
                        uol_dq_tile{mr}(nk, &dt[0][i0], kb0 + d0, dq + (q0 + i0) * {DP} + d0);{tail}
            }}
            for (int64_t jj = 0; jj < nk; ++jj) {{
                for (int64_t d = 0; d < {D}; ++d) {DK}[(n * {T} + k0 + jj) * {D} + d] = dka[jj][d];
                for (int64_t e = 0; e < {E}; ++e) {DV}[(n * {T} + k0 + jj) * {E} + e] = dva[jj][e];
            }}
        }}""", op.stmts[-1].line)
    if owned:
        w.emit(f"""        for (int64_t i = 0; i < {S}; ++i)  /* the slice's dQ, written once */
            for (int64_t d = 0; d < {D}; ++d) {DQ}[(n * {S} + i) * {D} + d] = dq[i * {DP} + d];
        }}
    }}
    free(scratch);
}}""", op.stmts[-1].line)
        return
    w.emit(f"""        #pragma omp for
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


def _by_rows(rem: int, call: str, mr: int, pad: str) -> str:
    """C text calling the micro-kernels of `call` ({r}: the tile's rows) on whole tiles of `mr`
    rows, and on the one short tile of `rem` rows (the last keys) where there is one."""
    if not rem:
        return pad + call.format(r=mr)
    return (f"{pad}if (rows == {mr}) {call.format(r=mr)}\n"
            f"{pad}else {call.format(r=rem)}")
