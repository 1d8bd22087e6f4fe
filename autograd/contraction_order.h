// Summing a lazy product in an axis order the contraction schedule handles well. The gradient of
// a broadcast operand of a contraction is sum(u * v) over the broadcast axes, and its result
// keeps the operand's axis order: conv2d's weight gradient is [O, C, KH, KW], whose innermost
// axis (KW = 3) would be the column loop of the blocked kernel. Computed as [KH, KW, O, C] (small
// axes outside) and transposed back, the same contraction is 9 matrix products of 64 x 64 over
// N*OH*OW, and the transpose is a copy of the small result (codegen/kernel_patterns.h).
#pragma once
#include <optional>
#include <vector>

#include "meta_ops/node.h"

namespace metajit {

// sum(g, summed) for g a lazy product, reordered as above; nullopt when g is not a product or
// the result's innermost axis is already large (the order is kept as it is).
std::optional<Var> sum_product_in_contraction_order(const Var& g,
                                                    const std::vector<int64_t>& summed);

}  // namespace metajit
