"""Header stand-ins: source text NVRTC is given in place of the C/C++ standard headers it lacks.

NVRTC has no C/C++ standard library, so `#include <cstdint>`, `<cmath>`, `<cuda_runtime.h>` & co. would fail. These
in-memory headers are passed to `nvrtcCreateProgram` and are looked up before any include directory; the real CUDA
headers (cuda_fp16.h, ...) come from the directories `platforms.cuda._locate.include_dirs()` finds.
"""

_STDINT = """#pragma once
typedef signed char int8_t; typedef short int16_t; typedef int int32_t; typedef long long int64_t;
typedef unsigned char uint8_t; typedef unsigned short uint16_t; typedef unsigned int uint32_t;
typedef unsigned long long uint64_t; typedef long long intptr_t; typedef unsigned long long uintptr_t;
#ifdef __cplusplus
namespace std { using ::int8_t; using ::int16_t; using ::int32_t; using ::int64_t; using ::uint8_t; using ::uint16_t;
using ::uint32_t; using ::uint64_t; using ::intptr_t; using ::uintptr_t; }
#endif
#define INT32_MAX 2147483647
#define INT32_MIN (-INT32_MAX - 1)
#define UINT32_MAX 4294967295u
#define INT64_MAX 9223372036854775807LL
"""
_CMATH = """#pragma once
namespace std {
using ::exp; using ::expf; using ::log; using ::logf; using ::sqrt; using ::sqrtf; using ::tanh; using ::tanhf;
using ::pow; using ::powf; using ::fabs; using ::fabsf; using ::fmax; using ::fmaxf; using ::fmin; using ::fminf;
using ::floor; using ::floorf; using ::ceil; using ::ceilf; using ::sin; using ::sinf; using ::cos; using ::cosf;
using ::erf; using ::erff; using ::exp2; using ::exp2f; using ::log2; using ::log2f; using ::fma; using ::fmaf;
using ::round; using ::roundf; using ::log1p; using ::log1pf; using ::expm1; using ::expm1f; using ::abs;
}
"""
SHIM_HEADERS = {
    "cstdint": _STDINT, "stdint.h": _STDINT, "cmath": _CMATH, "math.h": "#pragma once\n",
    "cuda_runtime.h": "#pragma once\n", "cuda_runtime_api.h": "#pragma once\n",
    "device_launch_parameters.h": "#pragma once\n", "cuda.h": "#pragma once\n", "cstddef": "#pragma once\n",
    "stddef.h": "#pragma once\n", "cfloat": "#pragma once\n#define FLT_MAX 3.402823466e+38F\n"
                                             "#define FLT_MIN 1.175494351e-38F\n#define FLT_EPSILON 1.192092896e-07F\n",
    "float.h": "#pragma once\n#define FLT_MAX 3.402823466e+38F\n#define FLT_MIN 1.175494351e-38F\n",
}
