/* layers/cellkern.h - the recurrent cells' per-step kernels (cells.h), included once per CPU path
 * by cells.c, cells_avx2.c and cells_avx512.c after that path's target pragma, so that cellmath.h's
 * vexp, vsigm and vtanh are built for the same target and inline into every gate vector (a call
 * per vector passed 64-byte vectors through memory: the forward cell 2x slower). V(name) names the
 * path's copy, CELL_TABLE its table. a*b+c is contracted to FMA where the path has it (-std=c11
 * turns contraction off; it makes the cell 1.4x faster), as the native builds did before: the
 * generic path has no FMA, so its cells round differently from the AVX2 and AVX-512 paths, which
 * agree with each other bit for bit: every path runs vector code on a row's lanes below H - H mod
 * VW (16) and libm on the rest, whatever its vector width VL (cellmath.h), and a lane's operations
 * do not depend on VL. No include guard. */
#include "layers/cells.h"
#include "layers/cellmath.h"

#if defined(__GNUC__) && !defined(__clang__)
#define CELL_ATTR __attribute__((optimize("fp-contract=fast")))
#else
#define CELL_ATTR
#endif

/* ---- LSTM ---- */

/* One step forward for B rows; gt (B,4H) holds pre-activations less the bias bs (4H) on entry,
 * activations on exit; cp = c_{t-1} (zeros at t = 0).
 *   i = sigm(.), f = sigm(.), g = tanh(.), o = sigm(.)
 *   c_t = f c_{t-1} + i g;   h_t = o tanh(c_t)
 * Whole vectors first, the last H mod 16 lanes of a row in scalar code (libm). */
CELL_ATTR
static void V(lstm_fwd)(int B, int H, float *gt, const float *bs, const float *cp, float *c, float *tc, float *h)
{
        for (int b = 0; b < B; b++) {
                float *gi = gt + (size_t)b * 4 * H, *gf = gi + H, *gg = gf + H, *go = gg + H;
                size_t r = (size_t)b * H;
                int j = 0;
                for (; j < H - H % VW; j += VL) {
                        vec vi = ld(gi + j) + ld(bs + j), vf = ld(gf + j) + ld(bs + H + j);
                        vec vg = ld(gg + j) + ld(bs + 2 * H + j), vo = ld(go + j) + ld(bs + 3 * H + j);
                        vi = vsigm(&vi); vf = vsigm(&vf); vg = vtanh(&vg); vo = vsigm(&vo);
                        vec vc = vf * ld(cp + r + j) + vi * vg;
                        vec vt = vtanh(&vc), vh = vo * vt;
                        st(gi + j, &vi); st(gf + j, &vf); st(gg + j, &vg); st(go + j, &vo);
                        st(c + r + j, &vc); st(tc + r + j, &vt); st(h + r + j, &vh);
                }
                for (; j < H; j++) {
                        float i = sigmf(gi[j] + bs[j]), f = sigmf(gf[j] + bs[H + j]);
                        float g = tanhf(gg[j] + bs[2 * H + j]), o = sigmf(go[j] + bs[3 * H + j]);
                        gi[j] = i; gf[j] = f; gg[j] = g; go[j] = o;
                        c[r + j] = f * cp[r + j] + i * g;
                        tc[r + j] = tanhf(c[r + j]);
                        h[r + j] = o * tc[r + j];
                }
        }
}

/* One step backward. dh (B,H) = dL/dh_t (from above and from step t+1); dc (B,H) = dL/dc_t from
 * step t+1 on entry, dL/dc_{t-1} = dc_t f on exit; cp = c_{t-1} (zeros at t = 0).
 *   dc_t = dc + dh o (1 - tanh^2 c_t)
 *   d(pre i) = dc_t g i(1-i)      d(pre f) = dc_t c_{t-1} f(1-f)
 *   d(pre g) = dc_t i (1-g^2)     d(pre o) = dh tanh(c_t) o(1-o)
 * gt (B,4H): activations in, d(pre-activation) out; db (4H) += its column sums. */
CELL_ATTR
static void V(lstm_bwd)(int B, int H, float *gt, const float *cp, const float *tc, const float *dh, float *dc, float *db)
{
        const vec one = vset(1.0f);
        for (int b = 0; b < B; b++) {
                float *gi = gt + (size_t)b * 4 * H, *gf = gi + H, *gg = gf + H, *go = gg + H;
                size_t r = (size_t)b * H;
                int j = 0;
                for (; j < H - H % VW; j += VL) {
                        vec vi = ld(gi + j), vf = ld(gf + j), vg = ld(gg + j), vo = ld(go + j);
                        vec vt = ld(tc + r + j), vdh = ld(dh + r + j);
                        vec vc = ld(dc + r + j) + vdh * vo * (one - vt * vt);
                        vec di = vc * vg * vi * (one - vi), df = vc * ld(cp + r + j) * vf * (one - vf);
                        vec dg = vc * vi * (one - vg * vg), dO = vdh * vt * vo * (one - vo), dcp = vc * vf;
                        st(gi + j, &di); st(gf + j, &df); st(gg + j, &dg); st(go + j, &dO);
                        st(dc + r + j, &dcp);
                        di += ld(db + j); df += ld(db + H + j); dg += ld(db + 2 * H + j); dO += ld(db + 3 * H + j);
                        st(db + j, &di); st(db + H + j, &df); st(db + 2 * H + j, &dg); st(db + 3 * H + j, &dO);
                }
                for (; j < H; j++) {
                        float i = gi[j], f = gf[j], g = gg[j], o = go[j], t = tc[r + j], d = dh[r + j];
                        float vc = dc[r + j] + d * o * (1 - t * t);
                        gi[j] = vc * g * i * (1 - i);
                        gf[j] = vc * cp[r + j] * f * (1 - f);
                        gg[j] = vc * i * (1 - g * g);
                        go[j] = d * t * o * (1 - o);
                        dc[r + j] = vc * f;
                        db[j] += gi[j]; db[H + j] += gf[j]; db[2 * H + j] += gg[j]; db[3 * H + j] += go[j];
                }
        }
}

/* ---- GRU ---- */

/* One step forward for B rows. at (B,3H): x W_ih^T in, r, z, n out; gh (B,3H) = h_{t-1} W_hh^T,
 * bih, bhh (3H), hp = h_{t-1} (all zeros where absent). hn (B,H) = gh_n + b_hn is kept for dr.
 * Whole vectors first, the last H mod 16 lanes of a row in scalar code (libm). */
CELL_ATTR
static void V(gru_fwd)(int B, int H, float *at, const float *gh, const float *bih, const float *bhh,
                     const float *hp, float *hn, float *h)
{
        for (int b = 0; b < B; b++) {
                float *ar = at + (size_t)b * 3 * H, *az = ar + H, *an = az + H;
                const float *hr = gh + (size_t)b * 3 * H, *hz = hr + H, *hh = hz + H;
                size_t r = (size_t)b * H;
                int j = 0;
                for (; j < H - H % VW; j += VL) {
                        vec vr = ld(ar + j) + ld(bih + j) + ld(hr + j) + ld(bhh + j);
                        vec vz = ld(az + j) + ld(bih + H + j) + ld(hz + j) + ld(bhh + H + j);
                        vec vh = ld(hh + j) + ld(bhh + 2 * H + j);
                        vr = vsigm(&vr);
                        vz = vsigm(&vz);
                        vec vn = ld(an + j) + ld(bih + 2 * H + j) + vr * vh;
                        vn = vtanh(&vn);
                        vec out = vn + vz * (ld(hp + r + j) - vn);
                        st(ar + j, &vr); st(az + j, &vz); st(an + j, &vn);
                        st(hn + r + j, &vh); st(h + r + j, &out);
                }
                for (; j < H; j++) {
                        float rr = sigmf(ar[j] + bih[j] + hr[j] + bhh[j]);
                        float z = sigmf(az[j] + bih[H + j] + hz[j] + bhh[H + j]);
                        float vh = hh[j] + bhh[2 * H + j];
                        float n = tanhf(an[j] + bih[2 * H + j] + rr * vh);
                        ar[j] = rr; az[j] = z; an[j] = n;
                        hn[r + j] = vh;
                        h[r + j] = n + z * (hp[r + j] - n);
                }
        }
}

/* One step backward. dh (B,H) = dL/dh_t. at (B,3H): r, z, n in; d(input-side pre) out:
 *   dn = dh (1 - z) (1 - n^2)        (d pre of n, input side)
 *   dz = dh (h_{t-1} - n) z (1 - z)
 *   dr = dn hn r (1 - r)
 * dgh (B,3H) = d(hidden-side pre) = (dr, dz, dn r). dhp (B,H) += dh z, the direct path to
 * h_{t-1}. dbi, dbh (3H) += column sums of the two. */
CELL_ATTR
static void V(gru_bwd)(int B, int H, float *at, const float *hn, const float *hp, const float *dh,
                     float *dgh, float *dhp, float *dbi, float *dbh)
{
        const vec one = vset(1.0f);
        for (int b = 0; b < B; b++) {
                float *ar = at + (size_t)b * 3 * H, *az = ar + H, *an = az + H;
                float *gr = dgh + (size_t)b * 3 * H, *gz = gr + H, *gn = gz + H;
                size_t r = (size_t)b * H;
                int j = 0;
                for (; j < H - H % VW; j += VL) {
                        vec vr = ld(ar + j), vz = ld(az + j), vn = ld(an + j), vdh = ld(dh + r + j);
                        vec dn = vdh * (one - vz) * (one - vn * vn);
                        vec dz = vdh * (ld(hp + r + j) - vn) * vz * (one - vz);
                        vec dr = dn * ld(hn + r + j) * vr * (one - vr);
                        vec dnh = dn * vr, dp = ld(dhp + r + j) + vdh * vz;
                        st(ar + j, &dr); st(az + j, &dz); st(an + j, &dn);
                        st(gr + j, &dr); st(gz + j, &dz); st(gn + j, &dnh);
                        st(dhp + r + j, &dp);
                        dnh += ld(dbh + 2 * H + j);
                        dn += ld(dbi + 2 * H + j);
                        dr += ld(dbi + j);
                        dz += ld(dbi + H + j);
                        st(dbi + j, &dr); st(dbi + H + j, &dz); st(dbi + 2 * H + j, &dn);
                        st(dbh + j, &dr); st(dbh + H + j, &dz); st(dbh + 2 * H + j, &dnh);
                }
                for (; j < H; j++) {
                        float rr = ar[j], z = az[j], n = an[j], d = dh[r + j];
                        float dn = d * (1 - z) * (1 - n * n);
                        float dz = d * (hp[r + j] - n) * z * (1 - z);
                        float dr = dn * hn[r + j] * rr * (1 - rr);
                        ar[j] = gr[j] = dr; az[j] = gz[j] = dz; an[j] = dn; gn[j] = dn * rr;
                        dhp[r + j] += d * z;
                        dbi[j] += dr; dbi[H + j] += dz; dbi[2 * H + j] += dn;
                        dbh[j] += dr; dbh[H + j] += dz; dbh[2 * H + j] += dn * rr;
                }
        }
}

/* ---- RNN ---- */

/* x = tanh x in place: whole vectors, then the last n mod 16 through a zero-padded one, so that an
 * element's value depends neither on n nor on where it lies (a row, a thread's rows, a shard's
 * units); libm's scalar tanhf, which the RNN ran before, took two thirds of its forward. */
CELL_ATTR
static void V(rnn_tanh)(size_t n, float *x)
{
        size_t i = 0;
        for (; i + VL <= n; i += VL) {
                vec v = ld(x + i);
                v = vtanh(&v);
                st(x + i, &v);
        }
        if (i < n) {
                float t[VL] = { 0 };
                memcpy(t, x + i, (n - i) * sizeof *t);
                vec v = ld(t);
                v = vtanh(&v);
                st(t, &v);
                memcpy(x + i, t, (n - i) * sizeof *t);
        }
}

const dt_cell_kern CELL_TABLE = { .lstm_fwd = V(lstm_fwd), .lstm_bwd = V(lstm_bwd), .gru_fwd = V(gru_fwd),
                                  .gru_bwd = V(gru_bwd), .rnn_tanh = V(rnn_tanh) };
