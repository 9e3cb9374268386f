// The SIMT emulation in place of CUDA's <cooperative_groups.h> (see tests/simt/simt.h).
#pragma once
#include "simt.h"
