// metajit: a lazy tensor-expression JIT. Build graphs from meta-operators, and metajit fuses
// them into loop nests, generates C++/OpenMP or CUDA, compiles, caches on disk and runs them.
// This header and the ones it includes are the whole public API (docs/api.md).
#pragma once
#include "autograd.h"
#include "composite.h"
#include "device.h"
#include "dtype.h"
#include "error.h"
#include "eval.h"
#include "jit.h"
#include "nn.h"
#include "ops.h"
#include "runtime.h"
#include "train.h"
#include "var.h"
