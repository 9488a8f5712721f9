//go:build amd64 && !purego

#include "textflag.h"

// The kernels below run the two sweeps of the one-row update (see update.go) over a prefix
// of n coordinates, n a positive multiple of 8 (sums) or 4 (sweep). They perform, lane by
// lane, exactly the
// operations of the Go loops they replace, in the same order, with no fused multiply-add,
// so that every path gives the same bits.

// func sumsAVX2(z, zhat, u, a *float64, n int, out *[36]float64)
//
// With w_k = z_k - u_k and lane j = k mod 8 (n a positive multiple of 8), out[j] = sum a_k z_k,
// out[8+j] = sum a_k w_k, out[16+j] = sum w_k^2, each in increasing k, and out[24:28] holds
// partial sums of zhat (their order does not matter: they only serve to detect a non-finite
// coordinate); out[32:36] are the four quantities summed over the lanes.
TEXT ·sumsAVX2(SB), NOSPLIT, $0-48
	MOVQ z+0(FP), SI
	MOVQ zhat+8(FP), BX
	MOVQ u+16(FP), DI
	MOVQ a+24(FP), R8
	MOVQ n+32(FP), CX
	MOVQ out+40(FP), R9
	VXORPD Y8, Y8, Y8    // az lanes 0-3
	VXORPD Y9, Y9, Y9    // az lanes 4-7
	VXORPD Y10, Y10, Y10 // aw
	VXORPD Y11, Y11, Y11
	VXORPD Y12, Y12, Y12 // ww
	VXORPD Y13, Y13, Y13
	VXORPD Y14, Y14, Y14 // zhat
	XORQ AX, AX          // k
sumsavx:
	VMOVUPD (SI)(AX*8), Y0
	VMOVUPD 32(SI)(AX*8), Y1
	VMOVUPD (R8)(AX*8), Y2
	VMOVUPD 32(R8)(AX*8), Y3
	VSUBPD (DI)(AX*8), Y0, Y4   // w = z - u
	VSUBPD 32(DI)(AX*8), Y1, Y5
	VMULPD Y0, Y2, Y0    // a z
	VADDPD Y0, Y8, Y8
	VMULPD Y1, Y3, Y1
	VADDPD Y1, Y9, Y9
	VMULPD Y4, Y2, Y2    // a w
	VADDPD Y2, Y10, Y10
	VMULPD Y5, Y3, Y3
	VADDPD Y3, Y11, Y11
	VMULPD Y4, Y4, Y4    // w w
	VADDPD Y4, Y12, Y12
	VMULPD Y5, Y5, Y5
	VADDPD Y5, Y13, Y13
	VADDPD (BX)(AX*8), Y14, Y14
	VADDPD 32(BX)(AX*8), Y14, Y14
	ADDQ $8, AX
	CMPQ AX, CX
	JB sumsavx
	VMOVUPD Y8, 0(R9)
	VMOVUPD Y9, 32(R9)
	VMOVUPD Y10, 64(R9)
	VMOVUPD Y11, 96(R9)
	VMOVUPD Y12, 128(R9)
	VMOVUPD Y13, 160(R9)
	VMOVUPD Y14, 192(R9)
	VXORPD Y15, Y15, Y15
	VMOVUPD Y15, 224(R9)
	// out[32:36]: each quantity reduced as ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)),
	// the order of the Go reduction in updateRankOne.
	VHADDPD Y9, Y8, Y0   // l0+l1, l4+l5, l2+l3, l6+l7
	VEXTRACTF128 $1, Y0, X1
	VADDPD X1, X0, X0    // (l0+l1)+(l2+l3), (l4+l5)+(l6+l7)
	VHADDPD X0, X0, X0
	VMOVSD X0, 256(R9)
	VHADDPD Y11, Y10, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPD X1, X0, X0
	VHADDPD X0, X0, X0
	VMOVSD X0, 264(R9)
	VHADDPD Y13, Y12, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPD X1, X0, X0
	VHADDPD X0, X0, X0
	VMOVSD X0, 272(R9)
	VHADDPD Y15, Y14, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPD X1, X0, X0
	VHADDPD X0, X0, X0
	VMOVSD X0, 280(R9)
	VZEROUPPER
	RET

// func sumsSSE2(z, zhat, u, a *float64, n int, out *[16]float64)
//
// Half of sumsAVX2: the lanes of coordinates k = 8i..8i+3 (i = 0, 1, ... while 8i < n); out[0:4]
// = a.z, out[4:8] = a.w, out[8:12] = w.w, out[12:16] zhat. Called at z and z+4 it gives all
// eight lanes.
TEXT ·sumsSSE2(SB), NOSPLIT, $0-48
	MOVQ z+0(FP), SI
	MOVQ zhat+8(FP), BX
	MOVQ u+16(FP), DI
	MOVQ a+24(FP), R8
	MOVQ n+32(FP), CX
	MOVQ out+40(FP), R9
	XORPD X0, X0  // az lanes 0,1
	XORPD X1, X1  // az lanes 2,3
	XORPD X2, X2  // aw
	XORPD X3, X3
	XORPD X4, X4  // ww
	XORPD X5, X5
	XORPD X6, X6  // zhat
	XORPD X7, X7
sumssse:
	MOVUPD (SI), X8
	MOVUPD 16(SI), X9
	MOVUPD (R8), X10
	MOVUPD 16(R8), X11
	MOVAPD X8, X12
	MOVAPD X9, X13
	MOVUPD (DI), X14
	SUBPD X14, X12 // w = z - u
	MOVUPD 16(DI), X14
	SUBPD X14, X13
	MULPD X10, X8  // a z
	ADDPD X8, X0
	MULPD X11, X9
	ADDPD X9, X1
	MULPD X12, X10 // a w
	ADDPD X10, X2
	MULPD X13, X11
	ADDPD X11, X3
	MULPD X12, X12 // w w
	ADDPD X12, X4
	MULPD X13, X13
	ADDPD X13, X5
	MOVUPD (BX), X14
	ADDPD X14, X6
	MOVUPD 16(BX), X15
	ADDPD X15, X7
	ADDQ $64, SI
	ADDQ $64, BX
	ADDQ $64, DI
	ADDQ $64, R8
	SUBQ $8, CX
	JNZ sumssse
	MOVUPD X0, 0(R9)
	MOVUPD X1, 16(R9)
	MOVUPD X2, 32(R9)
	MOVUPD X3, 48(R9)
	MOVUPD X4, 64(R9)
	MOVUPD X5, 80(R9)
	MOVUPD X6, 96(R9)
	MOVUPD X7, 112(R9)
	RET

// func sweepAVX2(z, zhat, u, a, eta *float64, n int, k *[8]float64)
//
// k = s, sc, inv, t, -t, sh, l. For each coordinate:
//
//	du = sc ((z - u) + s a) [+ l eta when eta != nil];  u += du;  h = zhat + du inv;  zhat = h;
//	z = (h - clamp(h, -t, t)) sh,
//
// which is (h - t) sh if h > t, (h + t) sh if h < -t (x - (-t) is x + t exactly) and
// h - h = +0 otherwise, the three cases of soft in update.go; a NaN h gives a NaN z there too.
// The max and min take h (not -t or t) on ties so that -0 and +0 come out as in soft.
TEXT ·sweepAVX2(SB), NOSPLIT, $0-56
	MOVQ z+0(FP), SI
	MOVQ zhat+8(FP), BX
	MOVQ u+16(FP), DI
	MOVQ a+24(FP), R8
	MOVQ eta+32(FP), R10
	MOVQ n+40(FP), CX
	MOVQ k+48(FP), R9
	VBROADCASTSD 0(R9), Y8   // s
	VBROADCASTSD 8(R9), Y9   // sc
	VBROADCASTSD 16(R9), Y10 // inv
	VBROADCASTSD 24(R9), Y11 // t
	VBROADCASTSD 32(R9), Y12 // -t
	VBROADCASTSD 40(R9), Y13 // sh
	VBROADCASTSD 48(R9), Y14 // l
	XORQ AX, AX              // k
	TESTQ R10, R10
	JZ sweepavx0
sweepavx:
	VMOVUPD (SI)(AX*8), Y0
	VMOVUPD (DI)(AX*8), Y1
	VSUBPD Y1, Y0, Y0           // z - u
	VMULPD (R8)(AX*8), Y8, Y2   // s a
	VADDPD Y2, Y0, Y0
	VMULPD Y9, Y0, Y0           // sc (...)
	VMULPD (R10)(AX*8), Y14, Y3 // l eta
	VADDPD Y3, Y0, Y0           // du
	VADDPD Y0, Y1, Y1           // u + du
	VMOVUPD Y1, (DI)(AX*8)
	VMULPD Y10, Y0, Y0          // du inv
	VADDPD (BX)(AX*8), Y0, Y4   // h = zhat + du inv
	VMOVUPD Y4, (BX)(AX*8)
	VMAXPD Y4, Y12, Y5          // -t > h ? -t : h
	VMINPD Y5, Y11, Y5          // t < . ? t : .   (clamp(h, -t, t), h itself on ties)
	VSUBPD Y5, Y4, Y5           // h - clamp: h - t, h + t or +0
	VMULPD Y13, Y5, Y5          // * sh
	VMOVUPD Y5, (SI)(AX*8)
	ADDQ $4, AX
	CMPQ AX, CX
	JB sweepavx
	VZEROUPPER
	RET
sweepavx0:
	VMOVUPD (SI)(AX*8), Y0
	VMOVUPD (DI)(AX*8), Y1
	VSUBPD Y1, Y0, Y0
	VMULPD (R8)(AX*8), Y8, Y2
	VADDPD Y2, Y0, Y0
	VMULPD Y9, Y0, Y0           // du
	VADDPD Y0, Y1, Y1
	VMOVUPD Y1, (DI)(AX*8)
	VMULPD Y10, Y0, Y0
	VADDPD (BX)(AX*8), Y0, Y4
	VMOVUPD Y4, (BX)(AX*8)
	VMAXPD Y4, Y12, Y5
	VMINPD Y5, Y11, Y5
	VSUBPD Y5, Y4, Y5
	VMULPD Y13, Y5, Y5
	VMOVUPD Y5, (SI)(AX*8)
	ADDQ $4, AX
	CMPQ AX, CX
	JB sweepavx0
	VZEROUPPER
	RET

// func sweepSSE2(z, zhat, u, a, eta *float64, n int, k *[8]float64)
TEXT ·sweepSSE2(SB), NOSPLIT, $0-56
	MOVQ z+0(FP), SI
	MOVQ zhat+8(FP), BX
	MOVQ u+16(FP), DI
	MOVQ a+24(FP), R8
	MOVQ eta+32(FP), R10
	MOVQ n+40(FP), CX
	MOVQ k+48(FP), R9
	MOVSD 0(R9), X8
	UNPCKLPD X8, X8   // s
	MOVSD 8(R9), X9
	UNPCKLPD X9, X9   // sc
	MOVSD 16(R9), X10
	UNPCKLPD X10, X10 // inv
	MOVSD 24(R9), X11
	UNPCKLPD X11, X11 // t
	MOVSD 32(R9), X12
	UNPCKLPD X12, X12 // -t
	MOVSD 40(R9), X13
	UNPCKLPD X13, X13 // sh
	MOVSD 48(R9), X14
	UNPCKLPD X14, X14 // l
	TESTQ R10, R10
	JZ sweepsse0
sweepsse:
	MOVUPD (SI), X0
	MOVUPD (DI), X1
	SUBPD X1, X0      // z - u
	MOVUPD (R8), X2
	MULPD X8, X2      // s a
	ADDPD X2, X0
	MULPD X9, X0      // sc (...)
	MOVUPD (R10), X3
	MULPD X14, X3     // l eta
	ADDPD X3, X0      // du
	ADDPD X0, X1      // u + du
	MOVUPD X1, (DI)
	MULPD X10, X0     // du inv
	MOVUPD (BX), X4
	ADDPD X0, X4      // h
	MOVUPD X4, (BX)
	MOVAPD X12, X6
	MAXPD X4, X6      // -t > h ? -t : h
	MOVAPD X11, X7
	MINPD X6, X7      // t < . ? t : .   (clamp(h, -t, t), h itself on ties)
	MOVAPD X4, X5
	SUBPD X7, X5      // h - clamp: h - t, h + t or +0
	MULPD X13, X5     // * sh
	MOVUPD X5, (SI)
	ADDQ $16, SI
	ADDQ $16, BX
	ADDQ $16, DI
	ADDQ $16, R8
	ADDQ $16, R10
	SUBQ $2, CX
	JNZ sweepsse
	RET
sweepsse0:
	MOVUPD (SI), X0
	MOVUPD (DI), X1
	SUBPD X1, X0
	MOVUPD (R8), X2
	MULPD X8, X2
	ADDPD X2, X0
	MULPD X9, X0      // du
	ADDPD X0, X1
	MOVUPD X1, (DI)
	MULPD X10, X0
	MOVUPD (BX), X4
	ADDPD X0, X4
	MOVUPD X4, (BX)
	MOVAPD X12, X6
	MAXPD X4, X6
	MOVAPD X11, X7
	MINPD X6, X7
	MOVAPD X4, X5
	SUBPD X7, X5
	MULPD X13, X5
	MOVUPD X5, (SI)
	ADDQ $16, SI
	ADDQ $16, BX
	ADDQ $16, DI
	ADDQ $16, R8
	SUBQ $2, CX
	JNZ sweepsse0
	RET

// func zerosAVX2(v *float64, n int) float64
//
// Returns the sum of v_k*0 over n coordinates (n a positive multiple of 16): 0 when all are
// finite, NaN otherwise. Four accumulators keep the dependency chains short.
TEXT ·zerosAVX2(SB), NOSPLIT, $0-24
	MOVQ v+0(FP), SI
	MOVQ n+8(FP), CX
	VXORPD Y0, Y0, Y0 // 0
	VXORPD Y1, Y1, Y1
	VXORPD Y2, Y2, Y2
	VXORPD Y5, Y5, Y5
	VXORPD Y6, Y6, Y6
	XORQ AX, AX
zerosavx:
	VMULPD (SI)(AX*8), Y0, Y3
	VADDPD Y3, Y1, Y1
	VMULPD 32(SI)(AX*8), Y0, Y4
	VADDPD Y4, Y2, Y2
	VMULPD 64(SI)(AX*8), Y0, Y3
	VADDPD Y3, Y5, Y5
	VMULPD 96(SI)(AX*8), Y0, Y4
	VADDPD Y4, Y6, Y6
	ADDQ $16, AX
	CMPQ AX, CX
	JB zerosavx
	VADDPD Y2, Y1, Y1
	VADDPD Y6, Y5, Y5
	VADDPD Y5, Y1, Y1
	VEXTRACTF128 $1, Y1, X2
	VADDPD X2, X1, X1
	VHADDPD X1, X1, X1
	VMOVSD X1, ret+16(FP)
	VZEROUPPER
	RET

// func zerosSSE2(v *float64, n int) float64
TEXT ·zerosSSE2(SB), NOSPLIT, $0-24
	MOVQ v+0(FP), SI
	MOVQ n+8(FP), CX
	XORPD X0, X0
	XORPD X1, X1
	XORPD X2, X2
	XORPD X5, X5
	XORPD X6, X6
zerossse:
	MOVUPD (SI), X3
	MULPD X0, X3
	ADDPD X3, X1
	MOVUPD 16(SI), X4
	MULPD X0, X4
	ADDPD X4, X2
	MOVUPD 32(SI), X3
	MULPD X0, X3
	ADDPD X3, X5
	MOVUPD 48(SI), X4
	MULPD X0, X4
	ADDPD X4, X6
	ADDQ $64, SI
	SUBQ $8, CX
	JNZ zerossse
	ADDPD X2, X1
	ADDPD X6, X5
	ADDPD X5, X1
	MOVAPD X1, X2
	UNPCKHPD X2, X2
	ADDSD X2, X1
	MOVSD X1, ret+16(FP)
	RET

// func rankOneAVX2(z, zhat, u, a *float64, n int, p *[16]float64) int
//
// The whole noiseless one-row update of updateRankOne (n a positive multiple of 8) in one
// call, with the operations of the Go code in the same order: the sums of sumsAVX2 and their
// reduction, the finiteness test, s, the clipping bound and, when it proves that no clipping
// is due, the sweep of sweepAVX2 (no noise). p = K, y, ||a||^2, ||a||, C, 2 lambda, 1/n, t,
// -t, sh, (n+8) sumMargin, termMargin, cmpMargin, sign mask, s (written here), and p[15]
// nonzero (an integer flag) when 2 lambda = sh = 1. It returns 0 when the update is done, 1
// when the token may be non-finite and 2 when the step may need clipping; in both of these
// cases nothing has been written but p[14].
TEXT ·rankOneAVX2(SB), NOSPLIT, $0-56
	MOVQ z+0(FP), SI
	MOVQ zhat+8(FP), BX
	MOVQ u+16(FP), DI
	MOVQ a+24(FP), R8
	MOVQ n+32(FP), CX
	MOVQ p+40(FP), R9
	VXORPD Y8, Y8, Y8
	VXORPD Y9, Y9, Y9
	VXORPD Y10, Y10, Y10
	VXORPD Y11, Y11, Y11
	VXORPD Y12, Y12, Y12
	VXORPD Y13, Y13, Y13
	VXORPD Y14, Y14, Y14
	VXORPD Y15, Y15, Y15
	XORQ AX, AX
r1sums:
	VMOVUPD (SI)(AX*8), Y0
	VMOVUPD 32(SI)(AX*8), Y1
	VMOVUPD (R8)(AX*8), Y2
	VMOVUPD 32(R8)(AX*8), Y3
	VSUBPD (DI)(AX*8), Y0, Y4
	VSUBPD 32(DI)(AX*8), Y1, Y5
	VMULPD Y0, Y2, Y0
	VADDPD Y0, Y8, Y8
	VMULPD Y1, Y3, Y1
	VADDPD Y1, Y9, Y9
	VMULPD Y4, Y2, Y2
	VADDPD Y2, Y10, Y10
	VMULPD Y5, Y3, Y3
	VADDPD Y3, Y11, Y11
	VMULPD Y4, Y4, Y4
	VADDPD Y4, Y12, Y12
	VMULPD Y5, Y5, Y5
	VADDPD Y5, Y13, Y13
	VADDPD (BX)(AX*8), Y14, Y14
	VADDPD 32(BX)(AX*8), Y14, Y14
	ADDQ $8, AX
	CMPQ AX, CX
	JB r1sums
	// X0 = a.z, X1 = a.w, X2 = ||w||^2, X3 = sum zhat, reduced as in sumsAVX2.
	VHADDPD Y9, Y8, Y0
	VEXTRACTF128 $1, Y0, X4
	VADDPD X4, X0, X0
	VHADDPD X0, X0, X0
	VHADDPD Y11, Y10, Y1
	VEXTRACTF128 $1, Y1, X4
	VADDPD X4, X1, X1
	VHADDPD X1, X1, X1
	VHADDPD Y13, Y12, Y2
	VEXTRACTF128 $1, Y2, X4
	VADDPD X4, X2, X2
	VHADDPD X2, X2, X2
	VHADDPD Y15, Y14, Y3
	VEXTRACTF128 $1, Y3, X4
	VADDPD X4, X3, X3
	VHADDPD X3, X3, X3
	// f = ww + zs; f - f == 0 unless something is not finite.
	VADDSD X3, X2, X4
	VSUBSD X4, X4, X4
	VXORPD X6, X6, X6
	VCMPSD $0, X6, X4, X7
	VMOVQ X7, DX
	TESTQ DX, DX
	JZ r1check
	// s = K (y - (a.z + a.w))
	VADDSD X1, X0, X4
	VMOVSD 8(R9), X5
	VSUBSD X4, X5, X5
	VMULSD 0(R9), X5, X5
	VMOVSD X5, 112(R9)
	// b = sqrt(ww) + |s| ||a||
	VSQRTSD X2, X2, X6
	VMOVSD 104(R9), X7
	VANDPD X7, X5, X7
	VMULSD 24(R9), X7, X7
	VADDSD X7, X6, X6
	// nn = ww + s (2 a.w + s ||a||^2), negatives to 0 (NaN kept: the max takes nn on ties
	// and NaN)
	VMULSD 16(R9), X5, X7
	VADDSD X1, X1, X8
	VADDSD X7, X8, X8
	VMULSD X8, X5, X8
	VADDSD X8, X2, X8
	VXORPD X9, X9, X9
	VMAXSD X8, X9, X8
	// bound = (sqrt(nn + ((n+8) sumMargin b) b) + termMargin b) cmpMargin
	VMULSD 80(R9), X6, X9
	VMULSD X6, X9, X9
	VADDSD X9, X8, X9
	VSQRTSD X9, X9, X9
	VMULSD 88(R9), X6, X10
	VADDSD X10, X9, X9
	VMULSD 96(R9), X9, X9
	VMOVSD 32(R9), X10
	VCMPSD $2, X10, X9, X11 // bound <= C
	VMOVQ X11, DX
	TESTQ DX, DX
	JZ r1clip
	// The sweep of sweepAVX2 without noise.
	VBROADCASTSD X5, Y8
	VBROADCASTSD 40(R9), Y9
	VBROADCASTSD 48(R9), Y10
	VBROADCASTSD 56(R9), Y11
	VBROADCASTSD 64(R9), Y12
	VBROADCASTSD 72(R9), Y13
	XORQ AX, AX
	MOVQ 120(R9), DX
	TESTQ DX, DX
	JNZ r1sweep1
r1sweep:
	VMOVUPD (SI)(AX*8), Y0
	VMOVUPD (DI)(AX*8), Y1
	VSUBPD Y1, Y0, Y0
	VMULPD (R8)(AX*8), Y8, Y2
	VADDPD Y2, Y0, Y0
	VMULPD Y9, Y0, Y0
	VADDPD Y0, Y1, Y1
	VMOVUPD Y1, (DI)(AX*8)
	VMULPD Y10, Y0, Y0
	VADDPD (BX)(AX*8), Y0, Y4
	VMOVUPD Y4, (BX)(AX*8)
	VMAXPD Y4, Y12, Y5
	VMINPD Y5, Y11, Y5
	VSUBPD Y5, Y4, Y5
	VMULPD Y13, Y5, Y5
	VMOVUPD Y5, (SI)(AX*8)
	ADDQ $4, AX
	CMPQ AX, CX
	JB r1sweep
	VZEROUPPER
	MOVQ $0, ret+48(FP)
	RET
r1sweep1:
	// 2 lambda = 1 and sh = 1 (classical ADMM, no L2 term): the multiplications by 1 are
	// exact and left out.
	VMOVUPD (SI)(AX*8), Y0
	VMOVUPD (DI)(AX*8), Y1
	VSUBPD Y1, Y0, Y0
	VMULPD (R8)(AX*8), Y8, Y2
	VADDPD Y2, Y0, Y0
	VADDPD Y0, Y1, Y1
	VMOVUPD Y1, (DI)(AX*8)
	VMULPD Y10, Y0, Y0
	VADDPD (BX)(AX*8), Y0, Y4
	VMOVUPD Y4, (BX)(AX*8)
	VMAXPD Y4, Y12, Y5
	VMINPD Y5, Y11, Y5
	VSUBPD Y5, Y4, Y5
	VMOVUPD Y5, (SI)(AX*8)
	VMOVUPD 32(SI)(AX*8), Y0
	VMOVUPD 32(DI)(AX*8), Y1
	VSUBPD Y1, Y0, Y0
	VMULPD 32(R8)(AX*8), Y8, Y2
	VADDPD Y2, Y0, Y0
	VADDPD Y0, Y1, Y1
	VMOVUPD Y1, 32(DI)(AX*8)
	VMULPD Y10, Y0, Y0
	VADDPD 32(BX)(AX*8), Y0, Y4
	VMOVUPD Y4, 32(BX)(AX*8)
	VMAXPD Y4, Y12, Y5
	VMINPD Y5, Y11, Y5
	VSUBPD Y5, Y4, Y5
	VMOVUPD Y5, 32(SI)(AX*8)
	ADDQ $8, AX
	CMPQ AX, CX
	JB r1sweep1
	VZEROUPPER
	MOVQ $0, ret+48(FP)
	RET
r1check:
	VZEROUPPER
	MOVQ $1, ret+48(FP)
	RET
r1clip:
	VZEROUPPER
	MOVQ $2, ret+48(FP)
	RET
