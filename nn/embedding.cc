// nn::Embedding (include/metajit/nn.h): a table of rows looked up by integer ids.
#include <metajit/composite.h>
#include <metajit/error.h>
#include <metajit/nn.h>

#include <string>

#include "base/dtype.h"
#include "nn/init.h"

namespace metajit::nn {

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim, std::optional<uint64_t> seed) {
  if (num_embeddings < 1 || embedding_dim < 1)
    throw Error("Embedding(num_embeddings = " + std::to_string(num_embeddings) +
                ", embedding_dim = " + std::to_string(embedding_dim) + "): the sizes must be >= 1");
  Init init(seed);
  weight_ = register_parameter("weight", init.normal({num_embeddings, embedding_dim}));
}

Var Embedding::operator()(const Var& ids) const {
  if (!ids.defined()) throw Error("Embedding: the ids are an undefined Var (default-constructed)");
  if (!is_index_dtype(ids.dtype()))
    throw DTypeError(std::string("Embedding(") + std::to_string(weight_.shape()[0]) + ", " +
                     std::to_string(weight_.shape()[1]) + "): ids of dtype " +
                     dtype_name(ids.dtype()) + " and shape " + shape_str(ids.shape()) +
                     "; expected " + kIndexDTypes);
  return embedding(weight_, ids);
}

}  // namespace metajit::nn
