#include "textflag.h"

// func float64sTo32(dst *byte, src *float64, n int)
TEXT ·float64sTo32(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $2, CX
	JZ   done

loop:
	MOVUPD   0(SI), X0
	MOVUPD   16(SI), X1
	CVTPD2PS X0, X0
	CVTPD2PS X1, X1
	MOVLHPS  X1, X0
	MOVUPS   X0, 0(DI)
	ADDQ     $32, SI
	ADDQ     $16, DI
	DECQ     CX
	JNZ      loop

done:
	RET

// func float64sTo32AVX2(dst *byte, src *float64, n int)
TEXT ·float64sTo32AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $4, CX
	JZ   done

loop:
	VCVTPD2PSY 0(SI), X0
	VCVTPD2PSY 32(SI), X1
	VCVTPD2PSY 64(SI), X2
	VCVTPD2PSY 96(SI), X3
	VMOVUPS    X0, 0(DI)
	VMOVUPS    X1, 16(DI)
	VMOVUPS    X2, 32(DI)
	VMOVUPS    X3, 48(DI)
	ADDQ       $128, SI
	ADDQ       $64, DI
	DECQ       CX
	JNZ        loop
	VZEROUPPER

done:
	RET

// func float32sTo64(dst *float64, src *byte, n int)
TEXT ·float32sTo64(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $2, CX
	JZ   done

loop:
	MOVUPS   0(SI), X0
	CVTPS2PD X0, X1
	MOVHLPS  X0, X0
	CVTPS2PD X0, X2
	MOVUPD   X1, 0(DI)
	MOVUPD   X2, 16(DI)
	ADDQ     $16, SI
	ADDQ     $32, DI
	DECQ     CX
	JNZ      loop

done:
	RET

// func float32sAdd(dst *float32, src *byte, n int)
TEXT ·float32sAdd(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $3, CX
	JZ   done

loop:
	MOVUPS 0(SI), X0
	MOVUPS 16(SI), X1
	MOVUPS 0(DI), X2
	MOVUPS 16(DI), X3
	ADDPS  X0, X2
	ADDPS  X1, X3
	MOVUPS X2, 0(DI)
	MOVUPS X3, 16(DI)
	ADDQ   $32, SI
	ADDQ   $32, DI
	DECQ   CX
	JNZ    loop

done:
	RET
