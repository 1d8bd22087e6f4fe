// metajit: a lazy tensor-expression JIT. Build graphs from meta-operators, and metajit fuses
// them into loop nests, generates C++/OpenMP, compiles, caches on disk and runs them.
#pragma once
#include "meta_ops/composite.h"
#include "meta_ops/dtype.h"
#include "meta_ops/error.h"
#include "meta_ops/ops.h"
#include "meta_ops/var.h"
#include "runtime/api.h"
#include "runtime/jit_function.h"
