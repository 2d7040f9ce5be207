//go:build amd64 && !purego

#include "textflag.h"

// AVX2+FMA kernels. Lengths are in elements; the Go wrappers in
// kernels_amd64.go guarantee the preconditions stated for each function
// and handle the remainders.

// 32-byte constants: one float32 bit pattern broadcast to 8 lanes.
#define VCONST(name, bits) \
	DATA name<>+0(SB)/4, $bits \
	DATA name<>+4(SB)/4, $bits \
	DATA name<>+8(SB)/4, $bits \
	DATA name<>+12(SB)/4, $bits \
	DATA name<>+16(SB)/4, $bits \
	DATA name<>+20(SB)/4, $bits \
	DATA name<>+24(SB)/4, $bits \
	DATA name<>+28(SB)/4, $bits \
	GLOBL name<>(SB), RODATA|NOPTR, $32

VCONST(expE1, 0x3f317218)
VCONST(expE2, 0x3e75fdf0)
VCONST(expE3, 0x3d635847)
VCONST(expE4, 0x3c1d955b)
VCONST(expE5, 0x3aaec3ff)
VCONST(expE6, 0x39218489)
VCONST(expE7, 0x377fe5fe)
VCONST(expOne, 0x3f800000)
VCONST(expLo, 0xc2fc0000)
VCONST(expHi, 0x42fe0000)
VCONST(expMagic, 0x4b400000)
VCONST(expBias, 0x4b3fff81)
VCONST(absMask, 0x7fffffff)
VCONST(snapTol, 0x35000000)
VCONST(maxFloat, 0x7f7fffff)

// tanh (tanh32 in kernels.go): the Taylor coefficients t3 … t15, the
// polynomial's bound 0.55, the bound 9 beyond which tanh is 1, 2·log2e
// and 2.
VCONST(tanhT3, 0xbeaaaaab)
VCONST(tanhT5, 0x3e088889)
VCONST(tanhT7, 0xbd5d0dd1)
VCONST(tanhT9, 0x3cb327a4)
VCONST(tanhT11, 0xbc11371b)
VCONST(tanhT13, 0x3b6b69e8)
VCONST(tanhT15, 0xbabed1b2)
VCONST(tanhPolyMax, 0x3f0ccccd)
VCONST(tanhOneMin, 0x41100000)
VCONST(twoLog2E, 0x4038aa3b)
VCONST(two, 0x40000000)
VCONST(negInf, 0xff800000)

// laneIndex is the int32 lanes 0 … 7.
DATA laneIndex<>+0(SB)/4, $0
DATA laneIndex<>+4(SB)/4, $1
DATA laneIndex<>+8(SB)/4, $2
DATA laneIndex<>+12(SB)/4, $3
DATA laneIndex<>+16(SB)/4, $4
DATA laneIndex<>+20(SB)/4, $5
DATA laneIndex<>+24(SB)/4, $6
DATA laneIndex<>+28(SB)/4, $7
GLOBL laneIndex<>(SB), RODATA|NOPTR, $32

// laneBit is the int32 lanes 1, 2, 4, … 128: lane e's bit of a byte.
DATA laneBit<>+0(SB)/4, $1
DATA laneBit<>+4(SB)/4, $2
DATA laneBit<>+8(SB)/4, $4
DATA laneBit<>+12(SB)/4, $8
DATA laneBit<>+16(SB)/4, $16
DATA laneBit<>+20(SB)/4, $32
DATA laneBit<>+24(SB)/4, $64
DATA laneBit<>+28(SB)/4, $128
GLOBL laneBit<>(SB), RODATA|NOPTR, $32

// EXP2(X, T, F, Q, M): X = 2^X lane-wise, as exp2 in kernels.go (0 below
// −126, clamped above 127, NaN propagates). T, F, Q, M are clobbered.
#define EXP2(X, T, F, Q, M) \
	VCMPPS       $1, expLo<>(SB), X, M \
	VMOVUPS      expHi<>(SB), T \
	VMINPS       X, T, X \
	VADDPS       expMagic<>(SB), X, T \
	VSUBPS       expMagic<>(SB), T, F \
	VSUBPS       F, X, F \
	VMOVUPS      expE7<>(SB), Q \
	VFMADD213PS  expE6<>(SB), F, Q \
	VFMADD213PS  expE5<>(SB), F, Q \
	VFMADD213PS  expE4<>(SB), F, Q \
	VFMADD213PS  expE3<>(SB), F, Q \
	VFMADD213PS  expE2<>(SB), F, Q \
	VFMADD213PS  expE1<>(SB), F, Q \
	VFMADD213PS  expOne<>(SB), F, Q \
	VPSUBD       expBias<>(SB), T, T \
	VPSLLD       $23, T, T \
	VMULPS       T, Q, Q \
	VANDNPS      Q, M, X

// HSUM(Y, X, T): X's low lane = the sum of Y's 8 lanes (X is Y's low half).
#define HSUM(Y, X, TX) \
	VEXTRACTF128 $1, Y, TX \
	VADDPS       TX, X, X \
	VHADDPS      X, X, X \
	VHADDPS      X, X, X

// HSUM4(A, B, C, D, XA, XB): XA = the sums of A's, B's, C's and D's 8 lanes,
// in that order (XA, XB are A's and B's low halves). C and XB are clobbered.
#define HSUM4(A, B, C, D, XA, XB) \
	VHADDPS      B, A, A \
	VHADDPS      D, C, C \
	VHADDPS      C, A, A \
	VEXTRACTF128 $1, A, XB \
	VADDPS       XB, XA, XA

// DOT2(B, YB, S0, S1): YB = the 8 floats at B+AX; S0 += Y8·YB, S1 += Y9·YB
// (Y8, Y9: the same 8 floats of two rows of a).
#define DOT2(B, YB, S0, S1) \
	VMOVUPS     (B)(AX*1), YB \
	VFMADD231PS YB, Y8, S0 \
	VFMADD231PS YB, Y9, S1

// ACC2(A, YA, C0, C1): YA = element AX of the row of a at A, broadcast;
// C0 += YA·Y8, C1 += YA·Y9 (Y8, Y9: 16 floats of row AX of b).
#define ACC2(A, YA, C0, C1) \
	VBROADCASTSS (A)(AX*4), YA \
	VFMADD231PS  Y8, YA, C0 \
	VFMADD231PS  Y9, YA, C1

// ACCNEXT: BX to the next row of b, AX to the next element of the rows of
// a; the flags compare AX with k (R13).
#define ACCNEXT \
	ADDQ R11, BX \
	INCQ AX \
	CMPQ AX, R13

// The row kernels (expRow*, dsRow*) rewrite the row at DI in place; CX
// holds its length n, a multiple of 8, and AX walks it 32 bytes at a time
// with the 8 floats at AX in Y0.
//
// ROWLOOP(loop, done) turns CX into bytes, goes to done when n is 0 and
// otherwise opens the loop at loop, loading Y0.
#define ROWLOOP(loop, done) \
	SHLQ    $2, CX \
	XORQ    AX, AX \
	CMPQ    CX, $0 \
	JEQ     done \
loop: \
	VMOVUPS (DI)(AX*1), Y0

// ROWNEXT(loop) stores Y0 back and goes round again while floats are left.
#define ROWNEXT(loop) \
	VMOVUPS Y0, (DI)(AX*1) \
	ADDQ    $32, AX \
	CMPQ    AX, CX \
	JLT     loop

// func cpuid(eaxArg, ecxArg uint32) (eax, ebx, ecx, edx uint32)
TEXT ·cpuid(SB), NOSPLIT, $0-24
	MOVL eaxArg+0(FP), AX
	MOVL ecxArg+4(FP), CX
	CPUID
	MOVL AX, eax+8(FP)
	MOVL BX, ebx+12(FP)
	MOVL CX, ecx+16(FP)
	MOVL DX, edx+20(FP)
	RET

// func xgetbv() (eax, edx uint32)
TEXT ·xgetbv(SB), NOSPLIT, $0-8
	MOVL $0, CX
	XGETBV
	MOVL AX, eax+0(FP)
	MOVL DX, edx+4(FP)
	RET

// func dotTileAVX(dst *float32, ldd int, a *float32, lda, na int, b *float32, ldb, nb, n int)
//
// dst[i*ldd+j] = Σ_{t<n} a[i*lda+t]·b[j*ldb+t] for i < na, j < nb.
// na > 0 even, nb > 0 a multiple of 4, n > 0 a multiple of 8. Blocks of
// 2 rows × 4 columns: 8 accumulators, reduced horizontally at the end.
TEXT ·dotTileAVX(SB), NOSPLIT, $0-72
	MOVQ dst+0(FP), R15
	MOVQ ldd+8(FP), R10
	SHLQ $2, R10
	MOVQ a+16(FP), SI
	MOVQ lda+24(FP), CX
	SHLQ $2, CX
	ADDQ SI, CX
	MOVQ na+32(FP), R14
	MOVQ ldb+48(FP), R11
	SHLQ $2, R11
	MOVQ n+64(FP), R13
	SHLQ $2, R13

dotRows:
	MOVQ b+40(FP), BX
	MOVQ nb+56(FP), R12
	MOVQ R15, DI

dotCols:
	LEAQ   (BX)(R11*1), DX
	LEAQ   (DX)(R11*1), R8
	LEAQ   (R8)(R11*1), R9
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	XORQ   AX, AX

dotInner:
	VMOVUPS (SI)(AX*1), Y8
	VMOVUPS (CX)(AX*1), Y9
	DOT2(BX, Y10, Y0, Y4)
	DOT2(DX, Y11, Y1, Y5)
	DOT2(R8, Y12, Y2, Y6)
	DOT2(R9, Y13, Y3, Y7)
	ADDQ    $32, AX
	CMPQ    AX, R13
	JLT     dotInner

	HSUM4(Y0, Y1, Y2, Y3, X0, X1)
	VMOVUPS X0, (DI)
	HSUM4(Y4, Y5, Y6, Y7, X4, X5)
	VMOVUPS X4, (DI)(R10*1)

	LEAQ (R9)(R11*1), BX
	ADDQ $16, DI
	SUBQ $4, R12
	JNZ  dotCols

	MOVQ lda+24(FP), AX
	SHLQ $3, AX
	ADDQ AX, SI
	ADDQ AX, CX
	LEAQ (R15)(R10*2), R15
	SUBQ $2, R14
	JNZ  dotRows
	VZEROUPPER
	RET

// func accTileAVX(c *float32, ldc int, a *float32, lda, m, k int, b *float32, ldb, w int)
//
// c[i*ldc+x] += Σ_{j<k} a[i*lda+j]·b[j*ldb+x] for i < m, x < w.
// m > 0, k > 0, w > 0 a multiple of 8. Blocks of 4 rows × 16 columns (8
// accumulators) with an 8-column tail; the last m%4 rows one at a time.
TEXT ·accTileAVX(SB), NOSPLIT, $0-72
	MOVQ ldc+8(FP), R8
	SHLQ $2, R8
	MOVQ k+40(FP), R13
	MOVQ ldb+56(FP), R11
	SHLQ $2, R11
	XORQ R14, R14

	// Each block of rows starts at row R14: SI = its row of a, DI its row
	// of c, R15 = b; 4 rows while at least 4 are left, then 1 at a time.
accRows:
	MOVQ  m+32(FP), DX
	SUBQ  R14, DX
	JLE   accDone
	MOVQ  lda+24(FP), R9
	SHLQ  $2, R9
	MOVQ  R9, AX
	IMULQ R14, AX
	MOVQ  a+16(FP), SI
	ADDQ  AX, SI
	MOVQ  R14, AX
	IMULQ R8, AX
	MOVQ  c+0(FP), DI
	ADDQ  AX, DI
	MOVQ  b+48(FP), R15
	CMPQ  DX, $4
	JLT   accRow1
	LEAQ  (SI)(R9*1), CX
	LEAQ  (CX)(R9*1), R10
	LEAQ  (R10)(R9*1), R12
	LEAQ  (DI)(R8*2), DX
	MOVQ  w+64(FP), R9

acc4Cols16:
	CMPQ    R9, $16
	JLT     acc4Cols8
	VMOVUPS (DI), Y0
	VMOVUPS 32(DI), Y1
	VMOVUPS (DI)(R8*1), Y2
	VMOVUPS 32(DI)(R8*1), Y3
	VMOVUPS (DX), Y4
	VMOVUPS 32(DX), Y5
	VMOVUPS (DX)(R8*1), Y6
	VMOVUPS 32(DX)(R8*1), Y7
	MOVQ    R15, BX
	XORQ    AX, AX

acc4Inner16:
	VMOVUPS (BX), Y8
	VMOVUPS 32(BX), Y9
	ACC2(SI, Y10, Y0, Y1)
	ACC2(CX, Y11, Y2, Y3)
	ACC2(R10, Y12, Y4, Y5)
	ACC2(R12, Y13, Y6, Y7)
	ACCNEXT
	JLT     acc4Inner16

	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	VMOVUPS Y2, (DI)(R8*1)
	VMOVUPS Y3, 32(DI)(R8*1)
	VMOVUPS Y4, (DX)
	VMOVUPS Y5, 32(DX)
	VMOVUPS Y6, (DX)(R8*1)
	VMOVUPS Y7, 32(DX)(R8*1)
	ADDQ    $64, DI
	ADDQ    $64, DX
	ADDQ    $64, R15
	SUBQ    $16, R9
	JMP     acc4Cols16

acc4Cols8:
	CMPQ    R9, $0
	JEQ     acc4Next
	VMOVUPS (DI), Y0
	VMOVUPS (DI)(R8*1), Y2
	VMOVUPS (DX), Y4
	VMOVUPS (DX)(R8*1), Y6
	MOVQ    R15, BX
	XORQ    AX, AX

acc4Inner8:
	VMOVUPS      (BX), Y8
	VBROADCASTSS (SI)(AX*4), Y10
	VFMADD231PS  Y8, Y10, Y0
	VBROADCASTSS (CX)(AX*4), Y11
	VFMADD231PS  Y8, Y11, Y2
	VBROADCASTSS (R10)(AX*4), Y12
	VFMADD231PS  Y8, Y12, Y4
	VBROADCASTSS (R12)(AX*4), Y13
	VFMADD231PS  Y8, Y13, Y6
	ACCNEXT
	JLT          acc4Inner8

	VMOVUPS Y0, (DI)
	VMOVUPS Y2, (DI)(R8*1)
	VMOVUPS Y4, (DX)
	VMOVUPS Y6, (DX)(R8*1)

acc4Next:
	ADDQ $4, R14
	JMP  accRows

accRow1:
	MOVQ w+64(FP), R9

acc1Cols:
	CMPQ    R9, $0
	JEQ     acc1Next
	VMOVUPS (DI), Y0
	VXORPS  Y1, Y1, Y1
	MOVQ    R15, BX
	XORQ    AX, AX

acc1Inner:
	VBROADCASTSS (SI)(AX*4), Y10
	VFMADD231PS  (BX), Y10, Y0
	ACCNEXT
	JGE          acc1Store
	VBROADCASTSS (SI)(AX*4), Y11
	VFMADD231PS  (BX), Y11, Y1
	ACCNEXT
	JLT          acc1Inner

acc1Store:
	VADDPS  Y1, Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ    $32, DI
	ADDQ    $32, R15
	SUBQ    $8, R9
	JMP     acc1Cols

acc1Next:
	INCQ R14
	JMP  accRows

accDone:
	VZEROUPPER
	RET

// func expRowAVX(r *float32, n int, c, sub float32) float32
//
// r[j] = 2^(r[j]·c − sub) for j < n (a multiple of 8); returns Σ r[j].
TEXT ·expRowAVX(SB), NOSPLIT, $0-28
	MOVQ         r+0(FP), DI
	MOVQ         n+8(FP), CX
	VBROADCASTSS c+16(FP), Y14
	VBROADCASTSS sub+20(FP), Y15
	VXORPS       Y13, Y13, Y13
	ROWLOOP(expLoop, expDone)
	VMULPS       Y14, Y0, Y0
	VSUBPS       Y15, Y0, Y0
	EXP2(Y0, Y1, Y2, Y3, Y4)
	VADDPS       Y0, Y13, Y13
	ROWNEXT(expLoop)

expDone:
	HSUM(Y13, X13, X12)
	VMOVSS X13, ret+24(FP)
	VZEROUPPER
	RET

// func probRowAVX(r, sub *float32, n int, c float32)
//
// r[j] = 2^snap(r[j]·c − sub[j], sub[j]) for j < n (a multiple of 8), as
// probRow in kernels.go: the exponent is 0 where it is > 0 or within
// min(2^-21·|sub|, MaxFloat32) of 0.
TEXT ·probRowAVX(SB), NOSPLIT, $0-28
	MOVQ         r+0(FP), DI
	MOVQ         sub+8(FP), SI
	MOVQ         n+16(FP), CX
	VBROADCASTSS c+24(FP), Y14
	VXORPS       Y13, Y13, Y13
	ROWLOOP(expVecLoop, expVecDone)
	VMOVUPS      (SI)(AX*1), Y5
	VMULPS       Y14, Y0, Y0
	VSUBPS       Y5, Y0, Y0
	VANDPS       absMask<>(SB), Y5, Y5
	VMULPS       snapTol<>(SB), Y5, Y5
	VMINPS       maxFloat<>(SB), Y5, Y5
	VANDPS       absMask<>(SB), Y0, Y6
	VCMPPS       $2, Y5, Y6, Y6
	VCMPPS       $14, Y13, Y0, Y7
	VORPS        Y7, Y6, Y6
	VANDNPS      Y0, Y6, Y0
	EXP2(Y0, Y1, Y2, Y3, Y4)
	ROWNEXT(expVecLoop)

expVecDone:
	VZEROUPPER
	RET

// func dsRowAVX(p, dp *float32, n int, d float32)
//
// dp[j] = p[j]·(dp[j] − d) for j < n (a multiple of 8).
TEXT ·dsRowAVX(SB), NOSPLIT, $0-28
	MOVQ         p+0(FP), SI
	MOVQ         dp+8(FP), DI
	MOVQ         n+16(FP), CX
	VBROADCASTSS d+24(FP), Y15
	ROWLOOP(dsLoop, dsDone)
	VSUBPS       Y15, Y0, Y0
	VMULPS       (SI)(AX*1), Y0, Y0
	ROWNEXT(dsLoop)

dsDone:
	VZEROUPPER
	RET

// func dsRowVecAVX(p, dp, d *float32, n int)
//
// dp[j] = p[j]·(dp[j] − d[j]) for j < n (a multiple of 8).
TEXT ·dsRowVecAVX(SB), NOSPLIT, $0-32
	MOVQ p+0(FP), SI
	MOVQ dp+8(FP), DI
	MOVQ d+16(FP), DX
	MOVQ n+24(FP), CX
	ROWLOOP(dsVecLoop, dsVecDone)
	VSUBPS (DX)(AX*1), Y0, Y0
	VMULPS (SI)(AX*1), Y0, Y0
	ROWNEXT(dsVecLoop)

dsVecDone:
	VZEROUPPER
	RET

// func rowMaxMinAVX(r *float32, n int) (mx, mn float32)
//
// The largest and smallest of r[:n] (n > 0 a multiple of 8).
TEXT ·rowMaxMinAVX(SB), NOSPLIT, $0-24
	MOVQ    r+0(FP), DI
	MOVQ    n+8(FP), CX
	SHLQ    $2, CX
	VMOVUPS (DI), Y0
	VMOVAPS Y0, Y1
	MOVQ    $32, AX

mmLoop:
	CMPQ    AX, CX
	JGE     mmDone
	VMOVUPS (DI)(AX*1), Y2
	VMAXPS  Y2, Y0, Y0
	VMINPS  Y2, Y1, Y1
	ADDQ    $32, AX
	JMP     mmLoop

mmDone:
	VEXTRACTF128 $1, Y0, X2
	VMAXPS       X2, X0, X0
	VPERMILPS    $0x4e, X0, X2
	VMAXPS       X2, X0, X0
	VPERMILPS    $0xb1, X0, X2
	VMAXPS       X2, X0, X0
	VEXTRACTF128 $1, Y1, X3
	VMINPS       X3, X1, X1
	VPERMILPS    $0x4e, X1, X3
	VMINPS       X3, X1, X1
	VPERMILPS    $0xb1, X1, X3
	VMINPS       X3, X1, X1
	VMOVSS       X0, mx+16(FP)
	VMOVSS       X1, mn+20(FP)
	VZEROUPPER
	RET

// The distance kernels (capRowAVX, biasRowAVX) share the ROWLOOP layout
// of the row kernels and these registers: Y10 the lanes' running maximum
// of the results, Y11 8·step, Y12 the int32 distances off + j·step of the
// 8 elements at AX, Y13 slope.
//
// DISTINIT(OFF, STEP) sets Y10 to −Inf and Y11, Y12 for the row's first 8
// elements (Y0 clobbered).
#define DISTINIT(OFF, STEP) \
	VMOVUPS      negInf<>(SB), Y10 \
	VPBROADCASTD OFF, Y12 \
	VPBROADCASTD STEP, Y11 \
	VPMULLD      laneIndex<>(SB), Y11, Y0 \
	VPADDD       Y0, Y12, Y12 \
	VPSLLD       $3, Y11, Y11

// DIST(X, T): X −= slope·|Y12| (the int32 distances rounded to float32),
// then Y12 moves on to the next 8 elements' distances. T is clobbered.
#define DIST(X, T) \
	VPABSD       Y12, T \
	VCVTDQ2PS    T, T \
	VFNMADD231PS Y13, T, X \
	VPADDD       Y11, Y12, Y12

// MAXRET(RET): RET = the largest of Y10's lanes, as rowMaxMinAVX reduces
// (X0 clobbered).
#define MAXRET(RET) \
	VEXTRACTF128 $1, Y10, X0 \
	VMAXPS       X0, X10, X10 \
	VPERMILPS    $0x4e, X10, X0 \
	VMAXPS       X0, X10, X10 \
	VPERMILPS    $0xb1, X10, X0 \
	VMAXPS       X0, X10, X10 \
	VMOVSS       X10, RET

// TANHPOLY(A, Z, P): P = a·z·p(z) + a, z = a² (Z clobbered): tanh a for
// a < 0.55 (see tanh32 in kernels.go).
#define TANHPOLY(A, Z, P) \
	VMULPS      A, A, Z \
	VMOVUPS     tanhT15<>(SB), P \
	VFMADD213PS tanhT13<>(SB), Z, P \
	VFMADD213PS tanhT11<>(SB), Z, P \
	VFMADD213PS tanhT9<>(SB), Z, P \
	VFMADD213PS tanhT7<>(SB), Z, P \
	VFMADD213PS tanhT5<>(SB), Z, P \
	VFMADD213PS tanhT3<>(SB), Z, P \
	VMULPS      A, Z, Z \
	VFMADD213PS A, Z, P

// TANHEXP(A, E): E = 1 − 2/(2^(2a·log2e) + 1), or 1 where a ≥ 9: tanh a
// for 0.55 ≤ a (NaN stays NaN). The exponential is EXP2's without its
// underflow test, the argument being ≥ 0. Y7, Y8 and Y9 are clobbered.
#define TANHEXP(A, E) \
	VMULPS       twoLog2E<>(SB), A, E \
	VMOVUPS      expHi<>(SB), Y7 \
	VMINPS       E, Y7, E \
	VADDPS       expMagic<>(SB), E, Y7 \
	VSUBPS       expMagic<>(SB), Y7, Y8 \
	VSUBPS       Y8, E, Y8 \
	VMOVUPS      expE7<>(SB), Y9 \
	VFMADD213PS  expE6<>(SB), Y8, Y9 \
	VFMADD213PS  expE5<>(SB), Y8, Y9 \
	VFMADD213PS  expE4<>(SB), Y8, Y9 \
	VFMADD213PS  expE3<>(SB), Y8, Y9 \
	VFMADD213PS  expE2<>(SB), Y8, Y9 \
	VFMADD213PS  expE1<>(SB), Y8, Y9 \
	VFMADD213PS  expOne<>(SB), Y8, Y9 \
	VPSUBD       expBias<>(SB), Y7, Y7 \
	VPSLLD       $23, Y7, Y7 \
	VMULPS       Y7, Y9, E \
	VADDPS       expOne<>(SB), E, E \
	VMOVUPS      two<>(SB), Y7 \
	VDIVPS       E, Y7, Y7 \
	VMOVUPS      expOne<>(SB), E \
	VSUBPS       Y7, E, E \
	VCMPPS       $13, tanhOneMin<>(SB), A, Y7 \
	VBLENDVPS    Y7, expOne<>(SB), E, E

// func capRowAVX(r, soft *float32, n int, k, c, slope float32, off, step int32) (mx float32)
//
// For j < n (a multiple of 8), with x = k·r[j] and t = tanh x (tanh32 in
// kernels.go): r[j] = c·t − slope·|off + j·step| and, when soft is not
// nil, soft[j] = 1 − t²; returns the largest new r[j] (−Inf for n = 0).
// Every distance fits an int32 lane. Each group of 8 lanes computes the
// polynomial only when one of its |x| is below 0.55 and the exponential
// only when one is not, blending when it needs both.
TEXT ·capRowAVX(SB), NOSPLIT, $0-52
	MOVQ         r+0(FP), DI
	MOVQ         soft+8(FP), SI
	MOVQ         n+16(FP), CX
	VBROADCASTSS k+24(FP), Y15
	VBROADCASTSS c+28(FP), Y14
	VBROADCASTSS slope+32(FP), Y13
	MOVL         slope+32(FP), R8
	DISTINIT(off+36(FP), step+40(FP))
	ROWLOOP(capLoop, capDone)
	VMULPS    Y15, Y0, Y0                   // x
	VANDPS    absMask<>(SB), Y0, Y1         // a = |x|
	VXORPS    Y1, Y0, Y2                    // x's sign bit
	VCMPPS    $1, tanhPolyMax<>(SB), Y1, Y6 // a < 0.55 (NaN: no)
	VMOVMSKPS Y6, BX
	CMPL      BX, $0xff
	JEQ       capPoly
	TANHEXP(Y1, Y5)
	TESTL     BX, BX
	JEQ       capSign
	TANHPOLY(Y1, Y3, Y4)
	VBLENDVPS Y6, Y4, Y5, Y5
	JMP       capSign

capPoly:
	TANHPOLY(Y1, Y3, Y5)

capSign:
	VORPS Y2, Y5, Y5 // t

	TESTQ        SI, SI
	JEQ          capNoSoft
	VMOVUPS      expOne<>(SB), Y6
	VFNMADD231PS Y5, Y5, Y6
	VMOVUPS      Y6, (SI)(AX*1)

capNoSoft:
	VMULPS Y14, Y5, Y0
	TESTL  R8, R8
	JEQ    capStore // slope 0: no distances
	DIST(Y0, Y6)

capStore:
	VMAXPS Y0, Y10, Y10
	ROWNEXT(capLoop)

capDone:
	MAXRET(mx+48(FP))
	VZEROUPPER
	RET

// func biasRowAVX(r *float32, n int, k, slope float32, off, step int32) (mx float32)
//
// r[j] = k·r[j] − slope·|off + j·step| for j < n (a multiple of 8); returns
// the largest new r[j] (−Inf for n = 0). Every distance fits an int32 lane.
TEXT ·biasRowAVX(SB), NOSPLIT, $0-36
	MOVQ         r+0(FP), DI
	MOVQ         n+8(FP), CX
	VBROADCASTSS k+16(FP), Y15
	VBROADCASTSS slope+20(FP), Y13
	DISTINIT(off+24(FP), step+28(FP))
	ROWLOOP(biasLoop, biasDone)
	VMULPS Y15, Y0, Y0
	DIST(Y0, Y1)
	VMAXPS Y0, Y10, Y10
	ROWNEXT(biasLoop)

biasDone:
	MAXRET(mx+32(FP))
	VZEROUPPER
	RET

// func addBiasAVX(r, bias *float32, n int, k float32) (mx float32)
//
// r[j] = k·r[j] + bias[j] (fused), or −Inf where bias[j] is −Inf, for
// j < n (a multiple of 8); returns the largest new r[j] (−Inf for n = 0),
// in Y10 as the distance kernels keep it.
TEXT ·addBiasAVX(SB), NOSPLIT, $0-36
	MOVQ         r+0(FP), DI
	MOVQ         bias+8(FP), SI
	MOVQ         n+16(FP), CX
	VBROADCASTSS k+24(FP), Y15
	VMOVUPS      negInf<>(SB), Y14
	VMOVUPS      negInf<>(SB), Y10
	ROWLOOP(addBiasLoop, addBiasDone)
	VMOVUPS     (SI)(AX*1), Y1
	VFMADD213PS Y1, Y15, Y0     // k·r + bias
	VCMPPS      $0, Y14, Y1, Y2 // bias = −Inf
	VBLENDVPS   Y2, Y14, Y0, Y0
	VMAXPS      Y0, Y10, Y10
	ROWNEXT(addBiasLoop)

addBiasDone:
	MAXRET(mx+32(FP))
	VZEROUPPER
	RET

// func dsRowSoftAVX(p, dp, soft *float32, n int, d float32)
//
// dp[j] = p[j]·(dp[j] − d)·soft[j] for j < n (a multiple of 8).
TEXT ·dsRowSoftAVX(SB), NOSPLIT, $0-36
	MOVQ         p+0(FP), SI
	MOVQ         dp+8(FP), DI
	MOVQ         soft+16(FP), DX
	MOVQ         n+24(FP), CX
	VBROADCASTSS d+32(FP), Y15
	ROWLOOP(dsSoftLoop, dsSoftDone)
	VSUBPS       Y15, Y0, Y0
	VMULPS       (SI)(AX*1), Y0, Y0
	VMULPS       (DX)(AX*1), Y0, Y0
	ROWNEXT(dsSoftLoop)

dsSoftDone:
	VZEROUPPER
	RET

// func dsRowVecSoftAVX(p, dp, d, soft *float32, n int)
//
// dp[j] = p[j]·(dp[j] − d[j])·soft[j] for j < n (a multiple of 8).
TEXT ·dsRowVecSoftAVX(SB), NOSPLIT, $0-40
	MOVQ p+0(FP), SI
	MOVQ dp+8(FP), DI
	MOVQ d+16(FP), DX
	MOVQ soft+24(FP), BX
	MOVQ n+32(FP), CX
	ROWLOOP(dsVecSoftLoop, dsVecSoftDone)
	VSUBPS (DX)(AX*1), Y0, Y0
	VMULPS (SI)(AX*1), Y0, Y0
	VMULPS (BX)(AX*1), Y0, Y0
	ROWNEXT(dsVecSoftLoop)

dsVecSoftDone:
	VZEROUPPER
	RET

// func scaleRowAVX(a *float32, n int, s float32)
//
// a[j] *= s for j < n (a multiple of 8).
TEXT ·scaleRowAVX(SB), NOSPLIT, $0-20
	MOVQ         a+0(FP), DI
	MOVQ         n+8(FP), CX
	VBROADCASTSS s+16(FP), Y15
	ROWLOOP(scaleLoop, scaleDone)
	VMULPS Y15, Y0, Y0
	ROWNEXT(scaleLoop)

scaleDone:
	VZEROUPPER
	RET

// Philox4x32-10 (dropper.block in dropout.go): the multipliers, the low
// byte of a word, and the bits 1, 2, 4, … 0x8000 of the 16 keys of a
// block.
VCONST(philoxM0, 0xD2511F53)
VCONST(philoxM1, 0xCD9E8D57)
VCONST(low8, 0x000000ff)
VCONST(keyBit0, 0x01)
VCONST(keyBit1, 0x02)
VCONST(keyBit2, 0x04)
VCONST(keyBit3, 0x08)
VCONST(keyBit4, 0x10)
VCONST(keyBit5, 0x20)
VCONST(keyBit6, 0x40)
VCONST(keyBit7, 0x80)
VCONST(keyBit8, 0x100)
VCONST(keyBit9, 0x200)
VCONST(keyBit10, 0x400)
VCONST(keyBit11, 0x800)
VCONST(keyBit12, 0x1000)
VCONST(keyBit13, 0x2000)
VCONST(keyBit14, 0x4000)
VCONST(keyBit15, 0x8000)

// MULHILO(M, C, HI, LO, T0, T1): HI, LO = the high and low words of the
// 32×32-bit products M·C lane-wise (VPMULUDQ takes the even lanes; the
// odd ones are shifted down to take them). T0, T1 are clobbered.
#define MULHILO(M, C, HI, LO, T0, T1) \
	VPMULUDQ M, C, T0 \
	VPSRLQ   $32, C, T1 \
	VPMULUDQ M, T1, T1 \
	VPSRLQ   $32, T0, HI \
	VPBLENDD $0xAA, T1, HI, HI \
	VPSLLQ   $32, T1, LO \
	VPBLENDD $0xAA, LO, T0, LO

// BCASTD(X, Y): Y = AX's low 32 bits in every lane (X is Y's low half).
#define BCASTD(X, Y) \
	VMOVD        AX, X \
	VPBROADCASTD X, Y

// KEEPBIT(W, BIT, T): Y15 |= BIT where the 8-bit draw in W's lanes
// (< 2⁸) is above Y14 (Threshold − 1). T is clobbered.
#define KEEPBIT(W, BIT, T) \
	VPCMPGTD Y14, W, T \
	VPAND    BIT<>(SB), T, T \
	VPOR     T, Y15, Y15

// KEEPWORD(W, B0, B1, B2, B3): KEEPBIT of W's four bytes (low byte
// first) with the bits B0 … B3. Y6 and Y7 are clobbered; Y12 is low8.
#define KEEPWORD(W, B0, B1, B2, B3) \
	VPAND    Y12, W, Y6 \
	KEEPBIT(Y6, B0, Y7) \
	VPSRLD   $8, W, Y6 \
	VPAND    Y12, Y6, Y6 \
	KEEPBIT(Y6, B1, Y7) \
	VPSRLD   $16, W, Y6 \
	VPAND    Y12, Y6, Y6 \
	KEEPBIT(Y6, B2, Y7) \
	VPSRLD   $24, W, Y6 \
	KEEPBIT(Y6, B3, Y7)

// func philoxAVX(bits *[8]uint32, keys *[10][2]uint32, grp, i, c2, c3, below uint32)
//
// bits[x] = the keep bits of the Philox4x32-10 block of counter (grp+x, i,
// c2, c3) and round keys keys[0 … 9], for x < 8: bit e set when byte e
// of the block (byte e mod 4 of word e/4, its low byte first) is above
// below (Threshold − 1).
TEXT ·philoxAVX(SB), NOSPLIT, $0-36
	MOVQ         bits+0(FP), DI
	MOVQ         keys+8(FP), SI
	MOVL         grp+16(FP), AX
	BCASTD(X0, Y0)
	VPADDD       laneIndex<>(SB), Y0, Y0
	MOVL         i+20(FP), AX
	BCASTD(X1, Y1)
	MOVL         c2+24(FP), AX
	BCASTD(X2, Y2)
	MOVL         c3+28(FP), AX
	BCASTD(X3, Y3)
	VMOVDQU      philoxM0<>(SB), Y4
	VMOVDQU      philoxM1<>(SB), Y5
	MOVQ         $10, CX

philoxRound:
	MULHILO(Y4, Y0, Y8, Y9, Y6, Y7)    // M0·c0
	MULHILO(Y5, Y2, Y10, Y11, Y6, Y7)  // M1·c2
	VPBROADCASTD (SI), Y12
	VPBROADCASTD 4(SI), Y13
	VPXOR        Y1, Y10, Y10
	VPXOR        Y12, Y10, Y0          // c0 = hi(M1·c2) ^ c1 ^ k0
	VMOVDQU      Y11, Y1               // c1 = lo(M1·c2)
	VPXOR        Y3, Y8, Y8
	VPXOR        Y13, Y8, Y2           // c2 = hi(M0·c0) ^ c3 ^ k1
	VMOVDQU      Y9, Y3                // c3 = lo(M0·c0)
	ADDQ         $8, SI
	DECQ         CX
	JNZ          philoxRound

	MOVL         below+32(FP), AX
	BCASTD(X14, Y14)
	VPXOR        Y15, Y15, Y15
	VMOVDQU      low8<>(SB), Y12
	KEEPWORD(Y0, keyBit0, keyBit1, keyBit2, keyBit3)
	KEEPWORD(Y1, keyBit4, keyBit5, keyBit6, keyBit7)
	KEEPWORD(Y2, keyBit8, keyBit9, keyBit10, keyBit11)
	KEEPWORD(Y3, keyBit12, keyBit13, keyBit14, keyBit15)
	VMOVDQU      Y15, (DI)
	VZEROUPPER
	RET

// func dropRowAVX(r *float32, bits *uint32, n int, f0, f1 float32)
//
// r[j] *= f1 where bit j mod 8 of bits[j/8] is set, else f0, for j < n
// (a multiple of 8): the keep bits of a row's groups of 8 keys.
TEXT ·dropRowAVX(SB), NOSPLIT, $0-32
	MOVQ         r+0(FP), DI
	MOVQ         bits+8(FP), SI
	MOVQ         n+16(FP), CX
	VBROADCASTSS f0+24(FP), Y13
	VBROADCASTSS f1+28(FP), Y14
	VMOVDQU      laneBit<>(SB), Y15
	ROWLOOP(dropLoop, dropDone)
	MOVQ         AX, BX
	SHRQ         $3, BX                // 32 bytes of r per 4 bytes of bits
	VPBROADCASTD (SI)(BX*1), Y1
	VPAND        Y15, Y1, Y1
	VPCMPEQD     Y15, Y1, Y1           // kept lanes
	VBLENDVPS    Y1, Y14, Y13, Y2
	VMULPS       Y2, Y0, Y0
	ROWNEXT(dropLoop)

dropDone:
	VZEROUPPER
	RET

// func dropColAVX(dst, src *float32, bits *uint8, n int, bit uint32, f0, f1 float32)
//
// dst[i] = src[i]·f1 where bits[i] has bit set, else src[i]·f0, for i < n
// (a multiple of 8): one key's factors down the rows of a transposed
// tile, its group's keep bits one byte per row.
TEXT ·dropColAVX(SB), NOSPLIT, $0-44
	MOVQ         dst+0(FP), DI
	MOVQ         src+8(FP), SI
	MOVQ         bits+16(FP), DX
	MOVQ         n+24(FP), CX
	MOVL         bit+32(FP), AX
	BCASTD(X15, Y15)
	VBROADCASTSS f0+36(FP), Y13
	VBROADCASTSS f1+40(FP), Y14
	XORQ         BX, BX

dropColLoop:
	CMPQ      BX, CX
	JGE       dropColDone
	VPMOVZXBD (DX)(BX*1), Y1
	VPAND     Y15, Y1, Y1
	VPCMPEQD  Y15, Y1, Y1           // kept lanes
	VBLENDVPS Y1, Y14, Y13, Y2
	VMULPS    (SI)(BX*4), Y2, Y0
	VMOVUPS   Y0, (DI)(BX*4)
	ADDQ      $8, BX
	JMP       dropColLoop

dropColDone:
	VZEROUPPER
	RET
