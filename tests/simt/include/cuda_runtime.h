// The SIMT emulation in place of CUDA's <cuda_runtime.h> (see tests/simt/simt.h).
#pragma once
#include "simt.h"
