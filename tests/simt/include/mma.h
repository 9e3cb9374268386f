// The SIMT emulation in place of CUDA's <mma.h> (see tests/simt/simt.h and wmma.h).
#pragma once
#include "simt.h"
#include "wmma.h"
